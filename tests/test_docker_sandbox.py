"""The Docker backend against a real engine: stdio, limits, cleanup and refusals.

Each test launches containers of ``flow-runner/probe`` (images/probe), or of the base image
with a ``python3 -c`` program, through ``DockerSandbox.launch`` and looks at raw bytes, exit
codes and ``facts``. Without an
engine these tests fail (the ``docker_client`` fixture says how to start one). No container
may outlive a test: the ``no_leaks`` fixture, or the engine's events for the run, say so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker.errors
import pytest
from anyio.abc import ByteReceiveStream

from runner.sandbox.attachments import AttachmentError, check_attachment, parse_attach
from runner.sandbox.base import Attachment, LaunchRequest, RunningComponent
from runner.sandbox.docker import sandbox as docker_backend
from runner.sandbox.docker.attach import AttachDemuxer, open_connection
from runner.sandbox.docker.engine import connect, open_engine
from runner.sandbox.docker.sandbox import DockerSandbox
from runner.sandbox.errors import (
    DockerSandboxError,
    EngineUnavailable,
    ImageMissing,
    RuntimeMissing,
)
from runner.sandbox.gc import sweep
from runner.sandbox.labels import (
    LABEL_CREATED,
    LABEL_OWNER,
    LABEL_PARENT_RUN_ID,
    LABEL_PROCESS,
    LABEL_RUN_ID,
    Process,
    is_signed,
    machine_key,
    owner_labels,
    process_stat,
    run_labels,
    signed,
)
from runner.sandbox.profiles import SandboxProfile, load_profile

PROBE = "flow-runner/probe:latest"
BASE = "flow-runner/base:bookworm"
MIB = 1 << 20
docker_test = pytest.mark.docker


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def default() -> SandboxProfile:
    return load_profile("default")


@pytest.fixture
def dead_owner() -> Process:
    """The name of a process that ran here (this boot, this pid namespace) and is gone."""
    process = subprocess.Popen(["true"])
    try:
        while (found := process_stat(process.pid)) is None or found[0] != "Z":
            time.sleep(0.01)
        return dataclasses.replace(Process.current(), pid=process.pid, start_ticks=found[1])
    finally:
        process.wait()


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def pattern(total: int) -> bytes:
    """The counting text the probe's ``burst`` writes (images/probe/probe.py)."""
    return b"".join(b"%d\n" % i for i in range(total // 2 + 1))[:total]


async def read_all(stream: ByteReceiveStream) -> bytes:
    data = bytearray()
    try:
        while True:
            data += await stream.receive()
    except anyio.EndOfStream:
        return bytes(data)


async def communicate(component: RunningComponent, stdin: bytes = b"") -> tuple[bytes, bytes]:
    """Write ``stdin`` in pieces and half-close while reading stdout and stderr to the end."""
    output: dict[str, bytes] = {}

    async def collect(name: str, stream: ByteReceiveStream) -> None:
        output[name] = await read_all(stream)

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect, "out", component.stdout)
        tg.start_soon(collect, "err", component.stderr)
        for start in range(0, len(stdin), 100_000):
            await component.stdin.send(stdin[start : start + 100_000])
        await component.stdin.aclose()
    return output["out"], output["err"]


def labelled(client: Any, run_id: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"}))


def container_events(client: Any, run_id: str, since: float) -> list[dict[str, Any]]:
    """Everything the engine did to containers of ``run_id`` since ``since`` (unix s)."""
    filters = {"type": "container", "label": f"{LABEL_RUN_ID}={run_id}"}
    return list(client.events(since=since, until=time.time() + 0.1, filters=filters, decode=True))


def run_id(request: pytest.FixtureRequest) -> str:
    return f"test-{request.node.name}-{os.getpid()}"[:120]


@pytest.fixture
def probe(docker_client: Any, default: SandboxProfile, no_leaks: None) -> Any:
    def make(*command: str, profile: SandboxProfile | None = None) -> DockerSandbox:
        return DockerSandbox(PROBE, profile or default, list(command), client=docker_client)

    return make


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_run_whose_tag_moved_after_its_package_was_read_is_refused(
    docker_client: Any, default: SandboxProfile, no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tag moved after the run read its package (the hello example's) to another image:
    the container the create made is of that other image, so it is removed unstarted and the
    run refused, naming the move; the pool's launch configuration is the judged image too."""
    from runner.api import Invocation, execute

    tag = f"flow-runner/test-moved-{os.getpid()}:latest"
    docker_client.images.get("flow-runner/examples-hello:latest").tag(tag)
    judged = DockerSandbox.image_source

    async def then_moved(sandbox: DockerSandbox) -> Any:
        found = await judged(sandbox)
        docker_client.images.get("flow-runner/fake-component:latest").tag(tag)
        return found

    monkeypatch.setattr(DockerSandbox, "image_source", then_moved)
    try:
        sandbox = DockerSandbox(tag, default, client=docker_client)
        with pytest.raises(DockerSandboxError, match=r"was moved to .* after its package"):
            await execute(sandbox, Invocation.within(60, input={"name": "Ada"}), target=tag)
        hello = docker_client.images.get("flow-runner/examples-hello:latest").id
        engine = await open_engine(docker_client)
        assert sandbox.judged_image == hello
        assert (await sandbox.launch_config(engine))["image"] == hello
    finally:
        docker_client.images.remove(tag)


# --- without an engine ----------------------------------------------------------------


def test_demuxer_reassembles_frames_fed_a_byte_at_a_time() -> None:
    stream = frame(1, b"hello ") + frame(2, b"oops\n") + frame(1, b"world\n") + frame(1, b"")
    demuxer = AttachDemuxer()
    pieces = [piece for i in range(len(stream)) for piece in demuxer.feed(stream[i : i + 1])]
    out = b"".join(p for fd, p in pieces if fd == 1)
    err = b"".join(p for fd, p in pieces if fd == 2)
    assert (out, err) == (b"hello world\n", b"oops\n")
    assert demuxer.feed(frame(2, b"next")) == [(2, b"next")]  # not left inside a frame


def test_demuxer_hands_out_partial_payload_and_knows_it_is_mid_frame() -> None:
    demuxer = AttachDemuxer()
    assert demuxer.feed(frame(1, b"abcdef")[:10]) == [(1, b"ab")]
    assert demuxer.feed(b"cdef" + frame(2, b"x")) == [(1, b"cdef"), (2, b"x")]


def test_demuxer_refuses_an_unknown_stream_type() -> None:
    with pytest.raises(ValueError, match="out of step"):
        AttachDemuxer().feed(frame(7, b"x"))


@pytest.mark.anyio
async def test_a_reset_attach_connection_ends_the_stream_for_wait_to_inspect() -> None:
    """An engine gone over TCP resets the attach socket. Waiting for exit must go on to
    inspect the container (which tells whether it exited, was removed or lost its engine),
    not fail on the read; every reader then sees the end of the stream."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        ours = socket.create_connection(server.getsockname())
        theirs, _ = server.accept()
    connection = await open_connection(ours)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    theirs.close()  # linger 0: a reset, not an orderly end
    try:
        with anyio.fail_after(5):
            await connection.drain()
        with pytest.raises(anyio.EndOfStream):
            await connection.stdout.receive(100)
    finally:
        await connection.aclose()


def test_no_engine_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")
    with pytest.raises(EngineUnavailable, match=rf"{tmp_path}/docker.sock.*make engine"):
        connect()


# --- stdio ----------------------------------------------------------------------------


@docker_test
@pytest.mark.anyio
async def test_stdin_eof_reaches_the_component_and_bytes_come_back_exactly(probe: Any) -> None:
    payload = os.urandom(2 * MIB)
    async with probe("echo").launch(LaunchRequest()) as component:
        out, err = await communicate(component, payload)
        assert await component.wait() == 0
        await component.kill()  # after exit: a no-op
    assert out == payload
    assert err == b"echo: end of input\n"
    assert component.facts.exit_code == 0
    assert not component.facts.killed_by_host
    assert set(component.facts.timings) >= {"create", "attach", "start", "run", "cleanup"}


@docker_test
@pytest.mark.anyio
async def test_large_split_output_and_stderr_demultiplex_exactly(probe: Any) -> None:
    async with probe("burst", str(2 * MIB)).launch(LaunchRequest()) as component:
        out, err = await communicate(component)
        assert await component.wait() == 0
    assert out == pattern(2 * MIB)
    lines = err.decode().splitlines()
    assert len(lines) > 50
    assert lines == [f"err {i}" for i in range(len(lines))]


@docker_test
@pytest.mark.anyio
async def test_wait_without_reading_keeps_the_output(probe: Any) -> None:
    async with probe("burst", str(MIB)).launch(LaunchRequest()) as component:
        await component.stdin.aclose()
        assert await component.wait() == 0
        assert await read_all(component.stdout) == pattern(MIB)


# --- what the engine is asked for -----------------------------------------------------


@docker_test
@pytest.mark.anyio
async def test_container_carries_labels_and_the_profile_limits(
    probe: Any, docker_client: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    rid = run_id(request)
    tmp_path.chmod(0o755)  # pytest's 0700 would be refused: nobody could read it
    attach = parse_attach(f"data={tmp_path}:ro")
    launch = LaunchRequest(attachments=(attach,), run_id=rid, parent_run_id="parent-1")
    before_ms = time.time() * 1000
    async with probe("sleep").launch(launch) as component:
        [container] = labelled(docker_client, rid)
        await component.kill()
    labels = container.labels
    assert labels[LABEL_PARENT_RUN_ID] == "parent-1"
    assert labels[LABEL_OWNER] == f"{socket.gethostname()}:{os.getpid()}"
    assert Process.parse(labels[LABEL_PROCESS]) == Process.current()
    assert is_signed(labels, machine_key())
    assert before_ms - 1000 <= int(labels[LABEL_CREATED]) <= time.time() * 1000
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["Memory"] == host["MemorySwap"] == 512 * MIB
    assert host["NanoCpus"] == 1_000_000_000
    assert host["PidsLimit"] == 256
    assert host["CapDrop"] == ["ALL"]
    no_new_privileges, seccomp = host["SecurityOpt"]
    assert no_new_privileges == "no-new-privileges"
    assert json.loads(seccomp.removeprefix("seccomp="))["defaultAction"] == "SCMP_ACT_ERRNO"
    assert host["Init"] is True
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 1024, "Hard": 1024}]
    assert "size=268435456,nr_inodes=65536" in host["Tmpfs"]["/flow/scratch"]
    assert "size=67108864,nr_inodes=65536" in host["Tmpfs"]["/dev/shm"]  # not the engine's
    assert container.attrs["Config"]["User"] == "65534:65534"
    assert container.attrs["Config"]["StdinOnce"] is True
    [mount] = [m for m in container.attrs["Mounts"] if m["Type"] == "bind"]
    assert (mount["Source"], mount["Destination"], mount["RW"]) == (
        str(tmp_path),
        "/flow/attachments/data",
        False,
    )
    assert component.attachment_paths == {"data": "/flow/attachments/data"}
    assert component.scratch_path == "/flow/scratch"
    assert component.facts.details["mounts_verified"] is True


# --- confinement under the default profile --------------------------------------------


@pytest.fixture(scope="module")
async def confinement(
    docker_client: Any, default: SandboxProfile, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One run of the ``facts`` probe with a read-only and a read-write attachment."""
    readonly, writable = tmp_path_factory.mktemp("ro"), tmp_path_factory.mktemp("rw")
    for directory in (readonly, writable):  # only the mount, not the mode, may refuse
        directory.chmod(0o777)
    attachments = (
        Attachment("readonly", readonly, "read"),
        Attachment("writable", writable, "read-write"),
    )
    command = ["facts", "/flow/attachments/readonly", "/flow/attachments/writable"]
    sandbox = DockerSandbox(PROBE, default, command, client=docker_client)
    async with sandbox.launch(LaunchRequest(attachments=attachments)) as component:
        out, _ = await communicate(component)
        assert await component.wait() == 0
    return {**json.loads(out), "host_writable": writable}


@docker_test
@pytest.mark.anyio
async def test_component_is_not_root_and_has_no_capabilities(confinement: dict[str, Any]) -> None:
    assert (confinement["uid"], confinement["gid"]) == (65534, 65534)
    assert int(confinement["cap_eff"], 16) == 0


@docker_test
@pytest.mark.anyio
async def test_only_loopback_exists(confinement: dict[str, Any]) -> None:
    assert confinement["netifs"] == ["lo"]


@docker_test
@pytest.mark.anyio
async def test_root_is_read_only_but_tmp_and_scratch_are_writable(
    confinement: dict[str, Any],
) -> None:
    assert confinement["root_write"] == "EROFS"
    assert confinement["tmp_write"] == "ok"
    assert confinement["scratch_write"] == "ok"


@docker_test
@pytest.mark.anyio
async def test_ro_attachment_refuses_writes_and_rw_attachment_takes_them(
    confinement: dict[str, Any],
) -> None:
    assert confinement["readonly_write"] == "EROFS"
    assert confinement["writable_write"] == "ok"
    assert (confinement["host_writable"] / "probe").read_text() == "probe\n"


@docker_test
@pytest.mark.anyio
async def test_a_fork_bomb_is_held_by_the_pids_limit(probe: Any) -> None:
    async with probe("forkbomb").launch(LaunchRequest()) as component:
        out, _ = await communicate(component)
        assert await component.wait() == 0
    result = json.loads(out)
    assert result["errno"] == "EAGAIN"
    assert 100 < result["forked"] < 256


@docker_test
@pytest.mark.anyio
async def test_a_memory_hog_ends_oom_killed(probe: Any) -> None:
    async with probe("memhog").launch(LaunchRequest()) as component:
        _, err = await communicate(component)
        assert await component.wait() == 137
    assert component.facts.oom_killed
    assert str(component.facts.details["oom_source"]).startswith("cgroup")  # not the engine
    assert not component.facts.killed_by_host
    assert b"256 MiB" in err  # it did grow
    assert b"512 MiB" not in err  # but never past the limit


HOG_AFTER_EOF = "import sys; sys.stdin.read(); b = []\nwhile True: b.append(bytearray(16 << 20))"
"""Grows until the memory limit kills it, once its stdin ends: after the launch has begun
watching its cgroup (a hog that starts at once may be gone before, on a loaded machine)."""


@pytest.fixture
def engine_without_oom_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine whose OOM event comes after the run is judged (or never): its inspect
    always says ``OOMKilled: false``."""
    inspect = docker_backend.Engine.inspect

    async def late(self: Any, lease: Any) -> dict[str, Any]:
        info = await inspect(self, lease)
        return {**info, "State": {**info["State"], "OOMKilled": False}}

    monkeypatch.setattr(docker_backend.Engine, "inspect", late)


@docker_test
@pytest.mark.anyio
async def test_an_oom_is_read_from_the_cgroup_not_from_the_engines_flag(
    probe: Any, docker_client: Any, default: SandboxProfile, engine_without_oom_flag: None
) -> None:
    small = dataclasses.replace(default, memory=64 * MIB)
    hog = DockerSandbox(BASE, small, ["python3", "-c", HOG_AFTER_EOF], client=docker_client)
    async with hog.launch(LaunchRequest()) as component:
        await communicate(component)
        assert await component.wait() == 137
    assert component.facts.oom_killed
    assert str(component.facts.details["oom_source"]).startswith("cgroup")
    # A SIGKILL from outside, with no OOM: the cgroup's removal is not taken for one.
    async with probe("sleep").launch(LaunchRequest()) as component:
        assert await component.stdout.receive() == b"sleeping\n"
        container_id = str(component.facts.details["container_id"])
        await anyio.to_thread.run_sync(docker_client.api.kill, container_id)
        assert await component.wait() == 137
    assert not component.facts.oom_killed
    assert not component.facts.killed_by_host


@pytest.fixture
def cpu_load() -> Iterator[None]:
    """Three processes spinning on two cores for as long as the test runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(3)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@docker_test
@pytest.mark.anyio
async def test_twenty_memory_hogs_under_cpu_load_are_each_reported_oom_by_the_cgroup(
    docker_client: Any,
    no_leaks: None,
    default: SandboxProfile,
    cpu_load: None,
    request: pytest.FixtureRequest,
) -> None:
    small = dataclasses.replace(default, memory=64 * MIB)
    hog = DockerSandbox(BASE, small, ["python3", "-c", HOG_AFTER_EOF], client=docker_client)
    for index in range(20):
        rid = f"{run_id(request)}-{index}"
        async with hog.launch(LaunchRequest(run_id=rid)) as component:
            await communicate(component)
            assert await component.wait() == 137
        assert component.facts.oom_killed, index
        assert str(component.facts.details["oom_source"]).startswith("cgroup"), index
        assert labelled(docker_client, rid) == []


@docker_test
@pytest.mark.anyio
async def test_scratch_beyond_its_size_fails_with_enospc(probe: Any) -> None:
    async with probe("fill", "/flow/scratch/big").launch(LaunchRequest()) as component:
        out, _ = await communicate(component)
        assert await component.wait() == 0
    result = json.loads(out)
    assert result["errno"] == "ENOSPC"
    assert 200 * MIB <= result["written"] <= 256 * MIB


@docker_test
@pytest.mark.anyio
async def test_a_scratch_dir_is_bound_read_write_and_kept(probe: Any, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    launch = LaunchRequest(scratch_dir=tmp_path)
    async with probe("facts", "/tmp", "/tmp").launch(launch) as component:
        out, _ = await communicate(component)
        assert await component.wait() == 0
    assert json.loads(out)["scratch_write"] == "ok"
    assert (tmp_path / "probe").read_text() == "probe\n"


# --- ending runs ----------------------------------------------------------------------


@docker_test
@pytest.mark.anyio
async def test_kill_ends_a_sleeping_component_and_the_container_goes(
    probe: Any, docker_client: Any, request: pytest.FixtureRequest
) -> None:
    rid = run_id(request)
    async with probe("sleep").launch(LaunchRequest(run_id=rid)) as component:
        assert await component.stdout.receive() == b"sleeping\n"
        await component.kill()
        await component.kill()
        assert await component.wait() == 137
    assert component.facts.killed_by_host
    assert not component.facts.oom_killed
    assert labelled(docker_client, rid) == []


@docker_test
@pytest.mark.anyio
async def test_leaving_the_block_kills_a_running_component(probe: Any) -> None:
    async with probe("sleep").launch(LaunchRequest()) as component:
        assert await component.stdout.receive() == b"sleeping\n"
    assert component.facts.exit_code == 137
    assert component.facts.killed_by_host


@docker_test
@pytest.mark.anyio
async def test_cancelling_the_enclosing_task_leaves_no_container(
    probe: Any, docker_client: Any, request: pytest.FixtureRequest
) -> None:
    rid = run_id(request)
    started = anyio.Event()
    with anyio.move_on_after(1.0) as scope:
        async with probe("sleep").launch(LaunchRequest(run_id=rid)) as component:
            started.set()
            await anyio.sleep_forever()
    assert scope.cancelled_caught and started.is_set()
    assert component.facts.killed_by_host
    assert labelled(docker_client, rid) == []


# --- refusals -------------------------------------------------------------------------


@docker_test
@pytest.mark.anyio
async def test_a_missing_image_is_a_clear_error(
    docker_client: Any, default: SandboxProfile, request: pytest.FixtureRequest
) -> None:
    rid, since = run_id(request), time.time()
    sandbox = DockerSandbox("flow-runner/no-such-image:latest", default, client=docker_client)
    with pytest.raises(ImageMissing, match=r"no-such-image.*never pulls.*images/build\.sh"):
        async with sandbox.launch(LaunchRequest(run_id=rid)):
            pytest.fail("launched without an image")
    assert container_events(docker_client, rid, since) == []


@pytest.fixture
def ssh_dir(tmp_path: Path) -> Path:
    (tmp_path / ".ssh").mkdir()
    return tmp_path / ".ssh"


@docker_test
@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/etc", "SSH", "/var/run/docker.sock"])
async def test_a_refused_attachment_is_refused_before_any_container_exists(
    probe: Any, docker_client: Any, request: pytest.FixtureRequest, ssh_dir: Path, path: str
) -> None:
    rid, since = run_id(request), time.time()
    attach = Attachment("bad", ssh_dir if path == "SSH" else Path(path))
    with pytest.raises(AttachmentError, match="refused"):
        async with probe("echo").launch(LaunchRequest(attachments=(attach,), run_id=rid)):
            pytest.fail("launched with a refused attachment")
    assert container_events(docker_client, rid, since) == []


@pytest.fixture
def swap(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    """A checked directory and the swap an attacker makes: it becomes a symlink to a
    directory that is refused (it holds a listening unix socket)."""
    checked, forbidden = tmp_path / "checked", tmp_path / "forbidden"
    checked.mkdir()
    checked.chmod(0o777)  # usable by nobody, also as a scratch: only the swap is refused
    forbidden.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(forbidden / "engine.sock"))
        server.listen()
        with pytest.raises(AttachmentError, match=r"holds .*engine\.sock, which is a unix socket"):
            check_attachment(parse_attach(f"bad={forbidden}"))

        def replace() -> None:
            checked.rename(tmp_path / "original")
            checked.symlink_to(forbidden)

        yield checked, replace


def launch_with(kind: str, path: Path, rid: str) -> LaunchRequest:
    if kind == "scratch":
        return LaunchRequest(scratch_dir=path, run_id=rid)
    return LaunchRequest(attachments=(Attachment("data", path),), run_id=rid)


@docker_test
@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["attachment", "scratch"])
async def test_a_path_swapped_after_the_check_is_refused_before_the_container_starts(
    probe: Any,
    docker_client: Any,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    swap: tuple[Path, Any],
    kind: str,
) -> None:
    checked, replace = swap
    original = docker_backend._host_config

    def then_swap(*args: Any) -> Any:  # called once the paths are judged and held
        config = original(*args)
        replace()
        return config

    monkeypatch.setattr(docker_backend, "_host_config", then_swap)
    rid, since = run_id(request), time.time()
    with pytest.raises(AttachmentError, match=rf"{checked} changed after it was checked"):
        async with probe("sleep").launch(launch_with(kind, checked, rid)):
            pytest.fail("the component ran on the swapped path")
    actions = [event["Action"] for event in container_events(docker_client, rid, since)]
    assert "create" in actions
    assert "start" not in actions  # the forbidden directory was never mounted


@docker_test
@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["attachment", "scratch"])
async def test_a_path_swapped_just_before_the_engine_mounts_it_is_caught_and_killed(
    probe: Any,
    docker_client: Any,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    swap: tuple[Path, Any],
    kind: str,
) -> None:
    checked, replace = swap
    original = DockerSandbox._start

    async def swap_then_start(self: DockerSandbox, engine: Any, container_id: str) -> None:
        replace()  # after the last look at the path by name: only the inode tells
        await original(self, engine, container_id)

    monkeypatch.setattr(DockerSandbox, "_start", swap_then_start)
    rid, since = run_id(request), time.time()
    target = "/flow/scratch" if kind == "scratch" else "/flow/attachments/data"
    with pytest.raises(AttachmentError, match=rf"engine mounted another file at {target}"):
        async with probe("sleep").launch(launch_with(kind, checked, rid)):
            pytest.fail("the component was handed the swapped path")
    actions = [event["Action"] for event in container_events(docker_client, rid, since)]
    assert {"start", "destroy"} <= set(actions)
    assert labelled(docker_client, rid) == []


@docker_test
@pytest.mark.anyio
async def test_the_strict_profile_runs_on_gvisor_or_says_how_to_register_it(
    probe: Any, docker_client: Any
) -> None:
    sandbox = probe("echo", profile=load_profile("strict"))
    if "runsc" not in docker_client.info()["Runtimes"]:
        with pytest.raises(RuntimeMissing, match=r"runsc.*images/engine\.sh runsc"):
            async with sandbox.launch(LaunchRequest()):
                pytest.fail("launched without the runtime")
        return
    async with sandbox.launch(LaunchRequest()) as component:
        out, _ = await communicate(component, b"under gVisor\n")
        assert await component.wait() == 0
    assert out == b"under gVisor\n"
    assert component.facts.details["runtime"] == "runsc"


# --- garbage collection ---------------------------------------------------------------


@pytest.fixture
def leftover(docker_client: Any, dead_owner: Process) -> Iterator[str]:
    """A never-started container whose owner process here is gone."""
    labels = signed({LABEL_RUN_ID: "gc-test", **owner_labels(dead_owner)}, machine_key())
    container_id: str = docker_client.api.create_container(PROBE, ["echo"], labels=labels)["Id"]
    yield container_id
    with contextlib.suppress(docker.errors.NotFound):
        docker_client.api.remove_container(container_id, force=True)


@docker_test
def test_a_sweep_for_runs_removes_only_this_processs_containers_of_those_runs(
    docker_client: Any,
) -> None:
    """What a batch looks for at its end: its own containers of runs that failed on the
    engine's side (and their children's), which the plain sweep spares (their owner, the
    batch, is alive); not another live process's of the same run id, nor another run's."""
    run, other = f"gc-runs-{uuid.uuid4().hex[:8]}", f"gc-other-{uuid.uuid4().hex[:8]}"
    parent = process_stat(os.getppid())
    assert parent is not None
    alive = dataclasses.replace(Process.current(), pid=os.getppid(), start_ticks=parent[1])
    made = {
        "run": run_labels(run),
        "child": run_labels(f"{run}-child", parent_run_id=run),
        "other run": run_labels(other),
        "another process": signed({LABEL_RUN_ID: run, **owner_labels(alive)}, machine_key()),
    }
    ids = {
        name: docker_client.api.create_container(PROBE, ["echo"], labels=labels)["Id"]
        for name, labels in made.items()
    }
    try:
        assert set(ids.values()).isdisjoint(sweep(docker_client))
        assert sorted(sweep(docker_client, runs={run})) == sorted([ids["run"], ids["child"]])
        left = {c.id for c in docker_client.containers.list(all=True)}
        assert {ids["other run"], ids["another process"]} <= left
        assert {ids["run"], ids["child"]}.isdisjoint(left)
    finally:
        for container_id in ids.values():
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.api.remove_container(container_id, force=True)


@docker_test
def test_sweep_removes_a_dead_owners_container(docker_client: Any, leftover: str) -> None:
    assert leftover in sweep(docker_client)
    assert labelled(docker_client, "gc-test") == []


@docker_test
@pytest.mark.anyio
async def test_a_loss_in_cleanup_never_replaces_the_cancellation_on_its_way_out(
    probe: Any, docker_client: Any
) -> None:
    """The container is removed from under a run (its kill in cleanup then finds it gone:
    a loss), and the run's scope is cancelled: the scope still receives its cancellation,
    so the cancelling caller, not a SandboxLost raised in its place, decides what follows."""
    with anyio.CancelScope() as scope:
        async with probe("sleep").launch(LaunchRequest()) as component:
            container_id = str(component.facts.details["container_id"])
            docker_client.api.remove_container(container_id, force=True)
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
