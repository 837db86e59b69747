"""The engine layer under the Docker backend: one async method per engine call.

A run's calls go to the engine's HTTP API (``http.py``); the rare others are docker-py
calls in a worker thread. What the engine answers, and what docker-py raises, is mapped
here and nowhere else: before a container exists, no answer is
:class:`EngineUnavailable`, a missing image :class:`ImageMissing`, any other refusal a
:class:`DockerSandboxError`; once it exists, its :class:`Lease` turns any failure into
:class:`ContainerGone` (someone else removed it) or :class:`EngineLost`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final, TypeVar

import anyio

from runner.sandbox.docker.http import EngineHttp, NoAnswer, Reply
from runner.sandbox.errors import (
    ContainerGone,
    DockerSandboxError,
    EngineLost,
    EngineUnavailable,
    FilesTooLarge,
    ImageMissing,
    SandboxLost,
)
from runner.sandbox.labels import inspect_labels

if TYPE_CHECKING:
    import docker

    from runner.sandbox.pathmap import PathMap

T = TypeVar("T")

POOL_SIZE: Final = 10
"""docker-py's ``DEFAULT_MAX_POOL_SIZE``: the worker threads of the default engine."""

KILL_ANSWER: Final = 5.0
"""Seconds a kill is given to be answered. The engine answers a kill once the output is
handed over, so it can wait on an unread attach stream (:class:`CallStalled`)."""
PING_ANSWER: Final = 2.0
"""Seconds a ping is given: an engine that answers it within this is alive."""

_default_client: docker.DockerClient | None = None
_default_client_lock = threading.Lock()
_default_engine: Engine | None = None


def default_client() -> docker.DockerClient:
    """The process-wide client from the environment; blocking, made on first use."""
    global _default_client
    with _default_client_lock:
        if _default_client is None:
            _default_client = connect()
        return _default_client


def connect() -> docker.DockerClient:
    """A new client from the environment, or :class:`EngineUnavailable` saying what to do."""
    import docker

    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        raise engine_unavailable(exc) from exc


def default_engine() -> Engine:
    """The process-wide engine of the environment; blocking, made on first use. Direct
    where the address is plain, else that of :func:`default_client`."""
    global _default_engine
    with _default_client_lock:
        engine = _default_engine
    if engine is not None:
        return engine
    try:
        http = EngineHttp.from_env()
    except NoAnswer as exc:
        raise engine_unavailable(exc) from exc
    engine = (
        engine_for(default_client())
        if http is None
        else Engine(None, anyio.CapacityLimiter(POOL_SIZE), http)
    )
    with _default_client_lock:
        if _default_engine is None:
            _default_engine = engine
        return _default_engine


def engine_unavailable(exc: BaseException) -> EngineUnavailable:
    return EngineUnavailable(
        f"no Docker engine answers at {engine_address()} ({exc}); start one with "
        "`make engine` (runs images/engine.sh start)"
    )


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def image_missing(image: str) -> ImageMissing:
    return ImageMissing(
        f"image {image!r} is not on this Docker engine and flow-runner never pulls; "
        "build it with `make images` (runs images/build.sh), or build and tag it yourself"
    )


def create_body(
    image: str,
    command: Sequence[str] | None,
    *,
    user: str,
    labels: Mapping[str, str],
    host_config: Mapping[str, Any],
) -> dict[str, Any]:
    """A container of ``image`` (``command`` ``None``: the image's own) with stdin open
    for one attach, stdout and stderr attached, no TTY, as docker-py writes it."""
    body: dict[str, Any] = {
        "User": user,
        "Tty": False,
        "OpenStdin": True,
        "StdinOnce": True,
        "AttachStdin": True,
        "AttachStdout": True,
        "AttachStderr": True,
        "Image": image,
        "NetworkDisabled": False,
        "HostConfig": dict(host_config),
        "Labels": dict(labels),
    }
    if command is not None:
        body["Cmd"] = list(command)
    return body


@dataclass
class Lease:
    """One created container until its removal: its launch step (for the report) and the
    first loss seen (later ones add nothing to what happened to the run)."""

    container_id: str
    began: float
    """``time.perf_counter()`` just before the container was created."""
    step: str = "attach"
    lost: SandboxLost | None = None
    budget_ends: float | None = None
    """``time.monotonic()`` by which every further call must be answered (cleanup's)."""

    def spend_within(self, seconds: float) -> None:
        """From now on, every call about this container shares ``seconds`` in all."""
        self.budget_ends = time.monotonic() + seconds

    def timeout(self, limit: float) -> float:
        """``limit``, or what is left of the budget if that is less."""
        if self.budget_ends is None:
            return limit
        return max(min(limit, self.budget_ends - time.monotonic()), 0.0)

    def loss(self, exc: Exception | str, *, gone: bool = False) -> SandboxLost:
        """A failed call as a loss of this container (``gone``: removed); the first is kept."""
        seconds = time.perf_counter() - self.began
        when = f"{seconds:.1f} s into the run (step: {self.step})"
        if gone:
            kind: type[SandboxLost] = ContainerGone
            message = (
                f"container {self.container_id[:12]} was removed by someone else {when}; "
                "find who runs `docker rm -f` or `flow-runner gc` against this engine"
            )
        else:
            kind = EngineLost
            message = (
                f"the Docker engine at {engine_address()} failed or went away {when}: "
                f"{exc}; retrying may succeed once it answers again"
            )
        lost = kind(message, container_id=self.container_id, step=self.step, seconds=seconds)
        if self.lost is None:
            self.lost = lost
        return lost


