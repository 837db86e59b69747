"""Channels through the real host with local-process flows (fast; containers elsewhere).

Every flow runs ``tests/components/channel_plan.py`` (written with the SDK) as a
process, so these tests cover the whole path — SDK, wire, driver, hub, broker, the
transfer into a child's ``flow/run`` and the sealing or abort at its end — without an
engine. Container behaviour is in ``test_channels_docker.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.api import Execution, Invocation, execute
from runner.config import ConfigError, load_config
from runner.flows import FlowHost
from runner.host import channels as hub_module
from runner.host.channels import HostEndpoint
from runner.sandbox.process import ProcessSandbox

ROOT = Path(__file__).resolve().parents[1]
PLAN = [sys.executable, str(ROOT / "tests" / "components" / "channel_plan.py")]


@pytest.fixture(autouse=True)
def _pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


@pytest.fixture
def hubs(monkeypatch: pytest.MonkeyPatch) -> list[hub_module.ChannelHub]:
    """Every hub the host makes, to check that no source outlives its tree."""
    made: list[hub_module.ChannelHub] = []

    class Recorded(hub_module.ChannelHub):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr("runner.flows.ChannelHub", Recorded)
    return made


def config(tmp_path: Path, extra: str = "") -> Path:
    command = ", ".join(f'"{part}"' for part in PLAN)
    path = tmp_path / "flow-runner.toml"
    path.write_text(f"""
{extra}
[flows.top]
command = [{command}]
children = {{ worker = "worker", other = "worker" }}

[flows.worker]
command = [{command}]
children = {{ worker = "worker" }}
""")
    return path


def run(path: Path, plan: Any, seconds: float = 20) -> Execution:
    async def main() -> Execution:
        host = FlowHost(load_config(path))
        try:
            return await host.run("top", plan, deadline_seconds=seconds)
        finally:
            await host.aclose()

    return anyio.run(main)


def log_of(execution: Execution) -> dict[str, Any]:
    assert execution.verdict.result is not None, execution.report
    output = execution.verdict.result["output"]
    assert isinstance(output, dict)
    log = output["log"]
    assert isinstance(log, dict)
    return log


def child(plan: list[Any], channels: Mapping[str, str], op: str = "w", slot: str = "worker") -> Any:
    return {"child": slot, "op": op, "input": {"steps": plan}, "channels": channels, "log": op}


def test_a_stream_each_way_between_parent_and_child(tmp_path: Path, hubs: list[Any]) -> None:
    worker = [
        {"read": "port:items", "log": "got"},
        {"send": "port:out", "values": ["w1", "w2"], "close": True, "log": "sent"},
    ]
    plan = {"steps": [
        {"create": "a"},
        {"create": "b"},
        {"all": [
            child(worker, {"items": "a.receive", "out": "b.send"}),
            {"send": "a.send", "values": [1, {"two": 2}, [3]], "close": True, "log": "sent"},
            {"read": "b.receive", "log": "back"},
        ]},
    ]}  # fmt: skip
    log = log_of(run(config(tmp_path), plan))
    assert log["back"] == {"start": 1, "values": ["w1", "w2"], "end": 2}
    got = log["w"]["output"]["log"]["got"]
    assert got == {"start": 1, "values": [1, {"two": 2}, [3]], "end": 3}
    assert hubs and all(hub.sources == set() for hub in hubs), "every source ended with its tree"


def test_a_writer_the_child_never_closed_is_sealed_when_it_succeeds(tmp_path: Path) -> None:
    plan = {"steps": [
        {"create": "a"},
        {"all": [
            child([{"send": "port:out", "values": ["x"], "log": "sent"}], {"out": "a.send"}),
            {"read": "a.receive", "log": "read"},
        ]},
    ]}  # fmt: skip
    assert log_of(run(config(tmp_path), plan))["read"] == {"start": 1, "values": ["x"], "end": 1}


def test_a_failing_child_aborts_the_stream_it_was_writing(tmp_path: Path) -> None:
    worker = [{"send": "port:out", "values": ["x"], "log": "sent"}, {"fail": "UNCERTAIN"}]
    plan = {"steps": [
        {"create": "a"},
        {"all": [
            child(worker, {"out": "a.send"}),
            {"read": "a.receive", "release": True, "log": "read"},
        ]},
    ]}  # fmt: skip
    log = log_of(run(config(tmp_path), plan))
    assert log["w"]["error"] == "UNCERTAIN"
    read = log["read"]
    assert "end" not in read, "a failed writer's stream never looks complete"
    assert read["error"] == "UNCERTAIN"
    assert read["released"] == {"status": "failed", "code": "UNCERTAIN"}


def test_a_joined_operation_moves_its_rights_once(tmp_path: Path) -> None:
    worker = [{"send": "port:out", "values": ["once"], "close": True, "log": "sent"}]
    same = child(worker, {"out": "a.send"}, op="w")
    plan = {"steps": [
        {"create": "a"},
        {"create": "b"},
        {"all": [same, {**same, "log": "w-again"}, {"read": "a.receive", "log": "read"}]},
        child(worker, {"out": "b.send"}, op="w") | {"log": "changed"},
    ]}  # fmt: skip
    execution = run(config(tmp_path), plan)
    log = log_of(execution)
    assert log["w"] == log["w-again"] and log["w"]["outcome"] == "done"
    assert log["read"] == {"start": 1, "values": ["once"], "end": 1}
    assert log["changed"]["error"] == "OPERATION_CONFLICT", "a changed mapping conflicts"
    assert execution.report.dispatches == 1
    assert len(execution.report.children) == 1


def test_a_refused_mapping_moves_nothing(tmp_path: Path) -> None:
    """Mapping a used endpoint fails the whole call; the unused one stays the caller's."""
    plan = {"steps": [
        {"create": "a"},
        {"create": "b"},
        {"send": "b.send", "values": [1], "log": "used"},
        child([], {"one": "a.send", "two": "b.send"}, op="refused"),
        {"send": "a.send", "values": ["still mine"], "close": True, "log": "kept"},
        {"read": "a.receive", "log": "read"},
        {"release": "b.receive", "log": "b"},
    ]}  # fmt: skip
    log = log_of(run(config(tmp_path), plan))
    assert log["refused"]["error"] == "INVALID_INPUT"
    assert "already used" in log["refused"]["message"]
    assert log["kept"] == "ok"
    assert log["read"] == {"start": 1, "values": ["still mine"], "end": 1}
    assert log["b"] == {"status": "released"}


