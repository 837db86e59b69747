"""The warm runner's pool: containers started ahead, each used by one run (runner.warm.pool).

Each test serves from a snapshot of the checkout (the ``runner`` package and the sandbox
profiles copied at its start), so an edit elsewhere in the checkout while it runs does not
change the installation's key under it (which would send its commands to no server).
The server's containers are found by their owner label (the server's pid); every test
ends with none of them left, and none of its runs'.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from execkit import FAKE_IMAGE, fake, of_runner, profile_file
from runner.sandbox.base import Attachment, LaunchRequest
from runner.sandbox.docker import sandbox as docker_sandbox
from runner.sandbox.docker.sandbox import DockerSandbox, PooledContainer
from runner.sandbox.labels import LABEL_CREATED, LABEL_OWNER, Process, machine_key, read_claim
from runner.sandbox.profiles import load_profile
from test_warm import Install, Server, installed, start_server, stop

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]
WAIT = 60.0
EARLY_WRITER = [FAKE_IMAGE, "--", "python3", "-c", "print('early', flush=True); input()"]
EARLY_EXIT = [FAKE_IMAGE, "--", "python3", "-c", "raise SystemExit(3)"]
GATED = """\
import json, os, socket, sys, time
root = json.loads(sys.stdin.readline())
gate = root["params"]["input"]["gate"]
print("blocked", gate, socket.gethostname(), file=sys.stderr, flush=True)
while not os.path.exists("/flow/attachments/gate/" + gate):
    time.sleep(0.05)
result = {"outcome": "done", "output": {"gate": gate}}
print(json.dumps({"jsonrpc": "2.0", "id": root["id"], "result": result}), flush=True)
"""
"""A component that answers once the file named by its input's ``gate`` appears in its
attachment ``gate``; it says on stderr that it waits, and in which container (hostname)."""


@pytest.fixture
def snapshot(tmp_path: Path) -> Iterator[Install]:
    """A console script over a copy of the checkout's code, in a socket directory of its own."""
    code = tmp_path / "code"
    skip = shutil.ignore_patterns("__pycache__")
    for part in ("runner", "sandbox-profiles", "spec"):
        if (ROOT / part).exists():
            shutil.copytree(ROOT / part, code / part, ignore=skip)
    yield from installed(tmp_path, code)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="fr-pool-", dir="/tmp")  # a unix socket's path is short


@pytest.fixture
def engine(docker_client: Any) -> Any:
    """The engine, with no check of every run-id container on it: the machine is shared
    with other test runs; :func:`serving` checks this test's own."""
    return docker_client


def left_by_the_dead(engine: Any, since_ms: int) -> list[str]:
    """Containers made since ``since_ms`` whose owner process has ended."""
    found = []
    listed = engine.containers.list(all=True, sparse=True, filters={"label": LABEL_CREATED})
    for container in listed:  # sparse: one list, no inspect of what may be gone meanwhile
        labels = container.attrs["Labels"]
        if int(labels[LABEL_CREATED]) >= since_ms:
            pid = int(labels[LABEL_OWNER].rpartition(":")[2])
            if not Path(f"/proc/{pid}").exists():
                found.append(container.id)
    return found


@pytest.fixture
def serving(snapshot: Install, engine: Any) -> Iterator[Callable[..., Server]]:
    """Start a server with the options given; on teardown stop it and check that neither it
    nor its runs left a container."""
    began_ms = time.time_ns() // 1_000_000
    started: list[Server] = []

    def start(*options: str) -> Server:
        found = start_server(snapshot, "--idle", "10m", *options)
        started.append(found)
        installs[found.pid] = snapshot
        return found

    yield start
    for found in started:
        stop(found)
        assert not of_server(engine, found.pid), "the server left containers"
    assert not left_by_the_dead(engine, began_ms), "runs left containers"


def of_server(engine: Any, pid: int, status: str | None = None) -> list[Any]:
    filters = {"label": of_runner(pid)} | ({"status": status} if status else {})
    return list(engine.containers.list(all=True, filters=filters))


