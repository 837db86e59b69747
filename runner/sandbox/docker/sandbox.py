"""The Docker backend: one container per invocation, driven through ``engine.py``.

A launch judges and holds every bind source (``runner.sandbox.attachments``), creates the
container (never pulling), attaches to its stdio *before* starting it so no early output
is lost, starts it, verifies that the engine mounted the very files that were held, and
hands the host a :class:`~runner.sandbox.docker.container.Container` while the run's
bounded host directories are watched (``runner.sandbox.disk``).

Leaving the ``async with`` block always kills (if needed), records the container's state
and removes it, shielded from cancellation: a deadline, Ctrl-C or a crash in the host
cannot leak a container; labels naming the run and its process
(``runner.sandbox.labels``) let ``runner.sandbox.gc`` sweep up after a killed host. A loss
of the container or the engine after creation ends the launch with that loss once cleanup
has run, which the API reports as the run's failure.

What only a launch with host paths uses, and the tar reader of an image's files, are
imported where used: a plain run of an image does not pay for them at start-up.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
import anyio.lowlevel

from runner.sandbox.base import (
    Attachment,
    DiskBreach,
    ImageEntry,
    LaunchRequest,
    RunningComponent,
    SandboxFacts,
)
from runner.sandbox.docker.attach import AttachConnection, open_connection
from runner.sandbox.docker.container import ATTACHMENTS_DIR, SCRATCH_PATH, Container
from runner.sandbox.docker.engine import CallStalled, Engine, Lease, default_engine, open_engine
from runner.sandbox.errors import DockerSandboxError, RuntimeMissing, SandboxLost
from runner.sandbox.labels import Process, drop_claim, run_labels
from runner.sandbox.profiles import SandboxProfile
from runner.sandbox.registry import SandboxSpec, StopGraces, load_spec_profile

if TYPE_CHECKING:
    import docker

    from runner.sandbox.attachments import HeldPath
    from runner.sandbox.disk import DiskBound
    from runner.sandbox.pathmap import HostSource

T = TypeVar("T")
CLEANUP_BUDGET = 15.0
"""Seconds that every engine call of a run's cleanup (kill, the reads of its stopped
state, remove) shares: a run ends within its grace and this, whatever the engine does."""


def open_docker(spec: SandboxSpec) -> tuple[DockerSandbox, StopGraces]:
    """The ``docker`` backend's factory (``flow_runner.sandboxes``): ``spec.image`` under
    the spec's profile (and user), ``spec.command`` replacing the image's command."""
    if not spec.image:
        raise DockerSandboxError("the docker backend needs an image: exec IMAGE [COMMAND...]")
    profile = load_spec_profile(spec)
    command = list(spec.command) if spec.command is not None else None
    sandbox = DockerSandbox(spec.image, profile, command, record_engine=spec.record_engine)
    return sandbox, StopGraces(cancel=profile.cancel_grace, exit=profile.exit_grace)


@dataclass(frozen=True)
class DockerImage:
    """An image on the engine, as an :class:`~runner.sandbox.base.ImageSource`."""

    engine: Engine
    image_id: str
    labels: Mapping[str, str]

    async def files(self, path: str, *, max_bytes: int) -> list[ImageEntry] | None:
        """The entries under ``path`` (:meth:`Engine.read_archive`)."""
        archive = await self.engine.read_archive(self.image_id, path, max_bytes)
        if archive is None:
            return None
        with archive:
            return await anyio.to_thread.run_sync(entries_from_tar, archive)


def entries_from_tar(archive: IO[bytes]) -> list[ImageEntry]:
    """The entries of a ``get_archive`` tar, named below its top directory."""
    import tarfile

    entries: list[ImageEntry] = []
    with tarfile.open(fileobj=archive, mode="r:") as tar:
        for member in tar:
            _, _, path = member.name.partition("/")
            if member.isdir():
                entries.append(ImageEntry(path, "dir"))
            elif member.isfile():
                extracted = tar.extractfile(member)
                assert extracted is not None
                entries.append(ImageEntry(path, "file", extracted.read()))
            else:
                entries.append(ImageEntry(path or member.name, "other"))
    return entries


class DockerSandbox:
    """Launches each invocation in a fresh container of ``image`` under ``profile``."""

    name = "docker"

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
        """Keep what the engine put in effect in ``facts.details["engine"]``."""
        self.judged_image: str | None = None
        """The id :meth:`image_source` last found: the image whose package the runs were
        checked against, so the one they launch (a container of another is refused)."""

    async def image_source(self) -> DockerImage:
        """The image on the engine (asked once per call), to read its files inertly."""
        engine = await open_engine(self._client)
        info = await engine.inspect_image(self.image)
        labels = (info.get("Config") or {}).get("Labels") or {}
        self.judged_image = str(info["Id"])
        return DockerImage(engine, self.judged_image, dict(labels))

    def planned_paths(self, request: LaunchRequest) -> tuple[Mapping[str, str], str]:
        """Every attachment is mounted at ``/flow/attachments/NAME``, scratch at
        ``/flow/scratch``, whatever the host paths."""
        return {a.name: f"{ATTACHMENTS_DIR}/{a.name}" for a in request.attachments}, SCRATCH_PATH

    @asynccontextmanager
    async def launch(self, request: LaunchRequest) -> AsyncIterator[RunningComponent]:
        """Create, attach and start a container (or claim one prepared ahead); on exit,
        kill if needed and remove it."""
        if _pool is not None and self.poolable(request):
            with contextlib.ExitStack() as held:
                found = await self._claim(request, held)
                if found is not None:
                    async with self._claimed(request, *found, held) as pooled:
                        if pooled is not None:
                            yield pooled
                            return
        async with self._fresh(request) as fresh:
            yield fresh

    @asynccontextmanager
    async def _fresh(self, request: LaunchRequest) -> AsyncIterator[RunningComponent]:
        """Create, attach and start a new container for ``request``."""
        with contextlib.ExitStack() as held:
            # Each path is opened, judged and held until the component runs (_verify_mounts).
            mounts: dict[str, HeldPath] = {}
            bounds: tuple[DiskBound, ...] = ()
            if request.attachments or request.scratch_dir is not None:
                mounts = await anyio.to_thread.run_sync(self._hold, request, held)
            engine = await open_engine(self._client)
            await self._check_runtime(engine)
            if mounts:
                from runner.sandbox.disk import launch_bounds

                bounds = await anyio.to_thread.run_sync(
                    launch_bounds, self.profile, request.attachments, _scratch_attachment(request)
                )
            sources = await _host_sources(engine, mounts)
            facts = SandboxFacts()
            began = time.perf_counter()
            lease = Lease(await self._create(engine, request, mounts, sources, facts), began)
            connection: AttachConnection | None = None
            container: Container | None = None
            try:
                for path in mounts.values():
                    path.recheck()  # swapped after the check, before the engine mounts it?
                await self._check_image(engine, lease)
                connection = await _timed(facts, "attach", _attach(engine, lease))
                lease.step = "start"
                await _timed(facts, "start", self._start(engine, lease))
                await _verify_mounts(engine, lease, mounts, facts)
                if self.record_engine:
                    info = await engine.inspect(lease)
                    facts.details["engine"] = {**info["HostConfig"], "User": info["Config"]["User"]}
                held.close()  # the mounts are what was judged; the descriptors can go
                lease.step = "run"
                container = Container(engine, lease, connection, request.attachments, facts)
                async with _disk_watch(container, bounds, self.profile.disk_poll):
                    yield container
            finally:
                with anyio.CancelScope(shield=True):
                    cleanup = _cleanup(engine, lease, connection, container)
                    await _timed(facts, "cleanup", cleanup)
                # The run's failure, in place of what it caused in the host; never in
                # place of a cancellation or an interrupt, which its scope must receive.
                if lease.lost is not None and isinstance(sys.exc_info()[1], Exception | None):
                    raise lease.lost

    def poolable(self, request: LaunchRequest) -> bool:
        """Whether this launch may use a container prepared ahead: read-only host paths
        only (a waiting component must write to no one's directory), a root run (its
        labels name no parent), the process-wide engine, nothing recorded."""
        return not (
            any(attachment.access != "read" for attachment in request.attachments)
            or request.scratch_dir is not None
            or request.parent_run_id
            or self._client is not None
            or self.record_engine
        )

    async def launch_config(
        self, engine: Engine, mounts: Mapping[str, HeldPath] | None = None
    ) -> dict[str, Any]:
        """Everything that makes this sandbox's container for a poolable launch with the
        held ``mounts``, as JSON: the image's id, command, user and ``HostConfig`` (the
        profile's effective settings, seccomp text and bind mounts included): equal
        configurations make equal containers. ``source`` is what was asked for (image
        reference, profile name, command, mounts): one source with another configuration
        is a moved tag or an edited profile, and the old one is stale."""
        held = mounts or {}
        image = self.judged_image or str((await engine.inspect_image(self.image))["Id"])
        host_config = _host_config(self.profile, held, await _host_sources(engine, held))
        return {
            "image": image,
            "command": self.command,
            "user": self.profile.user,
            "host_config": host_config,
            "source": [self.image, self.profile.name, self.command, host_config.get("Mounts")],
        }

    async def _claim(
        self, request: LaunchRequest, held: contextlib.ExitStack
    ) -> tuple[PooledContainer, dict[str, HeldPath]] | None:
        """A container prepared ahead for this launch's configuration, and the mounts
        judged and held for it (closed by ``held``); or None (the pool notes the
        configuration, for a later launch)."""
        if _pool is None or not self.poolable(request):
            return None
        began = time.perf_counter()
        mounts: dict[str, HeldPath] = {}
        if request.attachments:
            mounts = await anyio.to_thread.run_sync(self._hold, request, held)
        engine = await open_engine(self._client)
        config = await self.launch_config(engine, mounts)
        claimed = await anyio.to_thread.run_sync(_pool.claim, config, Process.current().label())
        if claimed is None:
            return None
        claimed.timings["claim"] = time.perf_counter() - began
        return claimed, mounts

    @asynccontextmanager
    async def _claimed(
        self,
        request: LaunchRequest,
        claimed: PooledContainer,
        mounts: Mapping[str, HeldPath],
        held: contextlib.ExitStack,
    ) -> AsyncIterator[RunningComponent | None]:
        """Run in a claimed container; on exit, as a fresh launch: kill if needed, remove.
        None where its mounts are not the files judged and held now (:func:`_mounts_hold`):
        it is removed before a byte is sent, and the run launches fresh."""
        assert _pool is not None
        engine = await open_engine(self._client)
        facts = SandboxFacts(timings=dict(claimed.timings))
        lease = Lease(claimed.container_id, time.perf_counter(), step="start")
        connection: AttachConnection | None = None
        container: Container | None = None
        try:
            connection = await open_connection(socket.socket(fileno=claimed.attach_fd))
            self._note(facts, claimed.container_id, claimed.run_id, pooled=True)
            if await _mounts_hold(engine, lease, mounts, facts):
                held.close()  # the mounts are what was judged; the descriptors can go
                lease.step = "run"
                container = Container(engine, lease, connection, request.attachments, facts)
            yield container
        finally:
            with anyio.CancelScope(shield=True):
                cleanup = _cleanup(engine, lease, connection, container)
                await _timed(facts, "cleanup", cleanup)
                if lease.lost is None and "container_left" not in facts.details:
                    drop_claim(claimed.container_id)  # gone: nothing left for gc to spare
                    await anyio.to_thread.run_sync(_pool.released, claimed.container_id)
            if lease.lost is not None and isinstance(sys.exc_info()[1], Exception | None):
                raise lease.lost

    def _hold(self, request: LaunchRequest, stack: contextlib.ExitStack) -> dict[str, HeldPath]:
        """Judge and hold every bind source: mount target -> held path (closed by ``stack``)."""
        from runner.sandbox.attachments import check_unique, check_usable, hold

        check_unique(request.attachments)
        allowed = self.profile.allowed_mounts
        mounts: dict[str, HeldPath] = {}
        user = self.profile.user
        for att in request.attachments:
            held = mounts[f"{ATTACHMENTS_DIR}/{att.name}"] = hold(att, allowed)
            stack.callback(held.close)
            check_usable(held, user)
        scratch = _scratch_attachment(request)
        if scratch is not None:
            held = mounts[SCRATCH_PATH] = hold(scratch, allowed, directory=True)
            stack.callback(held.close)
            check_usable(held, user, shown_as=f"--scratch {scratch.host_path}")
        return mounts

    async def _check_image(self, engine: Engine, lease: Lease) -> None:
        """Refuse a container made from another image than the one judged: the tag was
        moved after the run's package was read (the create names the tag, so that the
        engine and ``docker ps`` show the image's name, not its id)."""
        if self.judged_image is None:
            return
        made = str((await engine.inspect(lease))["Image"])
        if made != self.judged_image:  # Docker names it by id; an engine that does not:
            made = str((await engine.inspect_image(made))["Id"])
        if made != self.judged_image:
            raise DockerSandboxError(
                f"image {self.image!r} was moved to {made[:19]} after its package was read "
                f"from {self.judged_image[:19]}; nothing ran: run it again"
            )

    async def _start(self, engine: Engine, lease: Lease) -> None:
        refused = await engine.start(lease)
        if refused is not None:
            raise DockerSandboxError(
                f"container {lease.container_id[:12]} (image {self.image!r}, runtime "
                f"{self.profile.runtime!r}) did not start: {refused}; check the "
                "image's command and the engine's log"
            )

    async def _check_runtime(self, engine: Engine) -> None:
        runtime = self.profile.runtime
        if runtime == "runc":
            return
        runtimes = await engine.offered_runtimes()
        if runtime not in runtimes:
            raise RuntimeMissing(
                f"sandbox profile {self.profile.name!r} needs the container runtime "
                f"{runtime!r} (gVisor), which this engine does not offer (it has: "
                f"{', '.join(sorted(runtimes))}); register it with "
                "`images/engine.sh runsc` (installs Debian's runsc package, adds it under "
                '"runtimes" in /etc/docker/daemon.json and reloads dockerd), or choose '
                "another profile"
            )

    async def _create(
        self,
        engine: Engine,
        request: LaunchRequest,
        mounts: Mapping[str, HeldPath],
        sources: Mapping[str, HostSource],
        facts: SandboxFacts,
    ) -> str:
        run_id = request.run_id or uuid.uuid4().hex
        create = engine.create(
            self.image,
            self.command,
            user=self.profile.user,
            labels=run_labels(run_id, request.parent_run_id),
            host_config=_host_config(self.profile, mounts, sources),
        )
        container_id = await _timed(facts, "create", create)
        self._note(facts, container_id, run_id)
        return container_id

    def _note(self, facts: SandboxFacts, container_id: str, run_id: str, **more: object) -> None:
        """Name the run's container in the facts (the report's details)."""
        profile = self.profile
        names = {"image": self.image, "profile": profile.name, "runtime": profile.runtime}
        facts.details.update(container_id=container_id, run_id=run_id, **names, **more)


