"""Child flows in real containers, through ``flow-runner exec NAME --config FILE``.

The same behaviours as ``test_flows.py`` (local-process flows), here with every flow in
``flow-runner/relay`` (images/relay: ``tests/components/relay.py``, which runs the child
flows and capability calls its input lists): nesting and its labels, deadlines, a root
cancel or deadline reaching every level, admission, operation identity, a failing child,
the research-report example, a capability contract and a kv store that outlives the
runner. Which containers a run made is read from the engine's ``create`` events filtered
by the runner's ``flow-runner.owner`` label, so nothing is inferred from the report
alone. Graces are 0.5 s (a profile file next to the configuration). Without an engine
every test fails (the ``docker_client`` fixture says how to start one); none skips.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from execkit import (
    ROOT,
    Exec,
    containers,
    finish,
    interrupt,
    of_run,
    of_runner,
    profile_file,
    start,
)

RELAY = "flow-runner/relay:latest"
GRACE = 0.5
LABEL_PARENT = "flow-runner.parent-run-id"
LABEL_RUN_ID = "flow-runner.run-id"
CONTRACTS = ROOT / "runner" / "host" / "capabilities" / "contracts"
EXAMPLE = ROOT / "examples" / "research-report"


pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """top -> middle -> bottom, side flows for deadlines, failure and capabilities."""
    profile_file(tmp_path, "fast", cancel_grace=GRACE, exit_grace=GRACE)
    flow = f'image = "{RELAY}"\nprofile = "fast.toml"'
    path = tmp_path / "flow-runner.toml"
    path.write_text(f"""
[limits]
max_depth = 4
max_children = 8

[flows.top]
{flow}
children = {{ next = "middle", bottom = "bottom", brief = "brief", broken = "broken" }}

[flows.middle]
{flow}
children = {{ next = "bottom" }}

[flows.bottom]
{flow}
deadline = "20s"

[flows.brief]
{flow}
deadline = "4s"

[flows.broken]
{flow}
command = ["python3", "-c", "raise SystemExit(7)"]

[flows.writer]
{flow}
[flows.writer.capabilities.artifacts]
provider = "artifacts"
options = {{ root = "out" }}
contract = "{CONTRACTS / "artifacts.json"}"

[flows.keeper]
{flow}
[flows.keeper.capabilities.kv]
provider = "kv"
options = {{ path = "state/kv.sqlite3" }}
contract = "{CONTRACTS / "kv.json"}"
""")  # fmt: skip
    return path


@dataclass
class Tree:
    """A finished runner and the labels of every container it created, in order."""

    ran: Exec
    created: list[dict[str, str]]

    @property
    def report(self) -> dict[str, Any]:
        assert self.ran.report is not None, self.ran.stderr[-2000:]
        return self.ran.report

    @property
    def output(self) -> dict[str, Any]:
        assert self.ran.returncode == 0, (self.ran.stdout, self.ran.stderr[-2000:])
        value: dict[str, Any] = self.ran.printed["output"]
        return value

    @property
    def run_ids(self) -> list[str]:
        return [labels[LABEL_RUN_ID] for labels in self.created]

    def parent_of(self, run_id: str) -> str | None:
        (labels,) = [labels for labels in self.created if labels[LABEL_RUN_ID] == run_id]
        return labels.get(LABEL_PARENT)


def created_by(engine: Any, pid: int, since: float) -> list[dict[str, str]]:
    """Labels of the run containers runner ``pid`` created since ``since`` (engine events).

    Containers that only read an image's package (never started) are left out."""
    events = engine.events(
        since=since,
        until=time.time(),
        decode=True,
        filters={"type": "container", "event": "create", "label": of_runner(pid)},
    )
    created = (event["Actor"]["Attributes"] for event in events)
    return [labels for labels in created if "flow-runner.inspect" not in labels]


def run_tree(
    engine: Any, config: Path, name: str, plan: Any, *options: str, timeout: float = 60
) -> Tree:
    """``flow-runner exec NAME --config CONFIG --input PLAN OPTIONS`` to its end.

    ``plan`` is sent as JSON text, except a string starting with ``@`` (a file)."""
    report = config.parent / "report.json"
    text = plan if isinstance(plan, str) and plan.startswith("@") else json.dumps(plan)
    since = time.time()
    runner = start(name, "--config", config, "--input", text, *options, report=report)
    ran = finish(runner, report, time.monotonic(), timeout)
    return Tree(ran, created_by(engine, runner.pid, since))


