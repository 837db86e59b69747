"""A tree of child flows stops as one: every level cancelled at once, one grace, parallel kills.

Nine containers, a root and 8 nested children, each started by its parent through
``flow/run-child`` and each ignoring ``request/cancel`` (it says on stderr that it got
it): only the host's kill ends them. The tree must end within its deadline + one cancel
grace + 5 s (not a grace per level); after a SIGTERM every level must get its
``request/cancel`` at once (not after the teardown of the levels under it) and the
runner must end within the grace + 5 s; a second SIGTERM must end it at once; and
nothing of the tree may be left on the engine (the runner's ``flow-runner.owner``
label). The report's ``timings.total`` is the run's wall time, its tree's teardown
included. The same tree of local processes, driven through the Python API, checks the
same without an engine. Without an engine every container test fails (the ``engine``
fixture); none skips.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from execkit import StderrTap, containers, finish, of_runner, profile_file, start
from runner.api import Execution
from runner.config import load_config
from runner.flows import FlowHost
from runner.host.driver import RunControl

RELAY = "flow-runner/relay:latest"
LEVELS = 9
"""The root and its 8 nested children."""
DEADLINE = 10.0
MARGIN = 5.0
"""What the issue allows on top of the grace: teardown of every level, start-up, load."""
KILLED = 3.0
"""Seconds from a second signal to the runner's exit: kills and removals of every level."""
IGNORE_CANCEL = """\
import json, sys, time
run = json.loads(sys.stdin.readline())
below = run["params"]["input"]
if below > 0:
    call = {"operationId": "down", "slot": "next", "input": below - 1}
    frame = {"jsonrpc": "2.0", "id": "c1", "method": "flow/run-child", "params": call}
    sys.stdout.write(json.dumps(frame) + "\\n")
    sys.stdout.flush()
print(f"level running, {below} below", file=sys.stderr, flush=True)
for line in sys.stdin:
    if '"request/cancel"' in line:
        print(f"level {below} below ignores request/cancel", file=sys.stderr, flush=True)
time.sleep(3600)
"""
"""A level that starts the next one (while ``input`` > 0), says on stderr when it runs and
when ``request/cancel`` reaches it, and ignores it: only the host's kill ends it."""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def tree_config(directory: Path, grace: float) -> Path:
    """One flow, ``level``, whose child slot ``next`` is itself: 9 levels deep."""
    profile_file(directory, "tree", cancel_grace=grace, exit_grace=grace)
    path = directory / "flow-runner.toml"
    path.write_text(f"""
[limits]
max_depth = {LEVELS}
max_children = 16

[flows.level]
image = "{RELAY}"
profile = "tree.toml"
command = ["python3", "-c", {json.dumps(IGNORE_CANCEL)}]
children = {{ next = "level" }}
""")
    return path


@pytest.fixture
def runners(engine: Any) -> Iterator[list[subprocess.Popen[str]]]:
    """The runners a test starts; one a failed test left running is killed, and its
    containers removed (a tree stopped one level at a time takes minutes to end)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for runner in started:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
            for container in containers(engine, of_runner(runner.pid)):
                container.remove(force=True)


def start_tree(
    config: Path, runners: list[subprocess.Popen[str]], *options: str
) -> tuple[subprocess.Popen[str], StderrTap]:
    report = config.parent / "report.json"
    runner = start("level", "--config", config, "--input", str(LEVELS - 1), *options,
                   report=report)  # fmt: skip
    runners.append(runner)
    return runner, StderrTap(runner)


def wait_all_running(engine: Any, runner: subprocess.Popen[str], tap: StderrTap) -> None:
    """Return once every level's component has said it runs (the deepest says it last)."""
    tap.wait_for("level running, 0 below", timeout=60)
    running = engine.containers.list(filters={"label": of_runner(runner.pid), "status": "running"})
    assert len(running) == LEVELS, [c.labels for c in running]