class PooledContainer(Protocol):
    """A container created, attached and started ahead, handed to one launch."""

    container_id: str
    run_id: str
    """Its ``flow-runner.run-id`` label."""
    attach_fd: int
    """Our descriptor of its attach socket, the launch's to close."""
    timings: dict[str, float]
    """``pool_wait``: seconds it waited started (the launch adds ``claim``)."""


class LaunchPool(Protocol):
    """Where a launch claims a prepared container (``runner.warm.pool`` in a warm run)."""

    def claim(self, config: Mapping[str, Any], claimer: str) -> PooledContainer | None:
        """A container of ``config`` (:meth:`DockerSandbox.launch_config`), this caller's
        alone, recorded as held by the process ``claimer`` names (``labels.record_claim``);
        None: none waits (the pool notes ``config``). Blocking."""
        ...

    def released(self, container_id: str) -> None:
        """The claimed container was removed. Blocking."""
        ...


_pool: LaunchPool | None = None


def use_pool(pool: LaunchPool | None) -> None:
    """Have this process's poolable launches claim from ``pool`` first (None: never)."""
    global _pool
    _pool = pool


def prepare_pooled(config: Mapping[str, Any], owner: Process) -> tuple[str, str, socket.socket]:
    """Create, attach and start a container of ``config`` labelled as ``owner``'s (the
    process that keeps it waiting): its id, run id and our end of its attach socket.
    Blocking; removed again on failure."""
    from runner.sandbox.docker.ahead import Ahead

    ahead = Ahead(default_engine().direct(), config, owner)
    refused = ahead.refusal()
    if refused is not None or ahead.sock is None:
        ahead.remove()
        raise DockerSandboxError(f"pooled container did not start: {refused}")
    return ahead.container_id, ahead.run_id, ahead.sock