def child(op: str, slot: str, plan: Any = None) -> dict[str, Any]:
    return {"op": op, "slot": slot, "input": {"calls": []} if plan is None else plan}


def level(output: dict[str, Any], *path: int) -> dict[str, Any]:
    """The output of the child reached by following result indexes ``path``."""
    for index in path:
        result = output["results"][index]
        assert isinstance(result, dict) and result["outcome"] == "done", output
        output = result["output"]
    return output


def assert_all_gone(engine: Any, run_ids: list[str], exited: float) -> None:
    """No container of these runs exists within the cancel grace + 1 s of ``exited``."""
    left: list[Any] = []
    while time.monotonic() < exited + GRACE + 1:
        left = [c for run_id in run_ids for c in containers(engine, of_run(run_id))]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"containers outlived the runner: {[c.name for c in left]}")


# ----- nesting, labels and deadlines -------------------------------------------------------


@pytest.mark.docker
def test_three_levels_nest_results_reports_labels_and_deadlines(engine: Any, config: Path) -> None:
    plan = {"calls": [child("c", "next", {"calls": [child("g", "next")]})]}
    before_ms = time.time() * 1000
    tree = run_tree(engine, config, "top", plan, "--deadline", "60s")
    top = tree.output
    middle, bottom = level(top, 0), level(top, 0, 0)
    assert bottom["results"] == []
    report = tree.report
    (middle_report,) = report["children"]
    (bottom_report,) = middle_report["children"]
    assert bottom_report["children"] == []
    for each in (report, middle_report, bottom_report):
        assert (each["status"], each["backend"], each["exit_code"]) == ("succeeded", "docker", 0)
    assert [r["target"].split()[0] for r in (report, middle_report, bottom_report)] == [
        "top",
        "middle",
        "bottom",
    ]
    # The engine saw exactly three containers, each labelled with its parent's run id.
    ids = [report["run_id"], middle_report["run_id"], bottom_report["run_id"]]
    assert sorted(tree.run_ids) == sorted(ids) and len(set(ids)) == 3
    assert tree.parent_of(ids[0]) is None
    assert tree.parent_of(ids[1]) == ids[0]
    assert tree.parent_of(ids[2]) == ids[1]
    # Each level's deadline is no later than its parent's.
    assert before_ms + 60_000 <= top["deadline"] <= time.time() * 1000 + 60_000
    assert middle["deadline"] <= top["deadline"]
    assert bottom["deadline"] <= middle["deadline"]


@pytest.mark.docker
def test_a_child_never_outlives_its_parent_and_a_flow_cap_applies(
    engine: Any, config: Path
) -> None:
    # bottom's cap (20 s) is later than the parent's 10 s: it gets the parent's deadline;
    # brief's cap (4 s) is earlier: its own cap applies.
    plan = {"calls": [child("b", "bottom"), child("s", "brief")], "concurrent": True}
    before_ms = time.time() * 1000
    tree = run_tree(engine, config, "top", plan, "--deadline", "10s")
    after_ms = time.time() * 1000
    top = tree.output
    bottom, brief = level(top, 0), level(top, 1)
    assert before_ms + 10_000 <= top["deadline"] <= after_ms + 10_000
    assert top["deadline"] - 2_000 < bottom["deadline"] <= top["deadline"]
    assert before_ms + 4_000 <= brief["deadline"] <= after_ms + 4_000
    assert brief["deadline"] <= top["deadline"] - 4_000
    assert len(tree.report["children"]) == 2


# ----- a root cancel or deadline reaches every level --------------------------------------


SLEEPING_GRANDCHILD = {"calls": [child("c", "next", {"calls": [child("g", "next",
                       {"calls": [], "sleep": 30})]})]}  # fmt: skip


