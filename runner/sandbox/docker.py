"""The Docker backend: one container per invocation, driven with docker-py.

A launch creates the container (never pulling: a missing image is an error that says how
to build it), attaches to its stdio *before* starting it so no early output is lost,
starts it, and hands the host three byte streams over the one hijacked attach connection.
The connection is taken out of docker-py and read with real async I/O; stdout and stderr
arrive multiplexed (8-byte headers, frames of up to 32 KiB) and are split here, on demand,
by whichever stream is being read, so reading never blocks writing and no task is needed.
Half-closing stdin is a ``shutdown(SHUT_WR)`` on that socket, which the engine turns into
EOF for the component (``StdinOnce``).

Exit is seen as the end of the attach stream and confirmed by inspecting the container, so
no worker thread sits in a long ``wait``: blocking docker-py calls are short and go to
worker threads behind one capacity limiter per client, sized like its connection pool.

Leaving the ``async with`` block always kills (if needed), records the container's state
and removes it with its anonymous volumes, shielded from cancellation: a deadline, Ctrl-C
or a crash in the host cannot leak a container. Every container carries labels naming the
run and the owning process, so ``runner.sandbox.gc`` can sweep up after a killed host.

Once the container exists, every engine call goes through :meth:`_Engine.call` with the
container's :class:`_Lease`, which turns whatever docker-py or requests raises into one of
two losses: :class:`ContainerGone` (the engine no longer knows the container: someone
else removed it) or :class:`EngineLost` (the engine failed or stopped answering). Cleanup
still runs after a loss, and the launch then ends with the first loss, which the API
reports as the run's failure rather than a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import struct
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel
import docker
import docker.errors
import requests.exceptions
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketStream
from docker.constants import DEFAULT_MAX_POOL_SIZE
from docker.types import LogConfig, Mount, Ulimit

from runner.sandbox.attachments import HeldPath, check_unique, hold
from runner.sandbox.base import (
    Attachment,
    DiskBreach,
    LaunchRequest,
    RunningComponent,
    SandboxFacts,
)
from runner.sandbox.disk import DiskBound, DiskWatch, launch_bounds
from runner.sandbox.errors import (
    ContainerGone,
    DockerSandboxError,
    EngineLost,
    EngineUnavailable,
    ImageMissing,
    RuntimeMissing,
    SandboxLost,
)
from runner.sandbox.labels import run_labels
from runner.sandbox.pathmap import HostSource, PathMap
from runner.sandbox.profiles import SandboxProfile

if TYPE_CHECKING:
    from runner.package.reader import Package

T = TypeVar("T")

SCRATCH_PATH = "/flow/scratch"
ATTACHMENTS_DIR = "/flow/attachments"

_STDOUT, _STDERR = 1, 2
_HEADER = struct.Struct(">BxxxL")
_READ_SIZE = 1 << 16
_STOP_TIMEOUT = 10.0
"""Seconds cleanup waits for a killed container to be reported stopped before removing."""
_BUILD_HINT = "build it with `make images` (runs images/build.sh)"


_default_client: docker.DockerClient | None = None
_default_client_lock = threading.Lock()


def default_client() -> docker.DockerClient:
    """The process-wide client from the environment (``DOCKER_HOST`` or the local socket).

    Blocking (it asks the engine for its API version); created once, on first use.
    """
    global _default_client
    with _default_client_lock:
        if _default_client is None:
            _default_client = connect()
        return _default_client


def connect() -> docker.DockerClient:
    """A new client from the environment, or :class:`EngineUnavailable` saying what to do."""
    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        raise engine_unavailable(exc) from exc


def engine_unavailable(exc: BaseException) -> EngineUnavailable:
    return EngineUnavailable(
        f"no Docker engine answers at {_engine_address()} ({exc}); start one with "
        "`make engine` (runs images/engine.sh start)"
    )


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@dataclass
class _Lease:
    """One created container, from its creation to its removal: the launch step it is in
    (for the report) and the first loss seen. Later losses (a removal refused by the engine
    that already went away) add nothing to what happened to the run."""

    container_id: str
    began: float
    """``time.perf_counter()`` just before the container was created."""
    step: str = "attach"
    lost: SandboxLost | None = None

    def loss(self, exc: Exception) -> SandboxLost:
        """``exc`` from docker-py or requests as a loss of this container; the first is kept."""
        seconds = time.perf_counter() - self.began
        when = f"{seconds:.1f} s into the run (step: {self.step})"
        kind: type[SandboxLost]
        if isinstance(exc, docker.errors.NotFound):
            kind = ContainerGone
            message = (
                f"container {self.container_id[:12]} was removed by someone else {when}; "
                "find who runs `docker rm -f` or `flow-runner gc` against this engine"
            )
        else:
            kind = EngineLost
            message = (
                f"the Docker engine at {_engine_address()} failed or went away {when}: "
                f"{exc}; retrying may succeed once it answers again"
            )
        lost = kind(message, container_id=self.container_id, step=self.step, seconds=seconds)
        if self.lost is None:
            self.lost = lost
        return lost


@dataclass
class _Engine:
    """One client with its single limiter for worker threads and what it told us once."""

    client: docker.DockerClient
    limiter: anyio.CapacityLimiter
    runtimes: frozenset[str] | None = None
    path_map: PathMap | None = None
    """Where the engine's host has the paths this process sees (asked once, on need)."""

    async def call(
        self, fn: Callable[..., T], *args: Any, lease: _Lease | None = None, **kwargs: Any
    ) -> T:
        """Run a blocking docker-py call in a worker thread behind the limiter.

        Before a container exists (no ``lease``) an engine that does not answer is
        :class:`EngineUnavailable` (nothing was run) and docker-py's errors are the
        caller's to read. For a created container's calls, every docker-py or requests
        error becomes a loss of it (:meth:`_Lease.loss`), so none escapes a run as a
        traceback; a caller that expects a particular refusal (409 "not running") reads
        it inside ``fn``, in the worker thread.
        """
        try:
            return await anyio.to_thread.run_sync(
                functools.partial(fn, *args, **kwargs), limiter=self.limiter
            )
        except docker.errors.DockerException as exc:  # first: an APIError is an HTTPError too
            if lease is not None:
                raise lease.loss(exc) from exc
            raise
        except requests.exceptions.RequestException as exc:
            if lease is not None:
                raise lease.loss(exc) from exc
            raise engine_unavailable(exc) from exc


