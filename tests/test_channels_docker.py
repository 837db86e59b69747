"""Channels (PROTOCOL.md §7) between real containers, as HOST-CASES.md §1.10–1.11 lists them.

Every flow of these trees is a Docker image. Most run ``flow-runner/channel-plan``
(``tests/components/channel_plan.py``: it carries out the channel steps its input lists
and logs what each one saw; the image has no FLOW package, so the host accepts any
channel mapping to it); the port checks use the live-progress example's worker and
monitor, whose FLOW.md declare ports. Trees are run in-process with
``FlowHost(load_config(path)).run(...)``, so a test can watch the run's
:class:`~runner.host.channels.ChannelHub`; the live-progress example runs through
``flow-runner exec`` as a user would. Which containers a run created is read from the
engine's ``create`` events for this process's ``flow-runner.owner`` label (package
inspections left out). The host bounds receivers at ``queue_items = 2`` so that
back-pressure and ``LAGGED`` come after a few items; graces are 0.5 s.

Covered:

- CH-01: a direct pair whose writer moves to a child, or to an in-process capability
  provider, while the root reads: one item at sequence 1, then the end at 1.
- CH-02: a broadcast reader that lags fails alone (``LAGGED``, release ``failed``); the
  work it observed still completes and the run succeeds.
- CH-03: a mapping the callee's declared ports refuse is ``INVALID_INPUT``, starts no
  container and moves nothing (the endpoint then works elsewhere); a ports-declaring
  child left unwired is refused before its container exists.
- CH-04: a child forwards its incoming grant to a grandchild; the root reads its items.
- CH-05: the four monitor endings (clean, lagged, stopped, no-output).
- BC-01 / BC-02: broadcast suffix subscriptions; a lagged subscriber beside a late one.
- The live-progress example end to end.
- Isolation: a reader that never reads blocks only its own writer.
- A root killed mid-stream leaves no container, no source and no queued item; a root
  cancelled mid-stream gets a cooperative stop from a child blocked on back-pressure
  (§10: the host still answers the child's withdrawn ``channel/send``).

Without an engine every test fails (the ``docker_client`` fixture says how to start
one); none skips.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

import runner.flows
import runner.host.capabilities
import runner.host.channels.party
from execkit import ROOT, containers, exec_run, of_runner, profile_file
from runner.api import Execution
from runner.config import load_config
from runner.flows import FlowHost
from runner.host.channels import ChannelHub, HostEndpoint
from runner.host.driver import RunControl
from runner.json1 import JSONValue

PLAN = "flow-runner/channel-plan:latest"
WORKER = "flow-runner/examples-live-progress-worker:latest"
MONITOR = "flow-runner/examples-live-progress-monitor:latest"
GRACE = 0.5
QUEUE_ITEMS = 2
LABEL_RUN_ID = "flow-runner.run-id"
LABEL_PARENT = "flow-runner.parent-run-id"
LIVE_PROGRESS = ROOT / "examples" / "live-progress"


pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """``root`` may run every other flow; ``mid`` runs ``plan``; ``capable`` has a provider."""
    profile_file(tmp_path, "fast", cancel_grace=GRACE, exit_grace=GRACE)
    plan = f'image = "{PLAN}"\nprofile = "fast.toml"'
    path = tmp_path / "flow-runner.toml"
    path.write_text(f"""
[limits.channels]
queue_items = {QUEUE_ITEMS}

[flows.root]
{plan}
children = {{ plan = "plan", mid = "mid", worker = "worker", monitor = "monitor" }}

[flows.capable]
{plan}
[flows.capable.capabilities.events]
provider = "test-events"

[flows.mid]
{plan}
children = {{ next = "plan" }}

[flows.plan]
{plan}

[flows.worker]
image = "{WORKER}"
profile = "fast.toml"