def remove_pooled(container_ids: list[str]) -> None:
    """Force-remove these containers and their claim records (gone is fine). Blocking."""

    async def remove() -> None:
        engine = await open_engine(None)
        async with anyio.create_task_group() as group:
            for container_id in container_ids:
                lease = Lease(container_id, time.perf_counter(), step="cleanup")
                group.start_soon(_remove_quietly, engine, lease)

    anyio.run(remove)


async def _remove_quietly(engine: Engine, lease: Lease) -> None:
    lease.spend_within(CLEANUP_BUDGET)
    with contextlib.suppress(SandboxLost, CallStalled):
        await engine.remove(lease)
        drop_claim(lease.container_id)


@asynccontextmanager
async def _disk_watch(
    container: Container, bounds: tuple[DiskBound, ...], interval: float
) -> AsyncIterator[None]:
    """Poll the run's bounded host directories while it runs; on a breach, record it in
    the facts, then kill (so the run is reported as over its disk bound, not killed)."""
    if not bounds:
        yield
        return
    from runner.sandbox.disk import DiskWatch

    token = anyio.lowlevel.current_token()

    def breached(breach: DiskBreach) -> None:
        container.facts.disk_breach = breach
        # A failed kill is not fatal here: cleanup kills the container in any case.
        with contextlib.suppress(DockerSandboxError, SandboxLost):
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
    # Not resolved here: the hold judges every symlink on the way (attachments.hold).
    return Attachment("scratch", Path(request.scratch_dir).absolute(), "read-write")