_engines: weakref.WeakKeyDictionary[docker.DockerClient, _Engine] = weakref.WeakKeyDictionary()


def _engine_for(client: docker.DockerClient) -> _Engine:
    engine = _engines.get(client)
    if engine is None:
        adapter = client.api.get_adapter(client.api.base_url)
        pool = int(getattr(adapter, "max_pool_size", DEFAULT_MAX_POOL_SIZE))
        engine = _engines[client] = _Engine(client, anyio.CapacityLimiter(pool))
    return engine


class AttachDemuxer:
    """Splits Docker's multiplexed attach stream into (stream, payload) pieces; no I/O.

    Each frame is an 8-byte header (stream type, three zero bytes, big-endian length) and
    its payload. Payload is handed out as soon as it arrives, so a frame split across
    reads, or a line split across frames, costs no extra buffering.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._stream = 0
        self._remaining = 0

    @property
    def mid_frame(self) -> bool:
        """True if the bytes fed so far end inside a frame."""
        return bool(self._buffer) or self._remaining > 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Consume ``data``; return the payload pieces it completes, in order."""
        self._buffer += data
        pieces: list[tuple[int, bytes]] = []
        pos, end = 0, len(self._buffer)
        while pos < end:
            if self._remaining == 0:
                if end - pos < _HEADER.size:
                    break
                self._stream, self._remaining = _HEADER.unpack_from(self._buffer, pos)
                pos += _HEADER.size
                if self._stream not in (_STDOUT, _STDERR):
                    raise ValueError(f"attach stream out of step: frame type {self._stream}")
                continue
            take = min(self._remaining, end - pos)
            pieces.append((self._stream, bytes(self._buffer[pos : pos + take])))
            pos += take
            self._remaining -= take
        del self._buffer[:pos]
        return pieces