[flows.monitor]
image = "{MONITOR}"
profile = "fast.toml"
""")  # fmt: skip
    return path


# ----- running a tree ---------------------------------------------------------------------


@dataclass
class Tree:
    """A finished run tree and the labels of every run container it created, in order."""

    execution: Execution
    created: list[dict[str, str]]

    @property
    def log(self) -> dict[str, Any]:
        """The root plan's log; the root must have succeeded with outcome ``done``."""
        result = self.execution.verdict.result
        assert result is not None, self.execution.report
        assert result["outcome"] == "done"
        output: Any = result["output"]
        log: dict[str, Any] = output["log"]
        return log

    @property
    def images(self) -> list[str]:
        return [labels["image"] for labels in self.created]

    def parent_of(self, run_id: str) -> str | None:
        (labels,) = [labels for labels in self.created if labels[LABEL_RUN_ID] == run_id]
        return labels.get(LABEL_PARENT)


def created_since(engine: Any, since: float) -> list[dict[str, str]]:
    """Labels of the run containers this process created since ``since`` (engine events)."""
    events = engine.events(
        since=since,
        until=time.time(),
        decode=True,
        filters={"type": "container", "event": "create", "label": of_runner(os.getpid())},
    )
    created = (event["Actor"]["Attributes"] for event in events)
    return [labels for labels in created if "flow-runner.inspect" not in labels]


def run_tree(
    engine: Any,
    config: Path,
    steps: list[dict[str, Any]],
    *,
    name: str = "root",
    seconds: float = 20,
    control: RunControl | None = None,
    beside: Callable[[], Any] | None = None,
) -> Tree:
    """Run flow ``name`` with the plan ``steps``; ``beside`` runs alongside until it ends."""
    since = time.time()

    async def main() -> Execution:
        host = FlowHost(load_config(config))
        plan: dict[str, Any] = {"steps": steps}
        try:
            async with anyio.create_task_group() as group:
                if beside is not None:
                    group.start_soon(beside)
                execution = await host.run(name, plan, deadline_seconds=seconds, control=control)
                group.cancel_scope.cancel()  # ``beside`` has nothing left to do
            return execution
        finally:
            await host.aclose()

    execution = anyio.run(main)
    return Tree(execution, created_since(engine, since))


def child(
    slot: str,
    op: str,
    steps: list[dict[str, Any]],
    channels: Mapping[str, str] | None = None,
    *,
    input: JSONValue | None = None,
) -> dict[str, Any]:
    """A ``child`` step running ``steps`` in the child (logged under ``op``)."""
    return {
        "child": slot,
        "op": op,
        "input": {"steps": steps} if input is None else input,
        "channels": dict(channels or {}),
        "log": op,
    }


def done(log: dict[str, Any]) -> dict[str, Any]:
    """What a ``child`` step logs for a child plan that completed with ``log``."""
    return {"outcome": "done", "output": {"log": log}}


def send(end: str, values: list[Any], log: str, *, close: bool = False) -> dict[str, Any]:
    return {"send": end, "values": values, "close": close, "log": log}


# ----- CH-01: a direct pair, the writer moved to a callee ----------------------------------


@pytest.mark.docker
def test_ch01_a_childs_item_arrives_at_sequence_1_then_the_end(engine: Any, config: Path) -> None:
    tree = run_tree(engine, config, [
        {"create": "a"},
        {"all": [
            child("plan", "writer", [send("port:events", ["hello"], "sent", close=True)],
                  {"events": "a.send"}),
            {"read": "a.receive", "log": "events"},
        ]},
    ])  # fmt: skip
    # One value read from start 1 is the item at sequence 1; then the end at 1.
    assert tree.log == {
        "writer": done({"sent": "ok"}),
        "events": {"start": 1, "values": ["hello"], "end": 1},
    }
    report = tree.execution.report
    (writer,) = report.children
    assert (report.status, writer.status, writer.outcome) == ("succeeded", "succeeded", "done")
    assert tree.images == [PLAN, PLAN]
    assert tree.parent_of(writer.run_id) == report.run_id


