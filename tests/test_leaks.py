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

import contextlib
import dataclasses
import json
import random
import secrets
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from execkit import (
    CLI,
    FAKE_IMAGE,
    ROOT,
    Exec,
    containers,
    fake,
    finish,
    flow_runner,
    interrupt,
    of_runner,
    profile_file,
    start,
    wait_running,
)
from runner.sandbox.docker.http import EngineHttp
from runner.sandbox.errors import DockerSandboxError
from runner.sandbox.gc import Sweeper, sweep_engine
from runner.sandbox.labels import (
    KEY_FILE,
    LABEL_INSPECT,
    LABEL_MAC,
    LABEL_OWNER,
    LABEL_PROCESS,
    LABEL_RUN_ID,
    Process,
    label_key,
    machine_key,
    owner_labels,
    process_stat,
    signed,
)

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


@pytest.fixture
def own_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Runners and sweeps of this test sign with a key of their own, so that no sweep of
    another test or user on this engine can judge (and take) this test's containers."""
    monkeypatch.setenv("FLOW_RUNNER_STATE_DIR", str(tmp_path / "state"))


@pytest.mark.docker
def test_a_killed_runner_leaves_its_container_and_gc_removes_it(
    docker_client: Any, no_leaks: None, profiles: dict[str, Path], own_key: None
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
    docker_client: Any, no_leaks: None, profiles: dict[str, Path], own_key: None
) -> None:
    runner = start("--quiet", "--profile", profiles["fast"], *fake("ignore-cancel"))
    container = wait_running(docker_client, runner)
    swept = flow_runner("gc")
    assert swept.returncode == 0, swept.stderr
    assert container.id not in swept.stdout
    assert [c.id for c in containers(docker_client, of_runner(runner.pid))] == [container.id]
    interrupt(runner)
    assert finish(runner, None, time.monotonic()).returncode == 130


@pytest.mark.docker
def test_a_sweep_from_another_pid_namespace_leaves_a_live_runners_container(
    docker_client: Any, no_leaks: None, profiles: dict[str, Path], own_key: None
) -> None:
    """A runner in a container or pod on the same engine, with the same hostname, sees none
    of this host's pids: their absence there proves nothing."""
    runner = start("--quiet", "--profile", profiles["fast"], *fake("ignore-cancel"))
    container = wait_running(docker_client, runner)
    swept = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", *CLI, "gc"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    assert container.id not in swept.stdout
    assert [c.id for c in containers(docker_client, of_runner(runner.pid))] == [container.id]
    interrupt(runner)
    assert finish(runner, None, time.monotonic()).returncode == 130