class _AttachConnection:
    """The hijacked attach socket: raw stdin out, demultiplexed stdout and stderr in."""

    def __init__(self, stream: SocketStream) -> None:
        self._stream = stream
        self._demuxer = AttachDemuxer()
        self._pending: dict[int, deque[bytes]] = {_STDOUT: deque(), _STDERR: deque()}
        self._discard: set[int] = set()
        self._reading = False  # one task at a time reads the socket, for both streams
        self._progress = anyio.Event()  # set after every socket read, then replaced
        self._send_lock = anyio.Lock()
        self._eof = False
        self._stdin_closed = False

    async def send(self, data: bytes) -> None:
        if self._stdin_closed:
            raise anyio.ClosedResourceError
        async with self._send_lock:
            await self._stream.send(data)

    async def close_stdin(self) -> None:
        """Half-close: the component reads EOF; stdout and stderr keep flowing."""
        if self._stdin_closed:
            return
        self._stdin_closed = True
        async with self._send_lock:
            # OSError: the engine already closed the connection, there is no stdin left.
            with contextlib.suppress(OSError):
                await self._stream.send_eof()

    async def receive(self, fd: int, max_bytes: int) -> bytes:
        """Bytes for ``fd``; whoever reads the socket files the other stream's bytes.

        A reader never waits on the socket while bytes for it are already filed: the
        one waiting for the other's read is woken after every read (not queued behind a
        lock the reader could take again and block on, which stalls the exchange).
        """
        pending = self._pending[fd]
        while not pending:
            if self._eof:
                raise anyio.EndOfStream
            await self._read_or_wait()
        chunk = pending.popleft()
        if len(chunk) > max_bytes:
            pending.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        return chunk

    def discard(self, fd: int) -> None:
        """Drop ``fd``'s bytes from now on: nobody will read them."""
        self._discard.add(fd)
        self._pending[fd].clear()

    async def drain(self) -> None:
        """Read to the end of the stream, keeping what the readers have not taken yet.

        A broken stream ends too: whether the container exited, was removed or lost its
        engine is for the inspection that follows to tell.
        """
        with contextlib.suppress(anyio.BrokenResourceError):
            while not self._eof:
                await self._read_or_wait()

    async def _read_or_wait(self) -> None:
        """Read the socket once, or wait until whoever is reading it has read once."""
        if self._reading:
            await self._progress.wait()
            return
        self._reading = True
        try:
            await self._read_once()
        finally:
            self._reading = False
            self._progress.set()
            self._progress = anyio.Event()

    async def _read_once(self) -> None:
        try:
            data = await self._stream.receive(_READ_SIZE)
        except anyio.EndOfStream:
            self._eof = True
            return
        except (anyio.BrokenResourceError, OSError) as exc:
            self._eof = True  # nothing more will come: every reader sees the end
            raise anyio.BrokenResourceError(str(exc)) from exc
        try:
            pieces = self._demuxer.feed(data)
        except ValueError as exc:
            self._eof = True
            raise anyio.BrokenResourceError(str(exc)) from exc
        for fd, payload in pieces:
            if fd not in self._discard:
                self._pending[fd].append(payload)

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Stdin(ByteSendStream):
    def __init__(self, connection: _AttachConnection) -> None:
        self._connection = connection

    async def send(self, item: bytes) -> None:
        await self._connection.send(item)

    async def aclose(self) -> None:
        await self._connection.close_stdin()


class _Output(ByteReceiveStream):
    def __init__(self, connection: _AttachConnection, fd: int) -> None:
        self._connection = connection
        self._fd = fd
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        return await self._connection.receive(self._fd, max_bytes)

    async def aclose(self) -> None:
        self._closed = True
        self._connection.discard(self._fd)