class EventsProvider:
    """An in-process provider that writes one item through its ``events`` port."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JSONValue, list[str]]] = []

    async def call(
        self, method: str, input: JSONValue, *, channels: Mapping[str, HostEndpoint]
    ) -> JSONValue:
        self.calls.append((method, input, sorted(channels)))
        events = channels["events"]
        assert (events.direction, events.delivery) == ("send", "direct")
        await events.send({"from": "provider", "input": input})
        await events.close()
        return "completed"


@pytest.mark.docker
def test_ch01_a_capability_writes_through_a_mapped_endpoint(
    engine: Any, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = EventsProvider()

    def load_provider(name: str, options: Mapping[str, JSONValue]) -> EventsProvider:
        assert (name, dict(options)) == ("test-events", {})
        return provider

    monkeypatch.setattr(runner.host.capabilities, "load_provider", load_provider)
    tree = run_tree(engine, config, [
        {"create": "a"},
        {"all": [
            {"capability": "events", "method": "emit", "op": "emit", "input": {"n": 1},
             "channels": {"events": "a.send"}, "log": "work"},
            {"read": "a.receive", "log": "events"},
        ]},
    ], name="capable")  # fmt: skip
    assert tree.log == {
        "work": "completed",
        "events": {"start": 1, "values": [{"from": "provider", "input": {"n": 1}}], "end": 1},
    }
    assert provider.calls == [("emit", {"n": 1}, ["events"])]
    assert tree.images == [PLAN]


# ----- CH-02: an observation failure is not a work failure ---------------------------------


@pytest.mark.docker
def test_ch02_a_lagged_observer_fails_alone_and_the_run_succeeds(engine: Any, config: Path) -> None:
    # The root reads item 1 (its room stays taken until its next read), then the child
    # writes three more at once: item 2 fills the queue, item 3 lags the reader.
    tree = run_tree(engine, config, [
        {"create": "b", "delivery": "broadcast"},
        {"subscribe": "b", "as": "watch"},
        {"all": [
            child("plan", "work", [
                send("port:events", [1], "first"),
                {"sleep": 0.5},
                send("port:events", [2, 3, 4], "rest", close=True),
            ], {"events": "b.send"}),
            {"read": "watch", "limit": 1, "log": "observed"},
        ]},
        {"read": "watch", "release": True, "log": "lagged"},
    ])  # fmt: skip
    assert tree.log == {
        "watch.start": 1,
        "work": done({"first": "ok", "rest": "ok"}),
        "observed": {"start": 1, "values": [1]},
        "lagged": {
            "start": 1,
            "values": [],
            "error": "LAGGED",
            "released": {"status": "failed", "code": "LAGGED"},
        },
    }
    report = tree.execution.report
    assert (report.status, report.outcome, report.error) == ("succeeded", "done", None)
    assert [c.status for c in report.children] == ["succeeded"]


# ----- CH-03: declared ports refuse a mapping; nothing moves --------------------------------


@pytest.mark.docker
def test_ch03_a_refused_mapping_moves_nothing_and_the_endpoint_works_elsewhere(
    engine: Any, config: Path
) -> None:
    tree = run_tree(engine, config, [
        {"create": "a"},
        # The worker's `progress` port takes a broadcast writer of contract progress.json.
        child("worker", "wrong-delivery", [], {"progress": "a.send"}, input={}),
        # The monitor's `progress` port takes a receiver.
        child("monitor", "wrong-direction", [], {"progress": "a.send"}, input={}),
        {"all": [
            child("plan", "writer", [send("port:events", ["kept"], "sent", close=True)],
                  {"events": "a.send"}),
            {"read": "a.receive", "log": "events"},
        ]},
    ])  # fmt: skip
    log = tree.log
    refused = {op: log.pop(op) for op in ("wrong-delivery", "wrong-direction")}
    assert {op: value["error"] for op, value in refused.items()} == {
        "wrong-delivery": "INVALID_INPUT",
        "wrong-direction": "INVALID_INPUT",
    }
    assert (
        "channels.progress: the port takes broadcast delivery, not direct"
        in (refused["wrong-delivery"]["message"])
    )
    assert (
        "channels.progress: the port takes a receive endpoint, not a send one"
        in (refused["wrong-direction"]["message"])
    )
    # The same writer, still the root's, moved to the next child and the stream completed.
    assert log == {
        "writer": done({"sent": "ok"}),
        "events": {"start": 1, "values": ["kept"], "end": 1},
    }
    # The refused children never got a container (nor a report).
    assert tree.images == [PLAN, PLAN]
    assert [c.target.split()[0] for c in tree.execution.report.children] == ["plan"]


@pytest.mark.docker
def test_ch03_a_child_without_its_required_ports_starts_no_container(
    engine: Any, config: Path
) -> None:
    tree = run_tree(engine, config, [child("worker", "unwired", [], {}, input={})])
    (unwired,) = tree.log.values()
    assert unwired["error"] == "INVALID_INPUT"
    assert "required channel port(s) items, progress are not connected" in unwired["message"]
    assert tree.images == [PLAN], "only the root's container was created"
    assert tree.execution.report.children == []


# ----- CH-04: forwarding an incoming grant ---------------------------------------------------


@pytest.mark.docker
def test_ch04_a_child_forwards_its_grant_to_a_grandchild(engine: Any, config: Path) -> None:
    leaf = [send("port:events", ["one", "two"], "sent", close=True)]
    tree = run_tree(engine, config, [
        {"create": "a"},
        {"all": [
            child("mid", "forward", [child("next", "leaf", leaf, {"events": "port:events"})],
                  {"events": "a.send"}),
            {"read": "a.receive", "log": "events"},
        ]},
    ])  # fmt: skip
    assert tree.log == {
        "forward": done({"leaf": done({"sent": "ok"})}),
        "events": {"start": 1, "values": ["one", "two"], "end": 2},
    }
    report = tree.execution.report
    (middle,) = report.children
    (grandchild,) = middle.children
    assert tree.images == [PLAN, PLAN, PLAN]
    assert tree.parent_of(middle.run_id) == report.run_id
    assert tree.parent_of(grandchild.run_id) == middle.run_id


# ----- CH-05: the four ways a monitor ends ------------------------------------------------


PLANNING = {"stage": "planning"}
TEXT = {"text": "Selected text"}


@pytest.mark.docker
def test_ch05_monitor_clean_lagged_stopped_and_no_output(engine: Any, config: Path) -> None:
    # Each monitor child reads the events the root fed it and forwards the selected text
    # to its `progress` grant (the plan names the value; the component cannot pick it).
    forward = send("port:progress", [TEXT["text"]], "forwarded", close=True)
    tree = run_tree(engine, config, [
        # clean: a closed direct stream.
        {"create": "clean-in"}, {"create": "clean-out"},
        send("clean-in.send", [PLANNING, TEXT], "fed-clean", close=True),
        # lagged: a broadcast subscription that fell behind before the monitor got it.
        {"create": "lag-in", "delivery": "broadcast"}, {"subscribe": "lag-in", "as": "lag-sub"},
        {"create": "lag-out"},
        send("lag-in.send", [PLANNING, TEXT, {"stage": "done"}], "fed-lagged", close=True),
        # stopped: the writer stays open; the monitor stops after two items.
        {"create": "stop-in"}, {"create": "stop-out"},
        send("stop-in.send", [PLANNING, TEXT], "fed-stopped"),
        # no-output: no progress grant at all.
        {"create": "quiet-in"},
        send("quiet-in.send", [PLANNING, TEXT], "fed-quiet", close=True),
        {"all": [
            child("plan", "clean", [
                {"read": "port:events", "log": "events"}, forward,
            ], {"events": "clean-in.receive", "progress": "clean-out.send"}),
            {"read": "clean-out.receive", "log": "clean-progress"},
            child("plan", "lagged", [
                {"read": "port:events", "release": True, "log": "events"},
                {"close": "port:progress", "log": "closed"},
            ], {"events": "lag-sub", "progress": "lag-out.send"}),
            {"read": "lag-out.receive", "log": "lagged-progress"},
            child("plan", "stopped", [
                {"read": "port:events", "limit": 2, "release": True, "log": "events"}, forward,
            ], {"events": "stop-in.receive", "progress": "stop-out.send"}),
            {"read": "stop-out.receive", "log": "stopped-progress"},
            child("plan", "no-output", [
                {"read": "port:events", "log": "events"},
            ], {"events": "quiet-in.receive"}),
        ]},
    ])  # fmt: skip
    both = [PLANNING, TEXT]
    assert tree.log == {
        "fed-clean": "ok",
        "lag-sub.start": 1,
        "fed-lagged": "ok",
        "fed-stopped": "ok",
        "fed-quiet": "ok",
        "clean": done({
            "events": {"start": 1, "values": both, "end": 2},
            "forwarded": "ok",
        }),
        "clean-progress": {"start": 1, "values": ["Selected text"], "end": 1},
        "lagged": done({
            "events": {"start": 1, "values": [], "error": "LAGGED",
                       "released": {"status": "failed", "code": "LAGGED"}},
            "closed": "ok",
        }),
        "lagged-progress": {"start": 1, "values": [], "end": 0},
        "stopped": done({
            "events": {"start": 1, "values": both, "released": {"status": "released"}},
            "forwarded": "ok",
        }),
        "stopped-progress": {"start": 1, "values": ["Selected text"], "end": 1},
        "no-output": done({"events": {"start": 1, "values": both, "end": 2}}),
    }  # fmt: skip
    report = tree.execution.report
    assert report.status == "succeeded"
    assert sorted(c.status for c in report.children) == ["succeeded"] * 4
    assert tree.images == [PLAN] * 5


# ----- BC-01 / BC-02: broadcast -------------------------------------------------------------


@pytest.mark.docker
def test_bc01_a_late_subscriber_sees_only_the_suffix(engine: Any, config: Path) -> None:
    tree = run_tree(engine, config, [
        {"create": "b", "delivery": "broadcast"},
        {"subscribe": "b", "as": "early"},
        send("b.send", ["before-late"], "first"),
        {"subscribe": "b", "as": "late"},
        send("b.send", ["after-late"], "second", close=True),
        {"read": "early", "log": "early"},
        {"read": "late", "log": "late"},
    ])  # fmt: skip
    assert tree.log == {
        "early.start": 1,
        "first": "ok",
        "late.start": 2,
        "second": "ok",
        "early": {"start": 1, "values": ["before-late", "after-late"], "end": 2},
        "late": {"start": 2, "values": ["after-late"], "end": 2},
    }


@pytest.mark.docker
def test_bc02_a_lagged_subscriber_fails_and_a_late_one_is_unaffected(
    engine: Any, config: Path
) -> None:
    tree = run_tree(engine, config, [
        {"create": "b", "delivery": "broadcast"},
        {"subscribe": "b", "as": "early"},
        send("b.send", ["one", "two", "three"], "burst"),  # 3 > queue_items: early lags
        {"subscribe": "b", "as": "late"},
        send("b.send", ["four"], "last", close=True),
        {"read": "early", "release": True, "log": "early"},
        {"read": "late", "log": "late"},
    ])  # fmt: skip
    assert tree.log == {
        "early.start": 1,
        "burst": "ok",
        "late.start": 4,
        "last": "ok",
        "early": {
            "start": 1,
            "values": [],
            "error": "LAGGED",
            "released": {"status": "failed", "code": "LAGGED"},
        },
        "late": {"start": 4, "values": ["four"], "end": 4},
    }
    assert tree.execution.report.status == "succeeded"


# ----- the live-progress example ----------------------------------------------------------


@pytest.mark.docker
def test_live_progress_example_through_the_cli(engine: Any) -> None:
    items = json.loads((LIVE_PROGRESS / "input.json").read_text())["items"]
    assert len(items) == 5
    ran = exec_run(
        "live-progress",
        "--config", LIVE_PROGRESS / "flow-runner.toml",
        "--input", f"@{LIVE_PROGRESS / 'input.json'}",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    progress = [
        {"item": item, "done": n, "result": item.upper()} for n, item in enumerate(items, 1)
    ]
    assert ran.printed == {
        "outcome": "done",
        "output": {
            "progress": progress,
            "worker": {"processed": 5},
            "monitor": {"seen": 5, "last": progress[-1]},
        },
    }


# ----- isolation: a stalled reader blocks only its own writer ---------------------------------


@pytest.mark.docker
def test_a_stalled_reader_does_not_slow_an_unrelated_writer(
    engine: Any, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Child "slow" reads nothing until child "streamer" says go, which it does only after
    # streaming 200 items to the root and closing: the root's writer to "slow" stays
    # blocked on back-pressure all that time. A host that let one full queue hold up
    # other streams would deadlock here (and hit the deadline).
    seals: list[dict[str, Any]] = []
    seal = runner.host.channels.party.seal

    def recording_seal(source: Any) -> None:
        others = sorted((s.last, len(s.pending)) for s in source.hub.sources if s is not source)
        seals.append({"sealed_at": source.last, "others": others})
        seal(source)

    monkeypatch.setattr(runner.host.channels.party, "seal", recording_seal)
    count = 200
    tree = run_tree(engine, config, [
        {"create": "stalled"}, {"create": "stream"}, {"create": "go"},
        {"all": [
            send("stalled.send", list(range(10)), "stalled-writer", close=True),
            child("plan", "slow", [
                {"read": "port:go", "log": "go"},
                {"read": "port:in", "log": "in"},
            ], {"in": "stalled.receive", "go": "go.receive"}),
            child("plan", "streamer", [
                send("port:events", list(range(count)), "streamed", close=True),
                send("port:go", ["go"], "go", close=True),
            ], {"events": "stream.send", "go": "go.send"}),
            {"read": "stream.receive", "log": "stream"},
        ]},
    ])  # fmt: skip
    assert tree.log == {
        "stalled-writer": "ok",
        "slow": done({
            "go": {"start": 1, "values": ["go"], "end": 1},
            "in": {"start": 1, "values": list(range(10)), "end": 10},
        }),
        "streamer": done({"streamed": "ok", "go": "ok"}),
        "stream": {"start": 1, "values": list(range(count)), "end": count},
    }  # fmt: skip
    # The first source to be sealed is the 200-item stream; at that moment the stalled
    # source had accepted only QUEUE_ITEMS items and had a send waiting for room, and the
    # go channel had nothing yet.
    assert seals[0] == {"sealed_at": count, "others": [(0, 0), (QUEUE_ITEMS, 1)]}
    assert [s["sealed_at"] for s in seals] == [count, 1, 10]


# ----- stopping a tree mid-stream ------------------------------------------------------------


def stop_mid_stream(
    engine: Any, config: Path, monkeypatch: pytest.MonkeyPatch, stop: Callable[[RunControl], None]
) -> tuple[Tree, ChannelHub, dict[str, int]]:
    """Run a child writing 20 items to a root that reads 3; ``stop`` the run once the
    queue is full and the child's next send waits for room. Returns the tree, its hub and
    the hub's figures at the stop."""
    hubs: list[ChannelHub] = []

    class RecordingHub(ChannelHub):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            hubs.append(self)

    monkeypatch.setattr(runner.flows, "ChannelHub", RecordingHub)
    control = RunControl()
    at_stop: dict[str, int] = {}

    def blocked() -> bool:
        return any(
            s.readers and s.readers[0].delivered == 3 and s.pending
            for hub in hubs
            for s in hub.sources
        )

    async def stop_when_blocked() -> None:
        with anyio.fail_after(30):
            while not blocked():
                await anyio.sleep(0.01)
        (hub,) = hubs
        queued = sum(len(reader.queue) for source in hub.sources for reader in source.readers)
        at_stop.update(sources=len(hub.sources), queued=queued)
        stop(control)

    tree = run_tree(engine, config, [
        {"create": "a"},
        {"all": [
            child("plan", "writer", [send("port:events", list(range(20)), "sent", close=True)],
                  {"events": "a.send"}),
            {"read": "a.receive", "limit": 3, "log": "events"},
        ]},
    ], control=control, beside=stop_when_blocked)  # fmt: skip
    (hub,) = hubs
    return tree, hub, at_stop


