"""Configured flows and child runs, with local-process flows (fast; containers elsewhere)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.api import Execution
from runner.config import ConfigError, load_config
from runner.flows import FlowHost

ROOT = Path(__file__).resolve().parents[1]
RELAY = [sys.executable, str(ROOT / "tests" / "components" / "relay.py")]


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flow-runner.toml"
    path.write_text(text)
    return path


def relay_config(tmp_path: Path, extra: str = "") -> Path:
    command = ", ".join(f'"{part}"' for part in RELAY)
    return write_config(
        tmp_path,
        f"""
[limits]
max_depth = 4
max_children = 8
{extra}

[flows.top]
command = [{command}]
children = {{ next = "middle", again = "middle" }}

[flows.middle]
command = [{command}]
children = {{ next = "bottom" }}

[flows.bottom]
command = [{command}]
deadline = "20s"
""",
    )


def run_flow(config: Path, name: str, plan: Any, seconds: float = 30) -> Execution:
    os.environ["PYTHONPATH"] = str(ROOT)

    async def main() -> Execution:
        return await FlowHost(load_config(config)).run(name, plan, deadline_seconds=seconds)

    return anyio.run(main)


def test_three_levels_nest_and_children_never_outlive_the_parent(tmp_path: Path) -> None:
    grandchild = {"calls": []}
    child = {"calls": [{"op": "g", "slot": "next", "input": grandchild}]}
    before = time.time() * 1000
    execution = run_flow(relay_config(tmp_path), "top", {"calls": [{"op": "c", "slot": "next",
                         "input": child}]}, seconds=30)  # fmt: skip
    assert execution.verdict.result is not None, execution.report
    top = execution.verdict.result["output"]
    middle = top["results"][0]["output"]
    bottom = middle["results"][0]["output"]
    assert top["deadline"] <= before + 30_000 + 1000
    assert middle["deadline"] <= top["deadline"]
    assert bottom["deadline"] <= middle["deadline"]
    # The bottom flow's own 20 s cap applies: without it, it would inherit its parent's
    # deadline, 30 s from the top's launch (5 s of slack for starting the levels under load).
    assert bottom["deadline"] <= top["deadline"] - 5_000, "the bottom flow's own cap applies"
    report = execution.report
    assert len(report.children) == 1 and len(report.children[0].children) == 1
    assert report.children[0].children[0].status == "succeeded"


def test_unadmitted_slot_is_unavailable_without_a_run(tmp_path: Path) -> None:
    execution = run_flow(relay_config(tmp_path), "bottom",
                         {"calls": [{"op": "x", "slot": "next", "input": None}]})  # fmt: skip
    assert execution.verdict.result is not None
    assert execution.verdict.result["output"]["results"] == ["UNAVAILABLE"]
    assert execution.report.children == []


def test_depth_limit_answers_resource_exhausted(tmp_path: Path) -> None:
    deep: Any = {"calls": []}
    for _ in range(5):
        deep = {"calls": [{"op": "d", "slot": "next", "input": deep}]}
    config = (
        relay_config(tmp_path)
        .read_text()
        .replace('children = { next = "bottom" }', 'children = { next = "middle" }')
    )
    path = write_config(tmp_path, config.replace("max_depth = 4", "max_depth = 3"))
    execution = run_flow(path, "top", deep)
    assert execution.verdict.result is not None
    level = execution.verdict.result["output"]
    codes = []
    while level["results"] and isinstance(level["results"][0], dict):
        level = level["results"][0]["output"]
    codes = level["results"]
    assert codes == ["RESOURCE_EXHAUSTED"]


def test_concurrency_budget_answers_resource_exhausted(tmp_path: Path) -> None:
    path = relay_config(tmp_path, "").read_text().replace("max_children = 8", "max_children = 1")
    calls = [{"op": f"c{i}", "slot": "next", "input": {"sleep": 1}} for i in range(2)]
    execution = run_flow(write_config(tmp_path, path), "top",
                         {"calls": calls, "concurrent": True})  # fmt: skip
    assert execution.verdict.result is not None
    results = execution.verdict.result["output"]["results"]
    assert sorted(r if isinstance(r, str) else "ok" for r in results) == [
        "RESOURCE_EXHAUSTED",
        "ok",
    ]


def test_joined_child_calls_run_one_child(tmp_path: Path) -> None:
    same = {"op": "shared", "slot": "next", "input": {"sleep": 0.5}}
    execution = run_flow(relay_config(tmp_path), "top", {"calls": [same, same],
                         "concurrent": True})  # fmt: skip
    assert execution.verdict.result is not None
    first, second = execution.verdict.result["output"]["results"]
    assert first == second and isinstance(first, dict)
    assert len(execution.report.children) == 1
    assert execution.report.dispatches == 1


def test_child_failure_is_recoverable_by_the_parent(tmp_path: Path) -> None:
    config = relay_config(tmp_path).read_text() + '\n[flows.broken]\ncommand = ["false"]\n'
    config = config.replace('again = "middle"', 'again = "broken"')
    execution = run_flow(write_config(tmp_path, config), "top",
                         {"calls": [{"op": "b", "slot": "again", "input": None}]})  # fmt: skip
    assert execution.verdict.result is not None
    assert execution.verdict.result["output"]["results"] == ["EXECUTION_FAILED"]
    assert execution.report.children[0].error.code == "EXECUTION_FAILED"  # type: ignore[union-attr]


def test_config_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[flows.a]\nimage = "x"\ncolour = "red"\n')
    with pytest.raises(ConfigError, match=r"flow-runner.toml.*flows\.a\.colour.*unknown key"):
        load_config(path)
    path = write_config(tmp_path, '[flows.a]\nimage = "x"\nchildren = { s = "nope" }\n')
    with pytest.raises(ConfigError, match=r"flows\.a\.children\.s names flow 'nope'"):
        load_config(path)
    path = write_config(tmp_path, '[flows.a]\ndeadline = "soon"\nimage = "x"\n')
    with pytest.raises(ConfigError, match="not a duration"):
        load_config(path)
    path = write_config(tmp_path, "[limits]\nretained_results = 1024\n")
    with pytest.raises(ConfigError, match=r"limits: .*now retained_result_bytes, a byte budget"):
        load_config(path)


def test_children_stopped_by_a_root_cancel_stay_in_the_report(tmp_path: Path) -> None:
    from runner.host.driver import RunControl

    os.environ["PYTHONPATH"] = str(ROOT)
    config = relay_config(tmp_path)
    grandchild = {"sleep": 30}
    plan = {"calls": [{"op": "c", "slot": "next", "input": {
        "calls": [{"op": "g", "slot": "next", "input": grandchild}]}}]}  # fmt: skip

    async def main() -> Execution:
        control = RunControl()

        def cancel_once_the_grandchild_sleeps(chunk: bytes) -> None:
            if b"relay: sleeping" in chunk:  # the whole tree runs: stop it now
                control.cancel()

        host = FlowHost(load_config(config), stderr_sink=cancel_once_the_grandchild_sleeps)
        return await host.run("top", plan, deadline_seconds=30, control=control)

    execution = anyio.run(main)
    assert execution.verdict.error is not None
    assert execution.verdict.error.code == "CANCELLED"
    (middle,) = execution.report.children
    (bottom,) = middle.children
    assert middle.status == bottom.status == "failed"
    assert middle.error is not None and middle.error.code == "CANCELLED"
    assert bottom.error is not None and bottom.error.code == "CANCELLED"


def test_retained_result_bytes_from_the_configuration(tmp_path: Path) -> None:
    """512 bytes: one operation, its result on top; the next operationId is refused."""
    config = (
        relay_config(tmp_path)
        .read_text()
        .replace("max_children = 8", "max_children = 8\nretained_result_bytes = 512")
    )
    calls = [{"op": op, "slot": "next", "input": {}} for op in ("a", "b", "a")]
    execution = run_flow(write_config(tmp_path, config), "top", {"calls": calls})
    assert execution.verdict.result is not None
    first, second, replay = execution.verdict.result["output"]["results"]
    assert second == "RESOURCE_EXHAUSTED"
    assert replay == first and first["outcome"] == "done"
    assert len(execution.report.children) == 1


FAKE = [sys.executable, str(ROOT / "tests" / "fake_component.py")]


@pytest.mark.parametrize("ignore", [False, True], ids=["cooperative", "ignores-cancel"])
def test_a_child_of_a_root_past_its_deadline_gets_request_cancel(
    tmp_path: Path, ignore: bool
) -> None:
    """The root's deadline cancels the child's call while the child's own request/cancel
    is queued: it must still reach the child's stdin, then one grace (2 s), then the kill.
    The child records every frame it reads (fake scenario ``record-stdin``)."""
    relay = ", ".join(f'"{part}"' for part in RELAY)
    fake = ", ".join(f'"{part}"' for part in [*FAKE, "record-stdin"])
    config = write_config(tmp_path, f"""