class _Container:
    """A started container, seen as a :class:`RunningComponent`."""

    def __init__(
        self,
        engine: _Engine,
        lease: _Lease,
        connection: _AttachConnection,
        attachments: tuple[Attachment, ...],
        facts: SandboxFacts,
    ) -> None:
        self._engine = engine
        self._lease = lease
        self._id = lease.container_id
        self._connection = connection
        self._started = time.perf_counter()
        self.stdin: ByteSendStream = _Stdin(connection)
        self.stdout: ByteReceiveStream = _Output(connection, _STDOUT)
        self.stderr: ByteReceiveStream = _Output(connection, _STDERR)
        self.attachment_paths: Mapping[str, str] = {
            att.name: f"{ATTACHMENTS_DIR}/{att.name}" for att in attachments
        }
        self.scratch_path = SCRATCH_PATH
        self.facts = facts

    async def wait(self) -> int:
        """Read the attach stream to its end (keeping unread output), then confirm exit."""
        if self.facts.exit_code is not None:
            return self.facts.exit_code
        await self._connection.drain()
        state = await self._stopped_state()
        if state["ExitCode"] == 137 and not state["OOMKilled"] and not self.facts.killed_by_host:
            state = await self._late_oom(state)
        return self._record(state)

    async def kill(self) -> None:
        """SIGKILL the container; a no-op once it has stopped.

        Raises :class:`SandboxLost` if it was removed meanwhile or its engine is gone.
        """
        if self.facts.exit_code is not None:
            return
        was_killed = self.facts.killed_by_host
        self.facts.killed_by_host = True  # recorded first: 137 is read as our doing
        api = self._engine.client.api
        if not await self._engine.call(_kill, api, self._id, lease=self._lease):
            self.facts.killed_by_host = was_killed

    async def stop(self) -> None:
        """Kill if still running and record the final state; used by cleanup."""
        if self.facts.exit_code is not None:
            return
        await self.kill()
        with anyio.move_on_after(_STOP_TIMEOUT):
            self._record(await self._stopped_state())

    async def _inspect(self) -> dict[str, Any]:
        api = self._engine.client.api
        info = await self._engine.call(api.inspect_container, self._id, lease=self._lease)
        state: dict[str, Any] = info["State"]
        return state

    async def _stopped_state(self) -> dict[str, Any]:
        """Inspect until the engine reports the container stopped (polling, backing off)."""
        delay = 0.005
        while True:
            state = await self._inspect()
            if not state["Running"]:
                return state
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def _late_oom(self, state: dict[str, Any]) -> dict[str, Any]:
        """Re-read a SIGKILL nobody here sent: the engine may report the exit before the
        OOM event of the same container (seen about once in 50 OOM runs), and an OOM
        must not be reported as a plain kill."""
        for _ in range(5):
            await anyio.sleep(0.05)
            latest = await self._inspect()
            if latest["OOMKilled"]:
                return latest
        return state

    def _record(self, state: dict[str, Any]) -> int:
        """Note the stopped container's state in the facts; return its exit code."""
        exit_code = self.facts.exit_code = int(state["ExitCode"])
        self.facts.oom_killed = bool(state["OOMKilled"])
        self.facts.timings["run"] = time.perf_counter() - self._started
        return exit_code