async def _host_sources(engine: Engine, held: Mapping[str, HeldPath]) -> dict[str, HostSource]:
    """Each held path's bind source as the engine's host names it (``pathmap``): the
    judged path (the kernel's name for the held descriptor), not the one asked for."""
    if not held:
        return {}
    path_map = await engine.host_paths()
    return {target: path_map.translate(path.path) for target, path in held.items()}


def _host_config(
    profile: SandboxProfile, held: Mapping[str, HeldPath], sources: Mapping[str, HostSource]
) -> dict[str, Any]:
    """The engine's ``HostConfig`` for the profile and the held mounts (target -> path, and
    its source on the engine's host), as docker-py's ``create_host_config`` writes it (a
    test holds the two equal): swap equal to the memory, ``nofile`` soft and hard;
    ``/tmp``, ``/dev/shm`` and a scratch with no held directory are tmpfs. No log driver:
    the output goes to the host, not to disk too."""
    # /dev/shm too: the engine's own is a 64 MiB tmpfs with no bound on its entries.
    tmpfs = {path: _tmpfs(profile.tmp_size, profile) for path in ("/tmp", "/dev/shm")}
    if SCRATCH_PATH not in held:
        tmpfs[SCRATCH_PATH] = _tmpfs(profile.scratch_size, profile)
    security_opt = ["no-new-privileges"] if profile.no_new_privileges else []
    if profile.seccomp_json is not None:
        security_opt.append(f"seccomp={profile.seccomp_json}")
    elif profile.seccomp == "unconfined":
        security_opt.append("seccomp=unconfined")
    nofile = profile.nofile
    config: dict[str, Any] = {
        "Memory": profile.memory,
        "MemorySwap": profile.memory,
        "ReadonlyRootfs": profile.read_only_root,
        "NetworkMode": profile.network,
        "SecurityOpt": security_opt,
        "Ulimits": [{"Name": "nofile", "Soft": nofile, "Hard": nofile}],
        "LogConfig": {"Type": "none", "Config": {}},
        "Tmpfs": tmpfs,
        "PidsLimit": profile.pids,
        "Init": profile.init,
        "Runtime": profile.runtime,
        "Mounts": [
            {
                "Target": target,
                "Source": sources[target].source,
                "Type": sources[target].type,
                "ReadOnly": path.attachment.access == "read",
            }
            for target, path in held.items()
        ],
    }
    if profile.cap_add:
        config["CapAdd"] = list(profile.cap_add)
    if profile.cap_drop:
        config["CapDrop"] = list(profile.cap_drop)
    if nano_cpus := round(profile.cpus * 1e9):  # 0 is omitted, as docker-py does
        config["NanoCpus"] = nano_cpus
    return config