@pytest.mark.docker
def test_a_root_killed_mid_stream_leaves_no_container_and_no_queue(
    engine: Any, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, hub, at_kill = stop_mid_stream(engine, config, monkeypatch, RunControl.kill)
    # Items were flowing: one source, an item queued (the root's last read holds the
    # other place) and the writer's next send waiting.
    assert at_kill == {"sources": 1, "queued": QUEUE_ITEMS - 1}
    report = tree.execution.report
    assert tree.execution.verdict.result is None
    assert (report.status, report.condition) == ("failed", "CANCELLED")
    # The kill is reported only if it is what ended the root (137): its CANCELLED answer
    # and exit 0 may beat the SIGKILL (see below).
    assert report.host_kill == ("cancel" if report.exit_code == 137 else None), report.exit_code
    (writer,) = report.children
    assert (writer.status, writer.condition) == ("failed", "CANCELLED")
    assert tree.images == [PLAN, PLAN]
    # Nothing of the tree is left: no container (no_leaks checks again at teardown), no
    # live source, no queued item.
    assert containers(engine, of_runner(os.getpid())) == []
    assert hub.sources == set()  # and with them every queued item
    # kill() still sends the root its request/cancel, so the root's CANCELLED answer may
    # beat the SIGKILL. §11: a response followed by a nonzero exit is EXECUTION_FAILED; a
    # response followed by a clean exit 0 is that response (CANCELLED); no response
    # before the host's kill is CANCELLED.
    answered = "response" in report.timings
    expected = "EXECUTION_FAILED" if answered and report.exit_code != 0 else "CANCELLED"
    assert report.error is not None
    facts = (answered, report.exit_code, report.error.message)
    assert report.error.code == expected, facts


@pytest.mark.docker
def test_a_child_blocked_on_back_pressure_stops_cooperatively_when_the_root_is_cancelled(
    engine: Any, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PROTOCOL.md §10: on a root cancel the host keeps answering pending requests
    # (typically CANCELLED) and waits for the root response. The child's SDK withdraws
    # its waiting channel/send, gets its answer and answers its own root CANCELLED: no
    # kill is needed anywhere in the tree.
    tree, hub, at_cancel = stop_mid_stream(engine, config, monkeypatch, RunControl.cancel)
    assert at_cancel == {"sources": 1, "queued": QUEUE_ITEMS - 1}
    report = tree.execution.report
    (writer,) = report.children
    accepted = ("failed", "CANCELLED", None, ["accepted: the component answered with an error"])
    assert {
        run.target.split()[0]: (
            run.status,
            run.error and run.error.code,
            run.host_kill,
            run.reasons,
        )
        for run in (report, writer)
    } == {"root": accepted, "plan": accepted}
    assert hub.sources == set()  # and with them every queued item
