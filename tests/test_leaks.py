"""No container outlives its run, however the run ends.

Fifty ``flow-runner exec`` runs of the fake component, six at a time, mixing every way a
run can end: success, failure, the deadline, out of memory, Ctrl-C, and SIGKILL of the
runner itself. A killed runner cannot clean up, so its container stays behind until a
sweep (``flow-runner gc``, or the one every ``exec`` starts with) removes it. Afterwards
no container made by any of these runners may remain. Concurrent sweeps race for the same
leftovers, which they must take in their stride; the sweep's judgement of a dead owner
(gone, reused pid, zombie) is also checked without an engine at the end.
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest
import requests

from execkit import (
    Exec,
    containers,
    fake,
    finish,
    flow_runner,
    interrupt,
    of_runner,
    owner,
    profile_file,
    start,
    wait_running,
)
from runner.sandbox.docker import LABEL_CREATED, LABEL_OWNER, LABEL_RUN_ID
from runner.sandbox.gc import is_abandoned, sweep

PARALLEL = 6
MIX = {"done": 14, "failed": 8, "deadline": 8, "oom": 6, "sigint": 8, "sigkill": 6}


@dataclass
class Plan:
    """One run of the mix: what to start, and what to do once its container runs."""

    kind: str
    index: int
    args: list[str]


@dataclass
class Ended:
    plan: Plan
    pid: int
    exec: Exec


@pytest.fixture
def profiles(tmp_path: Path) -> dict[str, Path]:
    return {
        "fast": profile_file(tmp_path, "fast"),
        "small": profile_file(tmp_path, "small", memory="64m"),
    }


def plans(profiles: dict[str, Path]) -> list[Plan]:
    fast, small = str(profiles["fast"]), str(profiles["small"])
    made: list[Plan] = []
    for kind, count in MIX.items():
        for i in range(count):
            if kind == "done":
                args = ["--input", str(i), *fake("echo")]
            elif kind == "failed":
                args = fake("exit7-silent" if i % 2 else "trailing-frame")
            elif kind == "deadline":
                args = ["--deadline", "1s", "--profile", fast, *fake("ignore-cancel")]
            elif kind == "oom":
                args = ["--profile", small, *fake("memory-hog")]
            elif kind == "sigint":
                scenario = "cooperative-cancel" if i % 2 else "ignore-cancel"
                args = ["--profile", fast, *fake(scenario)]
            else:
                args = ["--profile", fast, *fake("ignore-cancel")]
            made.append(Plan(kind, i, ["--quiet", *args]))
    random.Random(20240601).shuffle(made)
    return made


def perform(client: Any, plan: Plan, report: Path) -> Ended:
    started = time.monotonic()
    runner = start(*plan.args, report=report)
    if plan.kind in ("sigint", "sigkill"):
        wait_running(client, runner)
        if plan.kind == "sigint":
            interrupt(runner)
        else:
            runner.send_signal(signal.SIGKILL)
    return Ended(plan, runner.pid, finish(runner, report, started))


def check(ended: Ended) -> None:
    kind, ran = ended.plan.kind, ended.exec
    if kind == "sigkill":
        assert ran.returncode == -signal.SIGKILL
        assert ran.report is None
        return
    expected = {"done": 0, "failed": 4, "deadline": 124, "oom": 4, "sigint": 130}[kind]
    assert ran.returncode == expected, (kind, ran.stdout, ran.stderr[-1000:])
    assert ran.report is not None
    if kind == "done":
        assert ran.printed == {"outcome": "done", "output": ended.plan.index}
    elif kind == "failed":
        assert ran.error_code in ("EXECUTION_FAILED", "PROTOCOL_ERROR")
    elif kind == "deadline":
        assert ran.error_code == "DEADLINE_EXCEEDED"
        assert ran.report["host_kill"] == "cancel"
    elif kind == "oom":
        check_oom(ran)
    else:
        assert ran.error_code == "CANCELLED"


def check_oom(ran: Exec) -> None:
    """Out of memory: EXECUTION_FAILED with ``oom`` in the details, and in the report."""
    assert ran.printed["error"] == {
        "code": "EXECUTION_FAILED",
        "message": "the component ran out of memory (exit 137)",
        "details": {"exitCode": 137, "oom": True},
    }
    assert ran.report is not None
    assert ran.report["oom_killed"] is True
    assert ran.report["host_kill"] is None
    assert ran.report["exit_code"] == 137


@pytest.mark.docker
@pytest.mark.slow
def test_fifty_mixed_runs_leave_no_container(
    docker_client: Any, no_leaks: None, profiles: dict[str, Path], tmp_path: Path
) -> None:
    mix = plans(profiles)
    assert len(mix) == 50
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = [
            pool.submit(perform, docker_client, plan, tmp_path / f"report-{n}.json")
            for n, plan in enumerate(mix)
        ]
        ended = [future.result() for future in futures]
    failures = []
    for one in ended:
        try:
            check(one)
        except AssertionError as exc:
            failures.append(f"{one.plan.kind} #{one.plan.index}: {exc}")
    assert not failures, "\n".join(failures)
    assert Counter(one.plan.kind for one in ended) == MIX

    swept = flow_runner("gc")
    assert swept.returncode == 0, swept.stderr
    left = {one.pid: containers(docker_client, of_runner(one.pid)) for one in ended}
    assert {pid: found for pid, found in left.items() if found} == {}


@pytest.mark.docker
def test_a_killed_runner_leaves_its_container_and_gc_removes_it(
    docker_client: Any, no_leaks: None, profiles: dict[str, Path]
) -> None:
    runner = start("--quiet", "--profile", profiles["fast"], *fake("ignore-cancel"))
    container = wait_running(docker_client, runner)
    runner.send_signal(signal.SIGKILL)
    wait_zombie(runner.pid)  # dead, not reaped yet: gc must not take it for a live owner
    [left] = containers(docker_client, of_runner(runner.pid))
    assert left.id == container.id
    assert left.status == "running"
    swept = flow_runner("gc")
    assert swept.returncode == 0, swept.stderr
    assert container.id in swept.stdout
    assert containers(docker_client, of_runner(runner.pid)) == []
    runner.communicate(timeout=10)
    assert runner.returncode == -signal.SIGKILL


@pytest.mark.docker
def test_a_live_runners_container_survives_gc(
    docker_client: Any, no_leaks: None, profiles: dict[str, Path]
) -> None:
    runner = start("--quiet", "--profile", profiles["fast"], *fake("ignore-cancel"))
    container = wait_running(docker_client, runner)
    swept = flow_runner("gc")
    assert swept.returncode == 0, swept.stderr
    assert container.id not in swept.stdout
    assert [c.id for c in containers(docker_client, of_runner(runner.pid))] == [container.id]
    interrupt(runner)
    assert finish(runner, None, time.monotonic()).returncode == 130


# ----- the sweep, without an engine -----------------------------------------------------


def wait_zombie(pid: int, timeout: float = 10) -> None:
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + timeout
    while stat.read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, f"process {pid} did not die"
        time.sleep(0.01)


def test_a_zombie_owner_counts_as_gone() -> None:
    unreaped = subprocess.Popen(["true"])
    try:
        wait_zombie(unreaped.pid)
        labels = {LABEL_OWNER: owner(unreaped.pid), LABEL_CREATED: str(time.time_ns() // 10**6)}
        assert is_abandoned(labels, socket.gethostname())
    finally:
        unreaped.wait()


class RacingApi:
    """An engine API on which another sweep is already removing the first leftover."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.removed: list[str] = []

    def containers(self, **options: Any) -> list[dict[str, Any]]:
        if options["filters"]["label"] != LABEL_RUN_ID:
            return []  # the sweep also lists package-reading containers: none here
        return [{"Id": "a" * 64, "Labels": self.labels}, {"Id": "b" * 64, "Labels": self.labels}]

    def remove_container(self, container_id: str, **options: Any) -> None:
        if container_id.startswith("a"):
            response = requests.Response()
            response.status_code = 409
            raise docker.errors.APIError(
                "409 Client Error", response, explanation="removal is already in progress"
            )
        self.removed.append(container_id)


def test_a_sweep_skips_a_leftover_that_another_sweep_is_removing() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    labels = {LABEL_OWNER: owner(gone.pid), LABEL_CREATED: str(time.time_ns() // 10**6)}
    api = RacingApi(labels)
    assert sweep(SimpleNamespace(api=api)) == ["b" * 64]  # type: ignore[arg-type]
    assert api.removed == ["b" * 64]