async def _verify_mounts(
    engine: Engine, lease: Lease, held: Mapping[str, HeldPath], facts: SandboxFacts
) -> None:
    """Refuse the run unless every bind mount is the very file that was judged and held.

    The engine resolves a bind source by name at start, and a name can be swapped after
    :meth:`HeldPath.recheck`; runc refuses a descriptor (``/proc/PID/fd/N``) as a source.
    So the started container's mount points are compared, through ``/proc/<its
    pid>/root``, by device and inode with the held descriptors; on a difference the
    caller's cleanup kills it before a protocol byte is sent. A runner without the right
    to look (not root), or in a container that sees none of the engine's pids, records
    ``mounts_verified = False`` instead; a container already gone has nothing to look at.
    """
    if not held:
        return
    if engine.path_map is not None and not engine.path_map.sees_engine_pids:
        facts.details["mounts_verified"] = False
        return
    info = await engine.inspect(lease)
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


async def _mounts_hold(
    engine: Engine, lease: Lease, held: Mapping[str, HeldPath], facts: SandboxFacts
) -> bool:
    """:func:`_verify_mounts` for a claimed container: False where a mount is not the held
    file, or cannot be looked at (the engine resolved its source by name when it was
    prepared, perhaps long before: no recheck covers that)."""
    if not held:
        return True
    from runner.sandbox.attachments import AttachmentError

    try:
        await _verify_mounts(engine, lease, held, facts)
    except AttachmentError:
        return False
    return facts.details.get("mounts_verified") is True


