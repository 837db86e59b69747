"""The thin engine layer under the Docker backend: one async method per engine call.

Every call flow-runner makes to the Docker engine is a method of :class:`Engine`: a short
blocking docker-py call in a worker thread, behind one capacity limiter per client sized
like its connection pool, returning the engine's own data. What docker-py and requests
raise is mapped here and nowhere else:

- before a container exists, an engine that does not answer is :class:`EngineUnavailable`
  (nothing was run) and a missing image is :class:`ImageMissing`;
- once a container exists, every call carries its :class:`Lease`, which turns any error
  into one of two losses: :class:`ContainerGone` (the engine no longer knows the
  container: someone else removed it) or :class:`EngineLost` (the engine failed or
  stopped answering). The first loss is kept for the run's report.

The backend above (``sandbox.py``, ``container.py``) holds the objects; this layer holds
none but the client and what the engine told it once (its runtimes, the path map).
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import docker
import docker.errors
import requests.exceptions
from docker.constants import DEFAULT_MAX_POOL_SIZE

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
from runner.sandbox.pathmap import PathMap

T = TypeVar("T")

BUILD_HINT = "build it with `make images` (runs images/build.sh)"

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
        f"no Docker engine answers at {engine_address()} ({exc}); start one with "
        "`make engine` (runs images/engine.sh start)"
    )


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def image_missing(image: str) -> ImageMissing:
    return ImageMissing(
        f"image {image!r} is not on this Docker engine and flow-runner never "
        f"pulls; {BUILD_HINT}, or build and tag it yourself"
    )


@dataclass
class Lease:
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
                f"the Docker engine at {engine_address()} failed or went away {when}: "
                f"{exc}; retrying may succeed once it answers again"
            )
        lost = kind(message, container_id=self.container_id, step=self.step, seconds=seconds)
        if self.lost is None:
            self.lost = lost
        return lost


@dataclass
class Engine:
    """One client with its single limiter for worker threads and what it told us once."""

    client: docker.DockerClient
    limiter: anyio.CapacityLimiter
    runtimes: frozenset[str] | None = None
    path_map: PathMap | None = None
    """Where the engine's host has the paths this process sees (asked once, on need)."""

    async def _call(
        self, fn: Callable[..., T], *args: Any, lease: Lease | None = None, **kwargs: Any
    ) -> T:
        """Run a blocking docker-py call in a worker thread behind the limiter.

        Before a container exists (no ``lease``) an engine that does not answer is
        :class:`EngineUnavailable` (nothing was run) and docker-py's errors are the
        caller's to read. For a created container's calls, every docker-py or requests
        error becomes a loss of it (:meth:`Lease.loss`), so none escapes a run as a
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

    @property
    def base_url(self) -> str:
        return str(self.client.api.base_url)

    async def offered_runtimes(self) -> frozenset[str]:
        """The container runtimes the engine has registered (asked once)."""
        if self.runtimes is None:
            info = await self._call(self.client.info)
            self.runtimes = frozenset(info.get("Runtimes", {}))
        return self.runtimes

    async def host_paths(self) -> PathMap:
        """How the engine's host names the paths this process sees (asked once)."""
        if self.path_map is None:
            self.path_map = await self._call(PathMap.from_self, self.client.api)
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
        api = self.client.api
        create = functools.partial(
            api.create_container,
            image,
            command,
            stdin_open=True,  # with attach (not detach) this also sets StdinOnce
            tty=False,
            user=user,
            labels=dict(labels),
            host_config=api.create_host_config(**host_config),
        )
        try:
            created = await self._call(create)
        except docker.errors.ImageNotFound as exc:
            raise image_missing(image) from exc
        return str(created["Id"])

    async def attach_socket(self, lease: Lease) -> socket.socket:
        """Attach to stdin, stdout and stderr; our own descriptor of the hijacked socket.

        docker-py's objects for the connection are released here, so the socket is read
        with real async I/O by the caller, not through docker-py.
        """
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        attach = self.client.api.attach_socket
        hijacked = await self._call(attach, lease.container_id, params, lease=lease)
        raw = getattr(hijacked, "_sock", hijacked)
        if type(raw) is not socket.socket:
            hijacked.close()
            raise DockerSandboxError(
                f"the attach connection to {self.base_url} is "
                f"{type(raw).__name__}, not a plain socket; use the local engine socket "
                "(unset DOCKER_HOST) or a plain tcp:// DOCKER_HOST"
            )
        own = raw.dup()
        own.settimeout(None)
        response = getattr(hijacked, "_response", None)
        if response is not None:
            response.close()
        hijacked.close()
        raw.close()
        return own

    async def start(self, lease: Lease) -> str | None:
        """Start the container; the engine's explanation if it refused (a client error).

        Removed meanwhile (404) or an engine failure is a loss, raised.
        """
        container_id = lease.container_id

        def start() -> str | None:
            try:
                self.client.api.start(container_id)
            except docker.errors.APIError as exc:
                if exc.status_code == 404 or not exc.is_client_error():
                    raise  # removed meanwhile, or the engine failed: a loss
                return str(exc.explanation)
            return None

        return await self._call(start, lease=lease)

    async def inspect(self, lease: Lease) -> dict[str, Any]:
        """The container's inspect document."""
        api = self.client.api
        info: dict[str, Any] = await self._call(
            api.inspect_container, lease.container_id, lease=lease
        )
        return info

    async def kill(self, lease: Lease) -> bool:
        """SIGKILL the container; ``False`` if it was not running."""
        api = self.client.api

        def kill() -> bool:
            try:
                api.kill(lease.container_id)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
                return False
            return True

        return await self._call(kill, lease=lease)

    async def remove(self, lease: Lease) -> None:
        """Force-remove the container with its anonymous volumes.

        Gone already (404: removed by someone else) or being removed (409: by a sweep) is
        the end wanted.
        """
        await self._call(_remove, self.client.api, lease.container_id, lease=lease)

    async def inspect_image(self, image: str) -> dict[str, Any]:
        """The image's inspect document, or :class:`ImageMissing`."""
        try:
            info: dict[str, Any] = await self._call(self.client.api.inspect_image, image)
        except docker.errors.ImageNotFound as exc:
            raise image_missing(image) from exc
        return info

    async def read_archive(self, image_id: str, path: str, max_bytes: int) -> bytes | None:
        """The engine's tar of ``path`` in the image, or ``None`` if the image lacks it.

        Read out of a container that is created (network none) but never started, then
        removed with its anonymous volumes: no code of the image runs. It is owned like a
        run's container, so ``flow-runner gc`` sweeps it if this process dies meanwhile.
        More than ``max_bytes`` is :class:`FilesTooLarge`.
        """
        api = self.client.api

        def read() -> bytes | None:
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
                buffer = bytearray()
                for chunk in stream:
                    buffer += chunk
                    if len(buffer) > max_bytes:
                        raise FilesTooLarge(
                            f"{path} in image {image_id[:19]} exceeds flow-runner's "
                            f"{max_bytes:,}-byte bound"
                        )
                return bytes(buffer)
            finally:
                # With its anonymous volumes: an image that declares a VOLUME would
                # otherwise leave one behind on every read.
                api.remove_container(created["Id"], v=True, force=True)

        try:
            return await self._call(read)
        except docker.errors.ImageNotFound as exc:
            raise image_missing(image_id) from exc


def _remove(api: docker.APIClient, container_id: str) -> None:
    try:
        api.remove_container(container_id, v=True, force=True)
    except docker.errors.APIError as exc:
        if exc.status_code not in (404, 409):
            raise


_engines: weakref.WeakKeyDictionary[docker.DockerClient, Engine] = weakref.WeakKeyDictionary()


def engine_for(client: docker.DockerClient) -> Engine:
    """The one :class:`Engine` (and limiter) of ``client``."""
    engine = _engines.get(client)
    if engine is None:
        adapter = client.api.get_adapter(client.api.base_url)
        pool = int(getattr(adapter, "max_pool_size", DEFAULT_MAX_POOL_SIZE))
        engine = _engines[client] = Engine(client, anyio.CapacityLimiter(pool))
    return engine


async def open_engine(client: docker.DockerClient | None) -> Engine:
    """The engine of ``client``, or of the process-wide default client."""
    if client is None:
        client = await anyio.to_thread.run_sync(default_client)
    return engine_for(client)