@pytest.fixture
def forged(docker_client: Any, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """Containers someone else made with labels like ours for a dead owner, but no valid MAC.

    Their owner is on a host name of their own, which the test's sweep takes (in a UTS
    namespace): a sweep that trusted the owner label would take them for its own leftovers,
    and other sweeps on this engine (which do not share the name) leave them alone.
    """
    host, gone = f"forged-{uuid.uuid4().hex[:8]}", finished_process()
    labels = {
        LABEL_RUN_ID: f"forged-{tmp_path.name}",
        **owner_labels(gone),
        LABEL_OWNER: f"{host}:{gone.pid}",
    }
    made = [
        docker_client.api.create_container(FAKE_IMAGE, ["true"], labels=variant)["Id"]
        for variant in (
            labels,  # no MAC: also what an older flow-runner's labels look like
            {**labels, LABEL_MAC: "0" * 64},
            signed(labels, b"k" * 32),  # a MAC under another key
        )
    ]
    yield host, made
    for container_id in made:
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.api.remove_container(container_id, v=True, force=True)


@pytest.mark.docker
def test_gc_leaves_containers_with_forged_labels(
    docker_client: Any, forged: tuple[str, list[str]]
) -> None:
    host, made = forged
    swept = subprocess.run(
        ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh", *CLI, "gc"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    assert not any(container_id in swept.stdout for container_id in made)
    for container_id in made:
        assert docker_client.api.inspect_container(container_id)["Id"] == container_id


# ----- the sweep, without an engine -----------------------------------------------------


def wait_zombie(pid: int, timeout: float = 10) -> None:
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + timeout
    while stat.read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, f"process {pid} did not die"
        time.sleep(0.01)


def finished_process() -> Process:
    """The name of a process that ran here and is gone (reaped)."""
    ended = subprocess.Popen(["true"])
    try:
        wait_zombie(ended.pid)
        return process_named(ended.pid)
    finally:
        ended.wait()


def process_named(pid: int) -> Process:
    """``pid``'s name as its own labels would give it (a child: same namespace, same boot)."""
    found = process_stat(pid)
    assert found is not None
    here = Process.current()
    return Process(here.boot_id, here.pid_ns, pid, found[1])


@pytest.fixture
def sweeper() -> Sweeper:
    return Sweeper(secrets.token_bytes(32), Process.current(), int(time.time() * 1000) - 3_600_000)


def owned(sweeper: Sweeper, owner: Process, created_ms: int | None = None) -> dict[str, str]:
    """Labels as a runner made them, signed with the sweeper's key."""
    return signed({LABEL_RUN_ID: "r", **owner_labels(owner, created_ms)}, sweeper.key)


def test_a_zombie_owner_counts_as_gone(sweeper: Sweeper) -> None:
    unreaped = subprocess.Popen(["true"])
    try:
        wait_zombie(unreaped.pid)
        assert sweeper.abandoned(owned(sweeper, process_named(unreaped.pid)), "running")
    finally:
        unreaped.wait()


def test_a_live_owner_is_alive_and_a_gone_or_reused_pid_is_not(sweeper: Sweeper) -> None:
    me = Process.current()
    assert not sweeper.abandoned(owned(sweeper, me), "running")
    assert sweeper.abandoned(owned(sweeper, finished_process()), "running")
    reused = dataclasses.replace(me, start_ticks=me.start_ticks - 1)  # an earlier process
    assert sweeper.abandoned(owned(sweeper, reused), "running")


def test_an_owner_in_another_pid_namespace_cannot_be_judged(sweeper: Sweeper) -> None:
    gone = finished_process()
    elsewhere = dataclasses.replace(gone, pid_ns=gone.pid_ns + 1)
    assert not sweeper.abandoned(owned(sweeper, elsewhere), "exited")


def test_only_labels_signed_with_the_key_are_judged(sweeper: Sweeper) -> None:
    labels = owned(sweeper, finished_process())
    assert sweeper.abandoned(labels, "exited")
    unsigned = {k: v for k, v in labels.items() if k != LABEL_MAC}
    assert not sweeper.abandoned(unsigned, "exited")  # forged, or an older flow-runner's
    assert not sweeper.abandoned(signed(unsigned, b"k" * 32), "exited")  # another key
    alive = owned(sweeper, Process.current())  # a live owner's labels, edited to a dead one
    assert not sweeper.abandoned({**alive, LABEL_PROCESS: finished_process().label()}, "exited")
    assert not sweeper.abandoned({**labels, LABEL_RUN_ID: "another"}, "exited")
    assert not sweeper.abandoned({LABEL_OWNER: "garbage"}, "exited")


def test_an_owner_of_another_boot_is_dead_only_for_a_stopped_container_from_before_this_boot(
    sweeper: Sweeper,
) -> None:
    past = dataclasses.replace(Process.current(), boot_id=str(uuid.uuid4()))
    before, after = sweeper.booted_ms - 60_000, sweeper.booted_ms + 60_000
    assert sweeper.abandoned(owned(sweeper, past, before), "exited")
    assert sweeper.abandoned(owned(sweeper, past, before), "created")
    assert not sweeper.abandoned(owned(sweeper, past, before), "running")  # another machine's
    assert not sweeper.abandoned(owned(sweeper, past, before), None)
    assert not sweeper.abandoned(owned(sweeper, past, after), "exited")


def test_the_label_key_is_made_once_and_only_its_owner_may_read_it(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    key = label_key(directory)
    path = directory / KEY_FILE
    assert len(key) == 32 and path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    label_key.cache_clear()
    assert label_key(directory) == key  # read back, not made again
    assert sorted(p.name for p in directory.iterdir()) == [KEY_FILE]
    path.chmod(0o640)
    label_key.cache_clear()
    with pytest.raises(DockerSandboxError, match=rf"{path} is not a 32-byte file.*chmod 600"):
        label_key(directory)
    label_key.cache_clear()


def test_a_sweep_skips_a_leftover_that_another_sweep_is_removing(tmp_path: Path) -> None:
    """An engine on which another sweep is already removing the first leftover (409)."""
    labels = signed({LABEL_RUN_ID: "r", **owner_labels(finished_process())}, machine_key())
    leftovers = [{"Id": c * 64, "Labels": labels, "State": "exited"} for c in "ab"]
    racing = (409, {"message": "removal is already in progress"})
    replies = [(200, leftovers), (200, []), racing, (204, None)]
    engine = FakeEngine(tmp_path / "engine.sock", replies)
    try:
        assert sweep_engine(EngineHttp(str(engine.path), "", 0, "1.41", 10.0)) == ["b" * 64]
    finally:
        engine.close()
    lines = [request.split(" HTTP/")[0] for request in engine.requests]
    assert lines[2:] == [f"DELETE /v1.41/containers/{c * 64}?v=1&force=1" for c in "ab"]
    for line, label in zip(lines[:2], (LABEL_RUN_ID, LABEL_INSPECT), strict=True):
        path, _, query = line.partition("?")
        assert path == "GET /v1.41/containers/json"
        assert urllib.parse.parse_qs(query)["filters"] == [json.dumps({"label": [label]})]


class FakeEngine:
    """A unix socket answering one request per connection with the next (status, JSON)."""

    def __init__(self, path: Path, replies: list[tuple[int, object]]) -> None:
        self.path = path
        self.requests: list[str] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.thread = threading.Thread(target=self._serve, args=(replies,), daemon=True)
        self.thread.start()

    def _serve(self, replies: list[tuple[int, object]]) -> None:
        for status, document in replies:
            conn, _ = self.listener.accept()
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                self.requests.append(head.decode())
                body = b"" if document is None else json.dumps(document).encode()
                conn.sendall(
                    f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
                )

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)