def wait_all_asked_to_cancel(tap: StderrTap, timeout: float) -> None:
    """Return once ``request/cancel`` has reached every level (fail after ``timeout``)."""
    until = time.monotonic() + timeout
    for below in range(LEVELS):
        left = max(until - time.monotonic(), 0)
        tap.wait_for(f"level {below} below ignores request/cancel", timeout=left)


def assert_nothing_left(engine: Any, runner: subprocess.Popen[str]) -> None:
    left = containers(engine, of_runner(runner.pid))
    assert left == [], f"containers outlived the runner: {[c.name for c in left]}"


def root_created(engine: Any, runner: subprocess.Popen[str], since: float) -> float:
    """When the engine created the root's container (``time.time()`` seconds)."""
    events = engine.events(
        since=since,
        until=time.time(),
        decode=True,
        filters={"type": "container", "event": "create", "label": of_runner(runner.pid)},
    )
    for event in events:
        labels = event["Actor"]["Attributes"]
        if "flow-runner.inspect" not in labels and "flow-runner.parent-run-id" not in labels:
            return float(event["timeNano"]) / 1e9
    raise AssertionError("the engine saw no root container created")


def depth(report: dict[str, Any]) -> int:
    """Levels in a report: the run and its chain of children."""
    levels = 1
    while report["children"]:
        (report,) = report["children"]
        levels += 1
    return levels


@pytest.mark.docker
def test_the_deadline_stops_every_level_within_one_grace(
    engine: Any, tmp_path: Path, runners: list[subprocess.Popen[str]]
) -> None:
    grace = 2.0
    config = tree_config(tmp_path, grace)
    since, started = time.time(), time.monotonic()
    runner, tap = start_tree(config, runners, "--deadline", f"{DEADLINE}s")
    wait_all_running(engine, runner, tap)
    assert time.monotonic() < started + DEADLINE - 1, "all levels run well before the deadline"
    ran = finish(runner, config.parent / "report.json", started, tap=tap)
    ended = time.time()
    print(f"deadline {DEADLINE} s, grace {grace} s: ended after {ran.seconds:.1f} s")
    assert ran.returncode == 124, ran.stderr[-2000:]
    assert ran.error_code == "DEADLINE_EXCEEDED"
    assert ran.seconds < DEADLINE + grace + MARGIN, "one grace for the whole tree"
    assert_nothing_left(engine, runner)
    report = ran.report
    assert report is not None
    assert depth(report) == LEVELS
    # The report's total is the run's wall time, from its root's container to the
    # removal of every level's (the runner exits right after).
    lived = ended - root_created(engine, runner, since)
    total = report["timings"]["total"]
    print(f"report timings.total {total:.1f} s; the root's container to exit {lived:.1f} s")
    assert abs(total - lived) < 1, report["timings"]


@pytest.mark.docker
def test_sigterm_reaches_every_level_at_once_and_stops_within_one_grace(
    engine: Any, tmp_path: Path, runners: list[subprocess.Popen[str]]
) -> None:
    grace = 2.0
    config = tree_config(tmp_path, grace)
    runner, tap = start_tree(config, runners, "--deadline", "120s")
    wait_all_running(engine, runner, tap)
    signalled = time.monotonic()
    runner.send_signal(signal.SIGTERM)
    wait_all_asked_to_cancel(tap, timeout=grace / 2)
    ran = finish(runner, config.parent / "report.json", signalled, tap=tap)
    print(f"grace {grace} s: SIGTERM to exit {ran.seconds:.1f} s")
    assert ran.returncode == 130, ran.stderr[-2000:]
    assert ran.error_code == "CANCELLED"
    assert grace <= ran.seconds < grace + MARGIN, "one grace for the whole tree"
    assert_nothing_left(engine, runner)