class DockerSandbox:
    """Launches each invocation in a fresh container of ``image`` under ``profile``."""

    def __init__(
        self,
        image: str,
        profile: SandboxProfile,
        command: list[str] | None = None,
        client: docker.DockerClient | None = None,
        record_engine: bool = False,
    ) -> None:
        self.image = image
        self.profile = profile
        self.command = command
        self._client = client
        self.record_engine = record_engine
        """Inspect once started and keep what the engine put in effect in
        ``facts.details["engine"]`` (``policy verify``'s engine column)."""

    async def package(self) -> Package | None:
        """The image's FLOW package, read inertly (cached per image id), or ``None``."""
        from runner.package.reader import read_image_package

        client = self._client
        if client is None:
            client = await anyio.to_thread.run_sync(default_client)
        engine = _engine_for(client)
        try:
            return await engine.call(read_image_package, client, self.image)
        except docker.errors.ImageNotFound as exc:
            raise ImageMissing(
                f"image {self.image!r} is not on this Docker engine and flow-runner never "
                f"pulls; {_BUILD_HINT}, or build and tag it yourself"
            ) from exc

    def launch(self, request: LaunchRequest) -> AbstractAsyncContextManager[RunningComponent]:
        """Create, attach and start a container; on exit, kill if needed and remove it."""
        return self._launch(request)

    @asynccontextmanager
    async def _launch(self, request: LaunchRequest) -> AsyncIterator[RunningComponent]:
        with contextlib.ExitStack() as held:
            # Each path is opened, judged and held until the component runs (see _mounts).
            mounts = await anyio.to_thread.run_sync(self._hold, request, held)
            client = self._client
            if client is None:
                client = await anyio.to_thread.run_sync(default_client)
            engine = _engine_for(client)
            await self._check_runtime(engine)
            bounds = await anyio.to_thread.run_sync(
                launch_bounds, self.profile, request.attachments, _scratch_attachment(request)
            )
            sources = await _host_sources(engine, mounts)
            facts = SandboxFacts()
            began = time.perf_counter()
            lease = _Lease(await self._create(engine, request, mounts, sources, facts), began)
            connection: _AttachConnection | None = None
            container: _Container | None = None
            try:
                for path in mounts.values():
                    path.recheck()  # swapped after the check, before the engine mounts it?
                connection = await _timed(facts, "attach", _attach(engine, lease))
                lease.step = "start"
                await _timed(facts, "start", self._start(engine, lease))
                await _verify_mounts(engine, lease, mounts, facts)
                if self.record_engine:
                    api = engine.client.api
                    info = await engine.call(api.inspect_container, lease.container_id, lease=lease)
                    facts.details["engine"] = {**info["HostConfig"], "User": info["Config"]["User"]}
                held.close()  # the mounts are what was judged; the descriptors can go
                lease.step = "run"
                container = _Container(engine, lease, connection, request.attachments, facts)
                async with _disk_watch(container, bounds, self.profile.disk_poll):
                    yield container
            finally:
                with anyio.CancelScope(shield=True):
                    cleanup = _cleanup(engine, lease, connection, container)
                    await _timed(facts, "cleanup", cleanup)
                if lease.lost is not None:
                    raise lease.lost  # the run's failure, in place of what it caused in the host

    def _hold(self, request: LaunchRequest, stack: contextlib.ExitStack) -> dict[str, HeldPath]:
        """Judge and hold every bind source: mount target -> held path (closed by ``stack``)."""
        check_unique(request.attachments)
        allowed = self.profile.allowed_mounts
        mounts: dict[str, HeldPath] = {}
        for att in request.attachments:
            mounts[f"{ATTACHMENTS_DIR}/{att.name}"] = hold(att, allowed)
            stack.callback(mounts[f"{ATTACHMENTS_DIR}/{att.name}"].close)
        scratch = _scratch_attachment(request)
        if scratch is not None:
            mounts[SCRATCH_PATH] = hold(scratch, allowed, directory=True)
            stack.callback(mounts[SCRATCH_PATH].close)
        return mounts

    async def _start(self, engine: _Engine, lease: _Lease) -> None:
        container_id = lease.container_id

        def start() -> None:
            try:
                engine.client.api.start(container_id)
            except docker.errors.APIError as exc:
                if exc.status_code == 404 or not exc.is_client_error():
                    raise  # removed meanwhile, or the engine failed: a loss
                raise DockerSandboxError(
                    f"container {container_id[:12]} (image {self.image!r}, runtime "
                    f"{self.profile.runtime!r}) did not start: {exc.explanation}; check the "
                    "image's command and the engine's log"
                ) from exc

        await engine.call(start, lease=lease)

    async def _check_runtime(self, engine: _Engine) -> None:
        runtime = self.profile.runtime
        if runtime == "runc":
            return
        if engine.runtimes is None:
            info = await engine.call(engine.client.info)
            engine.runtimes = frozenset(info.get("Runtimes", {}))
        if runtime not in engine.runtimes:
            raise RuntimeMissing(
                f"sandbox profile {self.profile.name!r} needs the container runtime "
                f"{runtime!r} (gVisor), which this engine does not offer (it has: "
                f"{', '.join(sorted(engine.runtimes))}); register it with "
                "`images/engine.sh runsc` (installs Debian's runsc package, adds it under "
                '"runtimes" in /etc/docker/daemon.json and reloads dockerd), or choose '
                "another profile"
            )

    async def _create(
        self,
        engine: _Engine,
        request: LaunchRequest,
        mounts: Mapping[str, HeldPath],
        sources: Mapping[str, HostSource],
        facts: SandboxFacts,
    ) -> str:
        api = engine.client.api
        run_id = request.run_id or uuid.uuid4().hex
        host_config = api.create_host_config(**_host_config(self.profile, mounts, sources))
        create = functools.partial(
            api.create_container,
            self.image,
            self.command,
            stdin_open=True,  # with attach (not detach) this also sets StdinOnce
            tty=False,
            user=self.profile.user,
            labels=run_labels(run_id, request.parent_run_id),
            host_config=host_config,
        )
        try:
            created = await _timed(facts, "create", engine.call(create))
        except docker.errors.ImageNotFound as exc:
            raise ImageMissing(
                f"image {self.image!r} is not on this Docker engine and flow-runner never "
                f"pulls; {_BUILD_HINT}, or build and tag it yourself"
            ) from exc
        container_id: str = created["Id"]
        facts.details.update(
            container_id=container_id,
            run_id=run_id,
            image=self.image,
            profile=self.profile.name,
            runtime=self.profile.runtime,
        )
        return container_id