def test_a_forwarded_grant_reaches_a_grandchild(tmp_path: Path) -> None:
    grandchild = [{"send": "port:events", "values": ["deep"], "close": True, "log": "sent"}]
    worker = [child(grandchild, {"events": "port:events"}, op="g")]
    plan = {"steps": [
        {"create": "a"},
        {"all": [child(worker, {"events": "a.send"}), {"read": "a.receive", "log": "read"}]},
    ]}  # fmt: skip
    log = log_of(run(config(tmp_path), plan))
    assert log["read"] == {"start": 1, "values": ["deep"], "end": 1}


def test_channel_bounds_come_from_the_configuration(tmp_path: Path) -> None:
    path = config(tmp_path, "[limits.channels]\nqueue_items = 2\n")
    plan = {"steps": [
        {"create": "s", "delivery": "broadcast"},
        {"subscribe": "s", "as": "slow"},
        {"send": "s.send", "values": [1, 2, 3], "close": True, "log": "sent"},
        {"read": "slow", "release": True, "log": "slow"},
    ]}  # fmt: skip
    log = log_of(run(path, plan))
    assert log["sent"] == "ok", "broadcast acceptance never waits for readers"
    assert log["slow"]["error"] == "LAGGED"
    assert log["slow"]["released"] == {"status": "failed", "code": "LAGGED"}


def test_a_bad_channel_bound_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"limits\.channels\.queue_items"):
        load_config(config(tmp_path, "[limits.channels]\nqueue_items = 0\n"))


def test_channels_work_in_a_run_without_configuration() -> None:
    """A lone component may stream to itself; the hub exists for every run."""
    plan = {"steps": [
        {"create": "a", "schema": {"type": "integer"}},
        {"all": [
            {"send": "a.send", "values": [1, 2], "close": True, "log": "sent"},
            {"read": "a.receive", "log": "read"},
        ]},
        {"create": "b", "schema": {"type": "integer"}},
        {"send": "b.send", "values": ["not an integer"], "log": "bad"},
        {"read": "b.receive", "release": True, "log": "b"},
    ]}  # fmt: skip

    async def main() -> Execution:
        sandbox = ProcessSandbox(PLAN, env={**os.environ, "PYTHONPATH": str(ROOT)})
        invocation = Invocation.within(20, input=plan)
        return await execute(sandbox, invocation, target="plan")

    log = log_of(anyio.run(main))
    assert log["read"] == {"start": 1, "values": [1, 2], "end": 2}
    assert log["bad"]["error"] == "INVALID_INPUT"
    assert log["b"]["error"] == "INVALID_INPUT", "a value invalid for the source aborts it"


class Sink:
    """A provider that reads the items mapped to its ``items`` port and counts them."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options

    async def call(self, method: str, input: Any, *, channels: Mapping[str, HostEndpoint]) -> Any:
        return {"count": len([value async for value in channels["items"]])}


class Plain:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options

    async def call(self, method: str, input: Any) -> Any:
        return "plain"


def test_a_capability_reads_a_stream_mapped_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    providers = {"sink": Sink, "plain": Plain}
    monkeypatch.setattr(
        "runner.host.capabilities.load_provider", lambda name, options: providers[name](options)
    )
    path = config(tmp_path)
    text = path.read_text().replace(
        "[flows.worker]",
        '[flows.top.capabilities.sink]\nprovider = "sink"\n'
        '[flows.top.capabilities.plain]\nprovider = "plain"\n\n[flows.worker]',
    )
    path.write_text(text)
    plan = {"steps": [
        {"create": "a"},
        {"capability": "plain", "method": "m", "op": "p", "channels": {"items": "a.receive"},
         "log": "plain"},
        {"all": [
            {"capability": "sink", "method": "count", "op": "c", "channels": {"items": "a.receive"},
             "log": "sink"},
            {"send": "a.send", "values": ["x", "y", "z"], "close": True, "log": "sent"},
        ]},
    ]}  # fmt: skip
    log = log_of(run(path, plan))
    assert log["plain"]["error"] == "INVALID_INPUT", "a provider without channels moves nothing"
    assert log["sink"] == {"count": 3}