@pytest.mark.docker
def test_a_second_sigterm_kills_every_level_at_once(
    engine: Any, tmp_path: Path, runners: list[subprocess.Popen[str]]
) -> None:
    grace = 30.0
    config = tree_config(tmp_path, grace)
    runner, tap = start_tree(config, runners, "--deadline", "120s")
    wait_all_running(engine, runner, tap)
    runner.send_signal(signal.SIGTERM)
    wait_all_asked_to_cancel(tap, timeout=5)
    signalled = time.monotonic()
    runner.send_signal(signal.SIGTERM)
    ran = finish(runner, config.parent / "report.json", signalled, tap=tap)
    print(f"grace {grace} s: second SIGTERM to exit {ran.seconds:.1f} s")
    assert ran.returncode == 130, ran.stderr[-2000:]
    assert ran.seconds < KILLED, "the second signal kills the whole tree at once"
    assert_nothing_left(engine, runner)


# ----- the same tree of local processes, through the Python API -----------------------------

PROCESS_GRACE = 2.0
"""The process backend's cancel grace (it has no profile)."""


def process_tree_config(directory: Path) -> Path:
    path = directory / "flow-runner.toml"
    command = json.dumps([sys.executable, "-c", IGNORE_CANCEL])
    path.write_text(f"""
[limits]
max_depth = {LEVELS}

[flows.level]
command = {command}
children = {{ next = "level" }}
""")
    return path


class Said:
    """What the levels of a tree said on stderr, as events a test waits for."""

    def __init__(self) -> None:
        self.text = ""
        self.running = anyio.Event()
        self.asked = anyio.Event()

    def __call__(self, chunk: bytes) -> None:
        self.text += chunk.decode()
        if "level running, 0 below" in self.text:
            self.running.set()
        if self.text.count("ignores request/cancel") == LEVELS:
            self.asked.set()


def levels_in(execution: Execution) -> int:
    report, levels = execution.report, 1
    while report.children:
        (report,) = report.children
        levels += 1
    return levels


def test_a_process_tree_past_its_deadline_stops_within_one_grace(tmp_path: Path) -> None:
    deadline = 3.0
    said = Said()

    async def main() -> Execution:
        host = FlowHost(load_config(process_tree_config(tmp_path)), stderr_sink=said)
        return await host.run("level", LEVELS - 1, deadline_seconds=deadline)

    started = time.monotonic()
    execution = anyio.run(main)
    seconds = time.monotonic() - started
    print(f"process tree, deadline {deadline} s, grace {PROCESS_GRACE} s: {seconds:.1f} s")
    assert execution.verdict.error is not None
    assert execution.verdict.error.code == "DEADLINE_EXCEEDED"
    assert levels_in(execution) == LEVELS
    assert said.text.count("ignores request/cancel") == LEVELS
    assert seconds < deadline + PROCESS_GRACE + 1.5, "one grace for the whole tree"
    assert abs(execution.report.timings["total"] - seconds) < 1, execution.report.timings


def test_a_process_tree_is_cancelled_at_every_level_at_once_and_killed_at_once(
    tmp_path: Path,
) -> None:
    said = Said()
    waited: dict[str, float] = {}

    async def main() -> Execution:
        host = FlowHost(load_config(process_tree_config(tmp_path)), stderr_sink=said)
        control = RunControl()
        async with anyio.create_task_group() as tg:

            async def stop() -> None:
                await said.running.wait()
                cancelled = time.monotonic()
                control.cancel()
                await said.asked.wait()
                waited["asked"] = time.monotonic() - cancelled
                killed = time.monotonic()
                control.kill()
                await ended.wait()
                waited["ended"] = time.monotonic() - killed

            ended = anyio.Event()
            tg.start_soon(stop)
            try:
                return await host.run("level", LEVELS - 1, deadline_seconds=60, control=control)
            finally:
                ended.set()

    execution = anyio.run(main)
    print(f"process tree: request/cancel at every level {waited['asked']:.2f} s after the")
    print(f"cancel; ended {waited['ended']:.2f} s after the kill")
    assert execution.verdict.error is not None
    assert execution.verdict.error.code == "CANCELLED"
    assert levels_in(execution) == LEVELS
    assert waited["asked"] < PROCESS_GRACE / 2, "request/cancel reaches every level at once"
    assert waited["ended"] < PROCESS_GRACE / 2, "a kill reaches every level at once"