@pytest.mark.docker
def test_ctrl_c_at_the_root_removes_every_level(engine: Any, config: Path) -> None:
    report = config.parent / "report.json"
    runner = start("top", "--config", config, "--input", json.dumps(SLEEPING_GRANDCHILD),
                   report=report)  # fmt: skip
    running: list[Any] = []
    waited = time.monotonic()
    while len(running) < 3:
        assert runner.poll() is None, runner.communicate()
        assert time.monotonic() < waited + 30, "the three levels never ran at once"
        running = engine.containers.list(
            filters={"label": of_runner(runner.pid), "status": "running"}
        )
        time.sleep(0.05)
    # Wherever each level is in its run now, a Ctrl-C must end and remove all three.
    run_ids = [c.labels[LABEL_RUN_ID] for c in running]
    parents = [c.labels.get(LABEL_PARENT) for c in running]
    assert parents.count(None) == 1, "one root; the others name a running parent"
    assert {p for p in parents if p is not None} < set(run_ids)
    interrupted = time.monotonic()
    interrupt(runner)
    ran = finish(runner, report, interrupted)
    exited = time.monotonic()
    assert ran.returncode == 130, ran.stderr[-2000:]
    assert ran.error_code == "CANCELLED"
    assert ran.seconds < GRACE + 5, "the whole tree ends within the cancel grace, not 30 s"
    assert_all_gone(engine, run_ids, exited)
    assert containers(engine, of_runner(runner.pid)) == []


@pytest.mark.docker
def test_the_root_deadline_removes_every_level(engine: Any, config: Path) -> None:
    tree = run_tree(engine, config, "top", SLEEPING_GRANDCHILD, "--deadline", "2s")
    exited = time.monotonic()
    assert tree.ran.returncode == 124, tree.ran.stderr[-2000:]
    assert tree.ran.error_code == "DEADLINE_EXCEEDED"
    assert tree.report["condition"] == "DEADLINE_EXCEEDED"
    assert 2 <= tree.ran.seconds < 2 + GRACE + 5
    assert len(tree.created) == 3, "all three levels ran before the deadline"
    assert_all_gone(engine, tree.run_ids, exited)


# ----- admission and operation identity ------------------------------------------------------


@pytest.mark.docker
def test_an_unadmitted_slot_is_unavailable_and_starts_no_container(
    engine: Any, config: Path
) -> None:
    tree = run_tree(engine, config, "top", {"calls": [child("x", "elsewhere")]})
    assert tree.output["results"] == ["UNAVAILABLE"]
    assert "no child flow is admitted for slot 'elsewhere'" in tree.output["messages"]["x"]
    assert tree.report["children"] == []
    assert tree.run_ids == [tree.report["run_id"]], "only the root's container was created"
    assert not any(LABEL_PARENT in labels for labels in tree.created)


@pytest.mark.docker
def test_one_operation_id_runs_one_child_container(engine: Any, config: Path) -> None:
    same = child("shared", "next", {"calls": [], "sleep": 0.5})
    other = child("shared", "next", {"calls": [], "sleep": 0.6})
    # Two at once (joined), one after settlement (replayed), one with other input.
    tree = run_tree(engine, config, "top", {"calls": [[same, same], same, other]})
    (first, second), replayed, conflict = tree.output["results"]
    assert first["outcome"] == "done" and first["output"]["results"] == []
    assert second == first and replayed == first
    assert conflict == "OPERATION_CONFLICT"
    report = tree.report
    assert len(report["children"]) == 1 and report["dispatches"] == 1
    children = [labels for labels in tree.created if LABEL_PARENT in labels]
    assert [labels[LABEL_RUN_ID] for labels in children] == [report["children"][0]["run_id"]]
    assert children[0][LABEL_PARENT] == report["run_id"]


# ----- a failing child --------------------------------------------------------------------


@pytest.mark.docker
def test_a_failing_child_is_execution_failed_and_the_parent_recovers(
    engine: Any, config: Path
) -> None:
    tree = run_tree(engine, config, "top", {"calls": [child("b", "broken"), child("n", "next")]})
    failed, recovered = tree.output["results"]
    assert failed == "EXECUTION_FAILED"
    assert recovered["outcome"] == "done"
    report = tree.report
    assert (report["status"], report["outcome"]) == ("succeeded", "done")
    broken, middle = report["children"]
    assert (broken["status"], broken["exit_code"]) == ("failed", 7)
    assert broken["error"]["code"] == "EXECUTION_FAILED"
    assert middle["status"] == "succeeded"
    assert len(tree.created) == 3