[flows.top]
command = [{relay}]
children = {{ rec = "rec" }}

[flows.rec]
command = [{fake}]
""")  # fmt: skip
    record = tmp_path / "stdin.jsonl"
    plan = {"calls": [{"op": "r", "slot": "rec", "input": {"record": str(record),
                                                             "ignore": ignore}}]}  # fmt: skip
    started = time.monotonic()
    execution = run_flow(config, "top", plan, seconds=2)
    seconds = time.monotonic() - started
    assert execution.verdict.error is not None
    assert execution.verdict.error.code == "DEADLINE_EXCEEDED"
    read = [json.loads(line).get("method") for line in record.read_text().splitlines()]
    assert read == ["flow/run", "request/cancel"]
    (child,) = execution.report.children
    assert child.error is not None and child.error.code == "DEADLINE_EXCEEDED"
    if ignore:
        assert child.host_kill == "cancel" and child.exit_code == 137
        assert seconds < 2 + 2 + 1.5, f"{seconds:.1f} s: deadline + one grace, not two"
    else:
        assert child.host_kill is None and child.exit_code == 0, child
        assert seconds < 2 + 1.5, f"{seconds:.1f} s: the child stopped when asked"


def test_a_child_input_too_large_for_its_frame_fails_the_call_cleanly(tmp_path: Path) -> None:
    """The parent's 16 MiB flow/run-child frame is valid; the child's flow/run frame with
    the same input cannot be written, so the child is refused before it is launched (it
    would write a file at once) and the parent's call fails."""
    fake = ", ".join(
        f'"{part}"' for part in (sys.executable, str(ROOT / "tests" / "fake_component.py"))
    )
    started = tmp_path / "started"
    config = write_config(
        tmp_path,
        f"""
[flows.top]
command = [{fake}, "big-child-input"]
children = {{ next = "bottom" }}

[flows.bottom]
command = ["sh", "-c", "touch {started}; cat"]
""",
    )
    execution = run_flow(config, "top", None)
    assert execution.verdict.result == {"outcome": "done", "output": "EXECUTION_FAILED"}
    assert not started.exists()