@asynccontextmanager
async def _disk_watch(
    container: _Container, bounds: tuple[DiskBound, ...], interval: float
) -> AsyncIterator[None]:
    """Poll the run's bounded host directories while it runs; kill it on a breach.

    The breach is recorded in the facts before the kill, so the run is reported as
    having exceeded its disk bound (by ``runner.api``), not as a plain kill.
    """
    if not bounds:
        yield
        return
    token = anyio.lowlevel.current_token()

    def breached(breach: DiskBreach) -> None:
        container.facts.disk_breach = breach
        # A failed kill is not fatal here: cleanup kills the container in any case.
        with contextlib.suppress(DockerSandboxError, SandboxLost, docker.errors.APIError):
            anyio.from_thread.run(container.kill, token=token)

    watch = DiskWatch(bounds, interval, breached)
    watch.start()
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            container.facts.disk_breach = await anyio.to_thread.run_sync(watch.stop)


def _scratch_attachment(request: LaunchRequest) -> Attachment | None:
    """The run's own scratch directory, judged like an attachment before it is bound."""
    if request.scratch_dir is None:
        return None
    return Attachment("scratch", Path(request.scratch_dir).resolve(), "read-write")


async def _host_sources(engine: _Engine, held: Mapping[str, HeldPath]) -> dict[str, HostSource]:
    """Each held path's bind source as the engine's host names it (see ``pathmap``).

    The judged path, not the one asked for, is translated: the kernel's name for the held
    descriptor. Outside a container this is that path itself, and the engine is not asked.
    """
    if not held:
        return {}
    if engine.path_map is None:
        engine.path_map = await engine.call(PathMap.from_self, engine.client.api)
    path_map = engine.path_map
    return {target: path_map.translate(path.path) for target, path in held.items()}


def _host_config(
    profile: SandboxProfile, held: Mapping[str, HeldPath], sources: Mapping[str, HostSource]
) -> dict[str, Any]:
    """The profile and the held mounts (target -> path, and its source on the engine's
    host) as ``create_host_config`` arguments; without a held scratch directory the
    scratch is a tmpfs."""
    tmpfs = {"/tmp": _tmpfs(profile.tmp_size, profile)}
    mounts = [
        Mount(
            target,
            sources[target].source,
            type=sources[target].type,
            read_only=path.attachment.access == "read",
        )
        for target, path in held.items()
    ]
    if SCRATCH_PATH not in held:
        tmpfs[SCRATCH_PATH] = _tmpfs(profile.scratch_size, profile)
    security_opt = ["no-new-privileges"] if profile.no_new_privileges else []
    if profile.seccomp_json is not None:
        security_opt.append(f"seccomp={profile.seccomp_json}")
    elif profile.seccomp == "unconfined":
        security_opt.append("seccomp=unconfined")
    return {
        "network_mode": profile.network,
        "read_only": profile.read_only_root,
        "mem_limit": profile.memory,
        "memswap_limit": profile.memory,
        "nano_cpus": round(profile.cpus * 1e9),
        "pids_limit": profile.pids,
        "ulimits": [Ulimit(name="nofile", soft=profile.nofile, hard=profile.nofile)],
        "cap_drop": list(profile.cap_drop),
        "cap_add": list(profile.cap_add),
        "security_opt": security_opt,
        "init": profile.init,
        "runtime": profile.runtime,
        "tmpfs": tmpfs,
        "mounts": mounts,
        "log_config": LogConfig(type="none"),  # output goes to the host, not to disk too
    }