# ----- capabilities through containers -----------------------------------------------------


@pytest.mark.docker
def test_research_report_example_through_the_cli(engine: Any, tmp_path: Path) -> None:
    text = (EXAMPLE / "flow-runner.toml").read_text()
    assert 'root = "artifacts"' in text and '"../../runner/' in text
    config = tmp_path / "flow-runner.toml"
    config.write_text(text.replace('"../../runner/', f'"{ROOT}/runner/'))
    tree = run_tree(engine, config, "research-report", "@examples/research-report/input.json")
    assert tree.ran.returncode == 0, tree.ran.stderr[-2000:]
    note = "A report on tides.\n"
    assert tree.ran.printed == {
        "outcome": "done",
        "output": {
            "research": {
                "outcome": "done",
                "output": {
                    "subject": "tides",
                    "facts": ["two a day", "driven by the moon", "springs at new and full moon"],
                },
            },
            "written": {"uri": "artifact://notes/tides.txt", "bytes": len(note.encode())},
            "missing": {"error": "not-found", "data": {"path": "notes/missing.txt"}},
        },
    }
    # The relative root resolved from the configuration's directory, not the checkout.
    assert (tmp_path / "artifacts" / "notes" / "tides.txt").read_text() == note
    assert [labels["image"] for labels in tree.created] == [
        "flow-runner/examples-research-report:latest",
        "flow-runner/examples-research:latest",
    ]
    assert tree.parent_of(tree.report["children"][0]["run_id"]) == tree.report["run_id"]


@pytest.mark.docker
def test_an_input_the_contract_refuses_is_invalid_input_in_the_component(
    engine: Any, config: Path, tmp_path: Path
) -> None:
    write = {"op": "bad", "slot": "artifacts", "method": "write"}
    plan = {"calls": [
        {**write, "input": {"text": "no path"}},
        {**write, "op": "good", "input": {"path": "ok.txt", "text": "fine"}},
        {**write, "op": "extra", "input": {"path": "x.txt", "text": "x", "mode": 6}},
    ]}  # fmt: skip
    tree = run_tree(engine, config, "writer", plan)
    bad, good, extra = tree.output["results"]
    assert bad == extra == "INVALID_INPUT"
    assert good == {"value": {"uri": "artifact://ok.txt", "bytes": 4}}
    messages = tree.output["messages"]
    assert set(messages) == {"bad", "extra"}
    # Refused by the contract's schema (the provider's own check words it otherwise).
    refusal = "https://flow-runner.dev/contracts/artifacts@1.0.0 /methods/write/input/"
    assert refusal + "required" in messages["bad"], messages
    assert refusal + "additionalProperties" in messages["extra"], messages
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ok.txt"]


@pytest.mark.docker
def test_kv_outlives_the_runner(engine: Any, config: Path, tmp_path: Path) -> None:
    def kv(op: str, method: str, input: Any) -> dict[str, Any]:
        return {"op": op, "slot": "kv", "method": method, "input": input}

    first = run_tree(engine, config, "keeper", {"calls": [
        kv("get-1", "get", {"key": "cursor"}),
        kv("put-1", "put", {"key": "cursor", "value": {"n": 41, "seen": ["a"]}}),
    ]})  # fmt: skip
    assert first.output["results"] == [
        {"error": "not-found", "data": {"key": "cursor"}},
        {"value": {"version": 1}},
    ]
    assert (tmp_path / "state" / "kv.sqlite3").is_file()
    second = run_tree(engine, config, "keeper", {"calls": [
        kv("get-2", "get", {"key": "cursor"}),
        kv("put-2", "put", {"key": "cursor", "value": 42}),
    ]})  # fmt: skip
    assert second.output["results"] == [
        {"value": {"value": {"n": 41, "seen": ["a"]}}},
        {"value": {"version": 2}},
    ]
    assert first.report["run_id"] != second.report["run_id"]