def _tmpfs(size: int, profile: SandboxProfile) -> str:
    """Options of a private tmpfs: the kernel bounds its bytes and its files (inodes)."""
    return f"rw,nosuid,nodev,size={size},nr_inodes={profile.disk_entries},mode=1777"


async def _attach(engine: Engine, lease: Lease) -> AttachConnection:
    """Attach to stdin, stdout and stderr over one connection read with async I/O."""
    return await open_connection(await engine.attach_socket(lease))


async def _cleanup(
    engine: Engine,
    lease: Lease,
    connection: AttachConnection | None,
    container: Container | None,
) -> None:
    """Kill, record, remove (with anonymous volumes) and close; run shielded, every engine
    call of it within one budget (:data:`CLEANUP_BUDGET`).

    A loss on the way is kept in ``lease`` and the next step still tried; a container the
    engine could not remove is left for the next sweep (``flow-runner gc``). The attach
    stream is let go before the removal unless the container was seen to stop: an engine
    removes a container only once its output is handed over. A removal a live engine does
    not answer within the budget is noted (``container_left``), not a loss of the run.
    """
    lease.step = "cleanup"
    lease.spend_within(CLEANUP_BUDGET)
    try:
        if container is not None:
            with contextlib.suppress(SandboxLost, CallStalled):
                await container.stop()
    finally:
        try:
            if connection is not None and (container is None or container.facts.exit_code is None):
                await connection.aclose()
            await engine.remove(lease)
        except CallStalled:
            facts = container.facts if container is not None else None
            if facts is not None:
                facts.details["container_left"] = True
        except SandboxLost:
            if lease.lost is not None:  # always: this loss, or the earlier one it followed
                lease.lost.container_left = True
        finally:
            if connection is not None:
                await connection.aclose()


async def _timed(facts: SandboxFacts, name: str, step: Awaitable[T]) -> T:
    """Await ``step`` and record how long it took in ``facts.timings[name]``."""
    started = time.perf_counter()
    try:
        return await step
    finally:
        facts.timings[name] = time.perf_counter() - started