async def _verify_mounts(
    engine: _Engine, lease: _Lease, held: Mapping[str, HeldPath], facts: SandboxFacts
) -> None:
    """Refuse the run unless every bind mount is the very file that was judged and held.

    The engine resolves a bind source by name when the container starts, and a name can
    be swapped after :meth:`HeldPath.recheck`; a descriptor cannot be given instead (runc
    refuses ``/proc/PID/fd/N`` as a source: EINVAL, the mount belongs to another mount
    namespace). So the started container's mount points are looked at through
    ``/proc/<its pid>/root`` and compared by device and inode with the held descriptors;
    on any difference the caller's cleanup kills the container before a single protocol
    byte is sent. A runner without the right to look (not root: the container's user is
    another), or one in a container of its own that sees none of the engine's pids (a
    pid there names some other process, or none), records ``mounts_verified = False``
    instead; a container already gone has nothing left to look at.
    """
    if not held:
        return
    if engine.path_map is not None and not engine.path_map.sees_engine_pids:
        facts.details["mounts_verified"] = False
        return
    info = await engine.call(engine.client.api.inspect_container, lease.container_id, lease=lease)
    pid = int(info["State"]["Pid"])
    if not info["State"]["Running"] or pid <= 0:
        facts.details["mounts_verified"] = False
        return
    for target, path in held.items():
        try:
            mounted = os.stat(f"/proc/{pid}/root{target}", follow_symlinks=False)
        except PermissionError:
            facts.details["mounts_verified"] = False
            return
        except OSError as exc:
            raise path.changed(f"the container's {target} cannot be looked at: {exc}") from exc
        if (mounted.st_dev, mounted.st_ino) != path.identity:
            raise path.changed(f"the engine mounted another file at {target}")
    facts.details["mounts_verified"] = True


def _tmpfs(size: int, profile: SandboxProfile) -> str:
    """Options of a private tmpfs: the kernel bounds its bytes and its files (inodes)."""
    return f"rw,nosuid,nodev,size={size},nr_inodes={profile.disk_entries},mode=1777"


async def _attach(engine: _Engine, lease: _Lease) -> _AttachConnection:
    """Attach to stdin, stdout and stderr, and take the socket over from docker-py."""
    params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    attach = engine.client.api.attach_socket
    hijacked = await engine.call(attach, lease.container_id, params, lease=lease)
    raw = getattr(hijacked, "_sock", hijacked)
    if type(raw) is not socket.socket:
        hijacked.close()
        raise DockerSandboxError(
            f"the attach connection to {engine.client.api.base_url} is "
            f"{type(raw).__name__}, not a plain socket; use the local engine socket "
            "(unset DOCKER_HOST) or a plain tcp:// DOCKER_HOST"
        )
    # Our own descriptor for the same connection; docker-py's objects are released now.
    own = raw.dup()
    own.settimeout(None)
    response = getattr(hijacked, "_response", None)
    if response is not None:
        response.close()
    hijacked.close()
    raw.close()
    # A transport-backed stream even for a unix socket: anyio's UNIXSocketStream registers
    # and unregisters the socket with the event loop on every read (bench/channels.py).
    try:
        return _AttachConnection(await SocketStream.from_socket(own))
    except BaseException:
        own.close()  # cancelled while wrapping: the descriptor is still ours to close
        raise


async def _cleanup(
    engine: _Engine,
    lease: _Lease,
    connection: _AttachConnection | None,
    container: _Container | None,
) -> None:
    """Kill, record, remove (with anonymous volumes) and close; run shielded.

    A loss on the way is kept in ``lease`` and the next step is still tried: a container
    removed by someone else needs nothing more, and an engine that went away refuses the
    removal at once, which leaves the container for the next sweep (``flow-runner gc``).
    """
    lease.step = "cleanup"
    try:
        if container is not None:
            with contextlib.suppress(SandboxLost):
                await container.stop()
    finally:
        try:
            api = engine.client.api
            await engine.call(_remove, api, lease.container_id, lease=lease)
        except SandboxLost:
            if lease.lost is not None:  # always: this loss, or the earlier one it followed
                lease.lost.container_left = True
        finally:
            if connection is not None:
                await connection.aclose()


def _kill(api: docker.APIClient, container_id: str) -> bool:
    """SIGKILL the container (in a worker thread); ``False`` if it was not running."""
    try:
        api.kill(container_id)
    except docker.errors.APIError as exc:
        if exc.status_code != 409:
            raise
        return False
    return True


def _remove(api: docker.APIClient, container_id: str) -> None:
    """Force-remove the container with its anonymous volumes (in a worker thread).

    Gone already (404: removed by someone else) or being removed (409: by a sweep) is
    the end wanted.
    """
    try:
        api.remove_container(container_id, v=True, force=True)
    except docker.errors.APIError as exc:
        if exc.status_code not in (404, 409):
            raise


async def _timed(facts: SandboxFacts, name: str, step: Awaitable[T]) -> T:
    """Await ``step`` and record how long it took in ``facts.timings[name]``."""
    started = time.perf_counter()
    try:
        return await step
    finally:
        facts.timings[name] = time.perf_counter() - started