def until(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """``check()``'s first true value, asked every 50 ms for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"still not: {what}"
        time.sleep(0.05)


def waiting(engine: Any, server: Server, count: int = 1) -> list[Any]:
    """Once ``count`` containers wait in the server's pool (its status says so), they."""
    until(f"{count} container(s) waiting in the pool", lambda: pool_says(server) == count)
    return of_server(engine, server.pid, "running")


def pool_says(server: Server) -> int | None:
    """The containers waiting in the server's pool, as ``daemon status`` says."""
    install = installs[server.pid]
    command = [str(install.script), "daemon", "status"]
    env = {**install.env, "WARM_MARK": os.devnull}
    said = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    for line in said.stdout.splitlines():
        if line.startswith("pool:"):
            return int(line.split()[1])
    return None


installs: dict[int, Install] = {}
"""The installation each started server serves."""


def exec_report(install: Install, tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    report = tmp_path / f"{name}.json"
    ran = install.run("exec", "--report", str(report), *args)
    assert ran.where == "warm", ran.stderr
    return dict(json.loads(report.read_text()))


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report but for what may differ between a fresh run and a pooled one."""
    return {
        key: value for key, value in report.items() if key not in ("run_id", "timings", "pooled")
    }


# ----- claim ----------------------------------------------------------------------------


def test_a_later_run_claims_the_waiting_container_and_reports_the_same(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    server = serving("--pool", "1")
    began = time.monotonic()
    fresh = exec_report(snapshot, tmp_path, "fresh", "--input", '{"n": 1}', *fake("echo"))
    assert "pool_wait" not in fresh["timings"] and fresh["pooled"] is False
    [ready] = waiting(engine, server)
    time.sleep(1.0)  # not a synchronisation: a wait in the pool for pool_wait to measure
    pooled = exec_report(snapshot, tmp_path, "pooled", "--input", '{"n": 1}', *fake("echo"))
    assert 1.0 <= pooled["timings"]["pool_wait"] <= time.monotonic() - began
    assert "create" not in pooled["timings"]
    assert pooled["pooled"] is True
    assert comparable(pooled) == comparable(fresh)
    until("the claimed container removed", lambda: ready.id not in ids(engine, server))
    failed = exec_report(snapshot, tmp_path, "failed", *fake("exit7-after-response"))
    assert "pool_wait" not in failed["timings"]  # another command: another configuration
    waiting(engine, server, 2)  # one of each configuration
    again = exec_report(snapshot, tmp_path, "again", *fake("exit7-after-response"))
    assert again["pooled"] is True
    assert comparable(again) == comparable(failed)


@pytest.mark.parametrize(
    "args",
    [
        [*fake("custom-outcome")],
        [*fake("error-result")],
        ["--deadline", "1s", "--profile", "FAST", *fake("ignore-cancel")],
    ],
    ids=["custom-outcome", "failure", "deadline"],
)
def test_a_pooled_report_is_a_fresh_ones(
    args: list[str],
    serving: Callable[..., Server],
    snapshot: Install,
    engine: Any,
    tmp_path: Path,
) -> None:
    args = [str(profile_file(tmp_path)) if arg == "FAST" else arg for arg in args]
    server = serving("--pool", "1")
    fresh = exec_report(snapshot, tmp_path, "fresh", *args)
    waiting(engine, server)
    pooled = exec_report(snapshot, tmp_path, "pooled", *args)
    assert (fresh["pooled"], pooled["pooled"]) == (False, True)
    assert comparable(pooled) == comparable(fresh)


def ids(engine: Any, server: Server) -> set[str]:
    """Sparse (one list call, no inspect per container): one removed between the list and
    its inspect, as the idle removal does while a test waits for it, is no error."""
    filters = {"label": of_runner(server.pid)}
    return {c.id for c in engine.containers.list(all=True, sparse=True, filters=filters)}


def test_pool_zero_keeps_no_container(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    server = serving("--pool", "0")
    for name in ("first", "second"):
        report = exec_report(snapshot, tmp_path, name, *fake("echo"))
        assert "pool_wait" not in report["timings"]
    assert not of_server(engine, server.pid)


def test_two_runs_racing_for_one_container_one_claims_it(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    server = serving("--pool", "1")
    exec_report(snapshot, tmp_path, "first", *fake("echo"))
    waiting(engine, server)
    reports = [tmp_path / f"race-{n}.json" for n in range(2)]
    racing = [snapshot.start("exec", "--report", str(path), *fake("echo")) for path in reports]
    for process in racing:
        process.communicate(timeout=120)
        assert process.returncode == 0
    timings = [json.loads(path.read_text())["timings"] for path in reports]
    assert sorted("pool_wait" in found for found in timings) == [False, True]


# ----- what is never pooled, and what is removed ------------------------------------------


class Recorded:
    """A pool that has nothing, and records what it was asked for."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def claim(self, config: Any, claimer: str) -> PooledContainer | None:
        self.asked.append(dict(config))
        return None

    def released(self, container_id: str) -> None:
        raise AssertionError("nothing was claimed")


def test_a_launch_with_a_writable_host_path_never_asks_the_pool(
    tmp_path: Path, engine: Any
) -> None:
    """A component waiting in a pool must not write to anyone's directory: a launch with
    a read-write host path is never pooled; one with read-only paths, or none, is, its
    mounts part of its configuration."""
    recorded = Recorded()
    docker_sandbox.use_pool(recorded)
    try:
        sandbox = DockerSandbox(FAKE_IMAGE, load_profile("default"), ["python3", "-c", "pass"])

        def claim(request: LaunchRequest) -> object:
            async def claiming() -> object:
                with contextlib.ExitStack() as held:
                    return await sandbox._claim(request, held)

            return anyio.run(claiming)

        shared = Path(tempfile_dir())  # one the component's user can reach
        shared.chmod(0o777)
        try:
            writable = Attachment("data", shared, "read-write")
            for request in (
                LaunchRequest(attachments=(writable,)),
                LaunchRequest(scratch_dir=shared),
            ):
                assert not sandbox.poolable(request)
                assert claim(request) is None
            assert recorded.asked == []
            assert claim(LaunchRequest()) is None
            read = Attachment("data", shared, "read")
            assert claim(LaunchRequest(attachments=(read,))) is None
        finally:
            shutil.rmtree(shared)
        plain, read_only = recorded.asked
        assert plain["image"].startswith("sha256:") and plain["command"][0] == "python3"
        assert not plain["host_config"].get("Mounts")
        [mount] = read_only["host_config"]["Mounts"]
        assert (mount["Source"], mount["ReadOnly"]) == (str(shared), True)
    finally:
        docker_sandbox.use_pool(None)


def test_a_read_only_attachment_is_pooled_and_a_swapped_one_goes_fresh(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    """A claimed container's mounts are checked as a fresh one's: the directory at the
    attachment's path replaced since the container was prepared, it is removed unused and
    the run launches fresh (and sees the new directory)."""
    server = serving("--pool", "1")
    shared = Path(tempfile_dir())  # one the component's user can reach
    try:
        data = shared / "data"
        data.mkdir()
        shared.chmod(0o755)
        args = ["--attach", f"data={data}:ro", *fake("echo")]
        first = exec_report(snapshot, tmp_path, "first", *args)
        waiting(engine, server)
        pooled = exec_report(snapshot, tmp_path, "pooled", *args)
        assert (first["pooled"], pooled["pooled"]) == (False, True)
        assert comparable(pooled) == comparable(first)
        [ready] = waiting(engine, server)
        data.rename(shared / "old")
        data.mkdir()  # the same path, another directory
        swapped = exec_report(snapshot, tmp_path, "swapped", *args)
        assert swapped["pooled"] is False and swapped["status"] == "succeeded"
        assert "create" in swapped["timings"]
        gone = lambda: ready.id not in ids(engine, server)  # noqa: E731
        until("the swapped container removed (not expired: that takes 60 s)", gone, 20)
    finally:
        shutil.rmtree(shared)


def test_a_read_write_scratch_run_leaves_nothing_waiting(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    server = serving("--pool", "1")
    scratch = Path(tempfile_dir())  # one the component's user can reach and write
    scratch.chmod(0o777)
    try:
        rw = exec_report(snapshot, tmp_path, "rw", "--scratch", str(scratch), *fake("echo"))
    finally:
        shutil.rmtree(scratch)
    assert rw["status"] == "succeeded" and "pool_wait" not in rw["timings"]
    exec_report(snapshot, tmp_path, "plain", *fake("echo"))
    waiting(engine, server)  # the plain run's: prepared after the read-write run's end
    [only] = of_server(engine, server.pid)
    assert not only.attrs["HostConfig"].get("Mounts")


def test_a_waiting_container_outliving_pool_idle_is_removed(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    server = serving("--pool", "1", "--pool-idle", "3s")
    exec_report(snapshot, tmp_path, "first", *fake("echo"))
    [ready] = waiting(engine, server)
    until("the idle container removed", lambda: ready.id not in ids(engine, server))
    assert server.process.poll() is None
    report = exec_report(snapshot, tmp_path, "later", *fake("echo"))
    assert "pool_wait" not in report["timings"]


@pytest.mark.parametrize("command", [EARLY_WRITER, EARLY_EXIT], ids=["writes", "exits"])
def test_a_component_that_writes_or_exits_before_its_run_is_removed(
    command: list[str],
    serving: Callable[..., Server],
    snapshot: Install,
    engine: Any,
    tmp_path: Path,
) -> None:
    server = serving("--pool", "1")
    since = int(time.time()) - 1
    snapshot.run("exec", *command)  # a failed run, of a configuration worth pooling
    label = of_runner(server.pid)
    events = engine.events(since=since, decode=True, filters={"label": label, "type": "container"})
    try:
        seen: dict[str, set[str]] = {}
        for event in events:  # the engine's word: created, then destroyed by the server
            seen.setdefault(event["id"], set()).add(event["status"])
            if any({"create", "destroy"} <= statuses for statuses in seen.values()):
                break
    finally:
        events.close()
    assert server.process.poll() is None
    assert not of_server(engine, server.pid)


def test_gc_leaves_waiting_containers_and_sweeps_them_once_the_server_is_killed(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    server = serving("--pool", "1")
    exec_report(snapshot, tmp_path, "first", *fake("echo"))
    [ready] = waiting(engine, server)
    cold = {"FLOW_RUNNER_WARM": "0"}
    assert snapshot.run("gc", env=cold).returncode == 0
    assert ready.id in ids(engine, server)  # its owner lives
    os.kill(server.pid, signal.SIGKILL)
    server.process.wait(30)
    assert ready.id in ids(engine, server)
    swept = snapshot.run("gc", env=cold)
    assert swept.returncode == 0, swept.stderr
    assert not of_server(engine, server.pid)


def test_serve_refuses_bad_pool_options() -> None:
    from runner.warm import server

    assert server.options(["60", "--pool", "2", "--pool-idle", "5", "--pool-max", "3"]) == (
        server.Options(60.0, False, 2, 5.0, 3)
    )
    assert server.options(["60", "--detach"]) == server.Options(60.0, True)
    for wrong in (["60", "--pool"], ["60", "--pool", "-1"], ["60", "--pool-idle", "0"], ["0"]):
        assert server.options(wrong) is None


def blocked(run: subprocess.Popen[bytes]) -> str:
    """The container (its hostname: the id's first 12 digits) a :data:`GATED` run waits in."""
    assert run.stderr is not None
    for line in run.stderr:
        if line.startswith(b"blocked "):
            return line.split()[2].decode()
    raise AssertionError(f"the run ended unblocked: {run.wait()}")


def test_a_pooled_run_outlives_its_killed_server_and_is_swept_once_its_process_dies(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    """A claimed container is spared by gc while its run's process lives, whatever became
    of the server its labels name (killed -9), and swept once that process is dead too."""
    server = serving("--pool", "2")
    gates = Path(tempfile_dir())  # one the component's user can reach
    try:
        gates.chmod(0o755)
        (gates / "open").touch()
        args = ["--attach", f"gate={gates}:ro", FAKE_IMAGE, "--", "python3", "-c", GATED]
        exec_report(snapshot, tmp_path, "first", "--input", '{"gate": "open"}', *args)
        waiting(engine, server, 2)
        runs = {
            gate: snapshot.start(
                "exec",
                "--report",
                tmp_path / f"{gate}.json",
                "--input",
                f'{{"gate": "{gate}"}}',
                *args,
            )
            for gate in ("a", "b")
        }
        hosts = {gate: blocked(run) for gate, run in runs.items()}
        held = {
            gate: next(id for id in ids(engine, server) if id.startswith(host))
            for gate, host in hosts.items()
        }
        os.kill(server.pid, signal.SIGKILL)
        server.process.wait(30)
        cold = {"FLOW_RUNNER_WARM": "0"}
        swept = snapshot.run("gc", env=cold)
        assert swept.returncode == 0, swept.stderr
        assert set(held.values()) <= ids(engine, server), "gc took a live run's container"
        claimer = Process.parse(read_claim(held["b"], machine_key()) or "")
        assert claimer is not None
        os.kill(claimer.pid, signal.SIGKILL)
        runs["b"].communicate(timeout=60)
        swept = snapshot.run("gc", env=cold)
        assert swept.returncode == 0, swept.stderr
        assert ids(engine, server) == {held["a"]}
        assert read_claim(held["b"], machine_key()) is None  # removed with its container
        (gates / "a").touch()
        printed, _ = runs["a"].communicate(timeout=120)
        assert runs["a"].returncode == 0
        assert json.loads(printed)["output"] == {"gate": "a"}  # its true result
        report = json.loads((tmp_path / "a.json").read_text())
        assert (report["status"], report["pooled"]) == ("succeeded", True)
        assert not of_server(engine, server.pid)
        assert read_claim(held["a"], machine_key()) is None
    finally:
        shutil.rmtree(gates)


def build(tag: str, mark: str) -> str:
    """Build ``tag`` locally (never pulled): the fake component, labelled ``mark``; its id."""
    dockerfile = f"FROM {FAKE_IMAGE}\nLABEL flow-runner-test.pool={mark}\n"
    built = subprocess.run(
        ["docker", "build", "--network", "none", "-q", "-t", tag, "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return built.stdout.strip()


def test_a_moved_tag_removes_its_waiting_containers_at_once(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    tag = f"flow-runner-test/pool-moved:{os.getpid()}"
    server = serving("--pool", "1")
    images = [build(tag, "1")]
    try:
        args = [tag, "--", "python3", "/fake/fake_component.py", "echo"]
        exec_report(snapshot, tmp_path, "first", *args)
        [old] = waiting(engine, server)
        images.append(build(tag, "2"))
        moved = exec_report(snapshot, tmp_path, "moved", *args)
        assert moved["pooled"] is False and moved["status"] == "succeeded"
        gone = lambda: old.id not in ids(engine, server)  # noqa: E731
        until("the moved tag's old container removed (not expired: that takes 60 s)", gone, 20)
        [new] = waiting(engine, server)
        assert (old.attrs["Image"], new.attrs["Image"]) == tuple(images)
    finally:
        stop(server)
        for image in images:
            engine.images.remove(image, force=True)


def test_an_edited_profile_removes_its_waiting_containers_at_once(
    serving: Callable[..., Server], snapshot: Install, engine: Any, tmp_path: Path
) -> None:
    server = serving("--pool", "1")
    args = ["--profile", str(profile_file(tmp_path, "edited")), *fake("echo")]
    exec_report(snapshot, tmp_path, "first", *args)
    [old] = waiting(engine, server)
    profile_file(tmp_path, "edited", pids=100)  # the same name, other settings
    edited = exec_report(snapshot, tmp_path, "edited", *args)
    assert edited["pooled"] is False and edited["status"] == "succeeded"
    gone = lambda: old.id not in ids(engine, server)  # noqa: E731
    until("the edited profile's old container removed (not expired: that takes 60 s)", gone, 20)
    [new] = waiting(engine, server)
    assert (old.attrs["HostConfig"]["PidsLimit"], new.attrs["HostConfig"]["PidsLimit"]) == (
        256,
        100,
    )