def test_a_child_error_message_of_the_largest_size_fails_only_the_call(tmp_path: Path) -> None:
    """A child's error message may be 1,024 scalars; the parent's answer quotes it behind
    a prefix, and must still be an error the host can build (it once raised
    LocalProtocolError in the parent's host, whose text the parent then received)."""
    relay = ", ".join(f'"{part}"' for part in RELAY)
    fake = ", ".join(f'"{part}"' for part in [*FAKE, "standard-error-root"])
    config = write_config(tmp_path, f"""
[flows.top]
command = [{relay}]
children = {{ next = "loud" }}

[flows.loud]
command = [{fake}]
""")  # fmt: skip
    plan = {"calls": [{"op": "c", "slot": "next", "input": "x" * 1024}]}
    execution = run_flow(config, "top", plan)
    assert execution.verdict.result is not None, execution.verdict
    output = execution.verdict.result["output"]
    assert output["results"] == ["EXECUTION_FAILED"]
    assert output["messages"]["c"].startswith("the child flow failed: the component answered")
    assert output["messages"]["c"].endswith("[...]") and len(output["messages"]["c"]) == 1024


def test_a_runs_report_keeps_a_bounded_share_of_its_childrens() -> None:
    """A component may start children by the thousand, one after another, and every
    child report is kept until the root ends: the tree's first CHILD_REPORTS, over all
    its levels, are kept, each with the last CHILD_STDERR characters of its stderr; the
    rest are only counted."""
    from runner import flows
    from runner.api import Execution
    from runner.host.broker import ChildBudget
    from runner.host.channels import ChannelHub
    from runner.protocol.completion import Verdict
    from runner.report import RunReport

    tree = flows._Tree(ChildBudget(1), ChannelHub())
    elsewhere, children = flows._Children(tree), flows._Children(tree)
    noisy = "x" * (flows.CHILD_STDERR + 10) + "the end"
    for index in range(6):  # another run of the tree keeps some of the tree's share
        elsewhere.add(RunReport(run_id=f"e{index}", target="t", backend="process",
                                status="succeeded"))  # fmt: skip
    for index in range(flows.CHILD_REPORTS - 6 + 44):
        children.add(RunReport(run_id=f"c{index}", target="t", backend="process",
                               status="failed", stderr=noisy, stderr_bytes=len(noisy)))  # fmt: skip
    parent_run = Execution(
        Verdict(None, None, ()),
        RunReport(run_id="p", target="t", backend="process", status="succeeded"),
    )
    children.into(parent_run)
    parent = parent_run.report
    assert (len(parent.children), parent.children_omitted) == (flows.CHILD_REPORTS - 6, 44)
    kept = parent.children[0]
    assert len(kept.stderr) == flows.CHILD_STDERR and kept.stderr.endswith("the end")
    assert kept.stderr_truncated and kept.stderr_bytes == len(noisy)
    assert '"children_omitted": 44' in parent_run.report_json()