class CallStalled(Exception):
    """A call about a container went unanswered though the engine answers a ping: it
    waits on the container's untaken output. Not a loss."""


@dataclass
class Engine:
    """One client (``None``: the process-wide one, made on need), its worker-thread
    limiter, its address for direct calls (``None``: not a plain socket), and what it
    told us once."""

    client: docker.DockerClient | None
    limiter: anyio.CapacityLimiter
    http: EngineHttp | None = None
    runtimes: frozenset[str] | None = None
    path_map: PathMap | None = None
    """Where the engine's host has the paths this process sees (asked once, on need)."""

    async def _call(self, fn: Callable[[docker.DockerClient], T]) -> T:
        """A blocking docker-py call in a worker thread; no answer: :class:`EngineUnavailable`."""
        import docker.errors
        import requests.exceptions

        def call() -> T:
            return fn(self.client or default_client())

        try:
            return await anyio.to_thread.run_sync(call, limiter=self.limiter)
        except docker.errors.DockerException:  # first: an APIError is an HTTPError too
            raise
        except requests.exceptions.RequestException as exc:
            raise engine_unavailable(exc) from exc

    def direct(self) -> EngineHttp:
        """The engine's HTTP API; :class:`DockerSandboxError` for a TLS or ssh engine."""
        if self.http is None:
            base_url = engine_address() if self.client is None else self.client.api.base_url
            raise DockerSandboxError(
                f"the connection to {base_url} is not a plain socket; use the local "
                "engine socket (unset DOCKER_HOST) or a plain tcp:// DOCKER_HOST"
            )
        return self.http

    async def _unleased(self, method: str, path: str, **kwargs: Any) -> Reply:
        """A direct call before a container exists: no answer is :class:`EngineUnavailable`."""
        try:
            return await self.direct().call(method, path, **kwargs)
        except NoAnswer as exc:
            raise engine_unavailable(exc) from exc

    async def _leased(
        self,
        lease: Lease,
        method: str,
        action: str,
        *,
        expected: tuple[int, ...],
        limit: float | None = None,
        stalls: bool = False,
        **kwargs: Any,
    ) -> Reply:
        """A direct call on the container's path + ``action`` within ``limit`` seconds
        and the lease's budget; its reply if its status is ``expected``, else a loss
        raised. With ``stalls`` or a budget, no answer from a live engine is
        :class:`CallStalled`."""
        http = self.direct()
        path = f"/containers/{lease.container_id}{action}"
        timeout = lease.timeout(http.timeout if limit is None else limit)
        try:
            reply = await http.call(method, path, timeout=timeout, **kwargs)
        except NoAnswer as exc:
            if (stalls or lease.budget_ends is not None) and await self.answers():
                raise CallStalled(f"{method} {path}: {exc}") from exc
            raise lease.loss(exc) from exc
        if reply.status not in expected:
            raise lease.loss(f"{reply.status} {reply.message}", gone=reply.status == 404)
        return reply

    async def answers(self) -> bool:
        """Whether the engine answers a ping within :data:`PING_ANSWER` seconds."""
        try:
            reply = await self.direct().call("GET", "/_ping", timeout=PING_ANSWER)
        except NoAnswer:
            return False
        return reply.status == 200

    async def offered_runtimes(self) -> frozenset[str]:
        """The container runtimes the engine has registered (asked once)."""
        if self.runtimes is None:
            info = await self._call(lambda client: client.info())
            self.runtimes = frozenset(info.get("Runtimes", {}))
        return self.runtimes

    async def host_paths(self) -> PathMap:
        """How the engine's host names the paths this process sees (asked once)."""
        if self.path_map is None:
            from runner.sandbox.pathmap import PathMap

            self.path_map = await self._call(lambda client: PathMap.from_self(client.api))
        return self.path_map

    async def create(
        self,
        image: str,
        command: list[str] | None,
        *,
        user: str,
        labels: Mapping[str, str],
        host_config: Mapping[str, Any],
    ) -> str:
        """Create (never pull) a container with stdin open for one attach; its id."""
        body = create_body(image, command, user=user, labels=labels, host_config=host_config)
        reply = await self._unleased("POST", "/containers/create", body=body)
        if reply.status == 404:
            raise image_missing(image)
        if reply.status != 201:
            raise DockerSandboxError(
                f"the Docker engine at {engine_address()} refused to create a container "
                f"of image {image!r}: {reply.message}"
            )
        return str(reply.json()["Id"])

    async def attach_socket(self, lease: Lease) -> socket.socket:
        """Attach to stdin, stdout and stderr; our descriptor of the hijacked socket."""
        http = self.direct()
        query = {"stdin": "1", "stdout": "1", "stderr": "1", "stream": "1"}
        path = f"/containers/{lease.container_id}/attach"
        try:
            with anyio.CancelScope(shield=True):  # a socket is not lost to a cancellation
                sock, reply = await anyio.to_thread.run_sync(
                    http.hijack, path, query, limiter=self.limiter
                )
        except NoAnswer as exc:
            raise lease.loss(exc) from exc
        if sock is None:
            raise lease.loss(f"{reply.status} {reply.message}", gone=reply.status == 404)
        return sock

    async def start(self, lease: Lease) -> str | None:
        """Start the container; the engine's explanation if it refused (a 4xx but 404)."""
        refusals = tuple(status for status in range(400, 500) if status != 404)
        reply = await self._leased(lease, "POST", "/start", expected=(204, 304, *refusals))
        return reply.message if reply.status >= 400 else None

    async def inspect(self, lease: Lease) -> dict[str, Any]:
        info = (await self._leased(lease, "GET", "/json", expected=(200,))).json()
        if not isinstance(info, dict):
            raise lease.loss("the engine's inspect document is not a JSON object")
        return info

    async def kill(self, lease: Lease) -> bool:
        """SIGKILL the container; ``False`` if it was not running. :class:`CallStalled`
        past :data:`KILL_ANSWER` seconds."""
        reply = await self._leased(
            lease, "POST", "/kill", expected=(204, 409), limit=KILL_ANSWER, stalls=True
        )
        return reply.status == 204

    async def remove(self, lease: Lease) -> None:
        """Force-remove the container with its anonymous volumes; gone (404) or being
        removed (409) is the end wanted. No answer from a live engine: :class:`CallStalled`."""
        query = {"v": "1", "force": "1"}
        await self._leased(lease, "DELETE", "", query=query, expected=(204, 404, 409), stalls=True)

    async def inspect_image(self, image: str) -> dict[str, Any]:
        """The image's inspect document, or :class:`ImageMissing`."""
        reply = await self._unleased("GET", f"/images/{image}/json")
        if reply.status == 404:
            raise image_missing(image)
        info = reply.json() if reply.status == 200 else None
        if not isinstance(info, dict):
            raise DockerSandboxError(
                f"the Docker engine at {engine_address()} could not inspect image "
                f"{image!r}: {reply.message}"
            )
        return info

    async def read_archive(self, image_id: str, path: str, max_bytes: int) -> IO[bytes] | None:
        """The engine's tar of ``path`` in the image, in a temporary file the caller
        closes; ``None`` if the image lacks it; over ``max_bytes``: :class:`FilesTooLarge`.
        Read from a container never started (no code of the image runs), labelled so
        ``flow-runner gc`` sweeps it if this process dies."""
        import tempfile

        import docker.errors

        def read(client: docker.DockerClient) -> IO[bytes] | None:
            api = client.api
            created = api.create_container(
                image_id,
                ["true"],
                network_disabled=True,
                labels=inspect_labels(),
                host_config=api.create_host_config(network_mode="none"),
            )
            try:
                try:
                    stream, _stat = api.get_archive(created["Id"], path)
                except docker.errors.NotFound:
                    return None
                with contextlib.ExitStack() as closing:
                    spool = closing.enter_context(tempfile.TemporaryFile())
                    for chunk in stream:
                        spool.write(chunk)
                        if spool.tell() > max_bytes:
                            raise FilesTooLarge(
                                f"{path} in image {image_id[:19]} exceeds flow-runner's "
                                f"{max_bytes:,}-byte bound"
                            )
                    spool.seek(0)
                    closing.pop_all()  # the caller's to close now
                return spool
            finally:
                # v=True: an image's VOLUME would otherwise be left on every read.
                api.remove_container(created["Id"], v=True, force=True)

        try:
            return await self._call(read)
        except docker.errors.ImageNotFound as exc:
            raise image_missing(image_id) from exc


_engines: weakref.WeakKeyDictionary[docker.DockerClient, Engine] = weakref.WeakKeyDictionary()


def engine_for(client: docker.DockerClient) -> Engine:
    """The one :class:`Engine` (and limiter) of ``client``."""
    engine = _engines.get(client)
    if engine is None:
        adapter = client.api.get_adapter(client.api.base_url)
        limiter = anyio.CapacityLimiter(int(getattr(adapter, "max_pool_size", POOL_SIZE)))
        engine = _engines[client] = Engine(client, limiter, EngineHttp.of(client.api))
    return engine


async def open_engine(client: docker.DockerClient | None) -> Engine:
    """The engine of ``client``, or the process-wide :func:`default_engine`."""
    if client is not None:
        return engine_for(client)
    made = _default_engine  # made already: no thread needed to read it
    return made if made is not None else await anyio.to_thread.run_sync(default_engine)
