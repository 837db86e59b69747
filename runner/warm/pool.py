"""The warm runner's pool: containers created, attached and started ahead, used once.

After a run that could have used one (:meth:`DockerSandbox.poolable`: read-only host paths
only, so a waiting component can write to no one's directory), the server keeps up to
``size`` containers of its *launch configuration* (image id, command, user, ``HostConfig``)
started, each component blocked on its first read of stdin, our end of its attach socket
held. A run claims one over its *channel* (a socket pair per connection); one claim takes
one container, so of two runs racing for the last, the other launches fresh. Replacements
are prepared once a run that used or wanted a configuration has ended, so preparing
competes with no run's start.

A waiting container is removed when its attach socket says anything (it wrote before its
``flow/run``, or exited), after ``idle`` seconds, when another configuration needs its place
(``most`` in all), when its configuration goes stale, and when the server stops. gc spares
it while the server (its labelled owner) lives; a claimed one is recorded as the run's
before the claim is answered, and spared while either lives. The run removes it; killed,
it leaves it to be removed when its channel closes. Engine work runs in forked children,
never in the server's thread, given by the CLI layer (:class:`Backend`): the warm runner
imports no sandbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from runner.warm import wire
from runner.warm.context import inherited_fds

if TYPE_CHECKING:
    from collections.abc import Mapping

    from runner.warm.wire import Message

CLAIM_SECONDS = 5.0
"""Time the server has to answer a claim; a claim not answered launches fresh."""
CLOSE_SECONDS = 30.0
"""Time a container being prepared has to be handed over (and removed) as the server stops."""


@dataclass(frozen=True)
class Backend:
    """The engine's side of the pool (``runner.sandbox.docker.sandbox``'s functions)."""

    owner: Callable[[], object]
    """This process, as the labels name an owner (called in the server, before forks)."""
    prepare: Callable[[Message, object], tuple[str, str, socket.socket]]
    """Create, attach and start a container of a configuration, labelled as the owner's:
    its id, run id and attach socket. Blocking."""
    remove: Callable[[list[str]], None]
    """Force-remove containers by id (gone already is fine). Blocking."""
    use: Callable[[Claims], None]
    """Make this process's launches claim through ``Claims`` (in a run)."""
    record: Callable[[str, str], None]
    """Record that the process a label text names holds a container (id, text): gc spares
    it while that process lives. Quick, in the server."""


registered: Backend | None = None
"""The engine's side, once the CLI layer has given it (:func:`register`)."""


def register(backend: Backend) -> None:
    """Give the pool its engine side (the CLI layer does, as the server imports it)."""
    global registered
    registered = backend


@dataclass
class Claimed:
    """A claimed container, as a run's launch receives it."""

    container_id: str
    run_id: str
    attach_fd: int
    timings: dict[str, float] = field(default_factory=dict)


class Claims:
    """A run's end of its channel: claim a container, say one was removed."""

    def __init__(self, channel: socket.socket) -> None:
        channel.settimeout(CLAIM_SECONDS)
        self._channel = channel
        self._lock = threading.Lock()  # a batch's launches claim from several threads
        self._broken = False

    def claim(self, config: Mapping[str, Any], claimer: str) -> Claimed | None:
        """A container of ``config``, recorded as held by the process ``claimer`` (a label
        text) names, or None: none waits, or the server did not answer (go fresh)."""
        with self._lock:
            if self._broken:
                return None
            try:
                message = {"op": "claim", "config": dict(config), "claimer": claimer}
                wire.send(self._channel, message)
                reply, fds = wire.receive(self._channel, 1)
            except (OSError, wire.WireError):
                self._broken = True  # a late reply would answer the next claim
                return None
        found = reply.get("claimed")
        if not isinstance(found, dict) or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None
        timings = {"pool_wait": float(found["waited"])}
        return Claimed(str(found["id"]), str(found["run_id"]), fds[0], timings)

    def released(self, container_id: str) -> None:
        """The claimed container ``container_id`` was removed by the run."""
        with self._lock, suppress(OSError):
            wire.send(self._channel, {"op": "released", "id": container_id})


@dataclass
class Waiting:
    config: str
    container_id: str
    run_id: str
    attach: socket.socket
    since: float


@dataclass
class Preparing:
    config: str
    reply: socket.socket


@dataclass
class Channel:
    sock: socket.socket
    wanted: set[str] = field(default_factory=set)
    """Configurations its run claimed or asked for: topped up when it ends."""
    claimed: set[str] = field(default_factory=set)
    """Containers claimed and not yet said removed."""


class Pool:
    """The server's pool (one thread: every method returns at once)."""

    def __init__(self, backend: Backend, size: int, idle: float, most: int) -> None:
        self.backend = backend
        self.size = size
        self.idle = idle
        self.most = most
        self.owner = backend.owner()
        self.configs: dict[str, Message] = {}
        self.waiting: list[Waiting] = []
        self.preparing: dict[int, Preparing] = {}
        self.channels: dict[int, Channel] = {}
        self.removing: set[int] = set()
        """Children removing containers (the server reaps them; :meth:`close` waits)."""

    def channel(self) -> socket.socket:
        """A new connection's channel: the end its run keeps (the pool keeps the other)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.settimeout(CLAIM_SECONDS)  # read only once readable: a message is on its way
        self.channels[ours.fileno()] = Channel(ours)
        return theirs

    def fds(self) -> list[int]:
        """Every descriptor the pool holds, each to poll for reading."""
        held = [entry.attach.fileno() for entry in self.waiting]
        return [*self.channels, *self.preparing, *held]

    def timeout(self) -> float | None:
        """Seconds until the next waiting container expires (None: none waits)."""
        oldest = min((entry.since for entry in self.waiting), default=None)
        return None if oldest is None else max(oldest + self.idle - time.monotonic(), 0.0)

    def ready(self, fd: int) -> None:
        """``fd`` (one of :meth:`fds`) is readable, or closed."""
        if fd in self.channels:
            self._channel(self.channels[fd])
        elif fd in self.preparing:
            self._prepared(self.preparing.pop(fd))
        else:
            found = [entry for entry in self.waiting if entry.attach.fileno() == fd]
            self._remove(found)  # it wrote before its flow/run, or its component exited

    def expire(self) -> None:
        """Remove the containers that have waited ``idle`` seconds."""
        now = time.monotonic()
        self._remove([entry for entry in self.waiting if now - entry.since >= self.idle])
        live = {entry.config for entry in self.waiting}
        live |= {entry.config for entry in self.preparing.values()}
        live = live.union(*(channel.wanted for channel in self.channels.values()))
        for name in set(self.configs) - live:
            del self.configs[name]

    def close(self) -> None:
        """Remove every container the pool holds or is being handed (the server stops)."""
        self.configs.clear()  # so a container handed over now is removed
        self._remove(list(self.waiting))
        for preparing in self.preparing.values():
            preparing.reply.settimeout(CLOSE_SECONDS)
            self._prepared(preparing)
        self.preparing.clear()
        for channel in self.channels.values():
            channel.sock.close()  # not channel.claimed: runs in progress remove their own
        self.channels.clear()
        for pid in self.removing:  # so that the server's end is its containers' end
            with suppress(ChildProcessError):  # reaped by the server already
                os.waitpid(pid, 0)
        self.removing.clear()

    def _channel(self, channel: Channel) -> None:
        try:
            message, _ = wire.receive(channel.sock, 0)
        except (OSError, wire.WireError):
            self._ended(channel)
            return
        op = message.get("op")
        if op == "released":
            channel.claimed.discard(str(message.get("id")))
        elif op == "claim" and isinstance(message.get("config"), dict):
            config = message["config"]
            canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
            name = hashlib.sha256(canonical.encode()).hexdigest()
            self._forget_stale(name, config)
            self.configs[name] = config
            channel.wanted.add(name)
            self._claim(channel, name, str(message.get("claimer")))
        else:
            self._ended(channel)  # a run speaks only these: not one of ours any more

    def _forget_stale(self, name: str, config: Message) -> None:
        """Forget the configurations of ``config``'s ``source`` other than ``name`` (a
        moved tag, an edited profile): their waiting containers go now, not when idle."""
        source = config.get("source")
        if source is None:
            return
        stale = {old for old, known in self.configs.items() if known.get("source") == source}
        stale.discard(name)
        for old in stale:
            del self.configs[old]
        self._remove([entry for entry in self.waiting if entry.config in stale])

    def _claim(self, channel: Channel, name: str, claimer: str) -> None:
        found = next((entry for entry in self.waiting if entry.config == name), None)
        if found is None:
            self._answer(channel, {"claimed": None})
            return
        self.waiting.remove(found)
        claimed: Message = {"id": found.container_id, "run_id": found.run_id}
        claimed["waited"] = time.monotonic() - found.since
        answer: Message = {"claimed": claimed}
        fds = [found.attach.fileno()]
        try:  # before the answer: from here gc spares it while the claimer lives
            self.backend.record(found.container_id, claimer)
        except Exception:  # unrecorded, it would be gc's to take from the run
            answer, fds = {"claimed": None}, []
        answered = self._answer(channel, answer, fds) and bool(fds)
        found.attach.close()
        if answered:
            channel.claimed.add(found.container_id)
        else:
            self._removal([found.container_id])

    def _answer(self, channel: Channel, message: Message, fds: list[int] | None = None) -> bool:
        try:
            wire.send(channel.sock, message, fds or [])
        except OSError:
            self._ended(channel)
            return False
        return True

    def _ended(self, channel: Channel) -> None:
        """A run ended (its channel closed): remove what it left, top up what it used."""
        self.channels.pop(channel.sock.fileno(), None)
        channel.sock.close()
        if channel.claimed:
            self._removal(sorted(channel.claimed))
        for name in sorted(channel.wanted):
            self._top_up(name)

    def _top_up(self, name: str) -> None:
        config = self.configs.get(name)
        if config is None or self.size <= 0:
            return
        have = sum(entry.config == name for entry in self.waiting)
        have += sum(entry.config == name for entry in self.preparing.values())
        while have < self.size:
            if len(self.waiting) + len(self.preparing) >= self.most:
                others = [entry for entry in self.waiting if entry.config != name]
                if not others:
                    return
                self._remove([min(others, key=lambda entry: entry.since)])
            self._prepare(name, config)
            have += 1

    def _prepare(self, name: str, config: Message) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.settimeout(CLAIM_SECONDS)
        backend, owner = self.backend, self.owner

        def prepare() -> None:
            try:
                container_id, run_id, attach = backend.prepare(config, owner)
            except Exception as exc:
                wire.send(theirs, {"error": f"{type(exc).__name__}: {exc}"[:2000]})
                return
            try:
                wire.send(theirs, {"id": container_id, "run_id": run_id}, [attach.fileno()])
            except OSError:  # the server is gone: nobody will hold it
                backend.remove([container_id])

        fork(prepare, [fd for fd in inherited_fds() if fd > 2 and fd != theirs.fileno()])
        theirs.close()
        self.preparing[ours.fileno()] = Preparing(name, ours)

    def _prepared(self, preparing: Preparing) -> None:
        with preparing.reply:
            try:
                answer, fds = wire.receive(preparing.reply, 1)
            except (OSError, wire.WireError):
                return  # the child died before it created anything, or while it did
        if "id" not in answer or len(fds) != 1 or preparing.config not in self.configs:
            for fd in fds:
                os.close(fd)
            if "id" in answer:  # of a configuration gone stale meanwhile
                self._removal([str(answer["id"])])
            return
        attach = socket.socket(fileno=fds[0])
        attach.setblocking(False)
        entry = Waiting(
            preparing.config, str(answer["id"]), str(answer["run_id"]), attach, time.monotonic()
        )
        self.waiting.append(entry)

    def _remove(self, entries: list[Waiting]) -> None:
        for entry in entries:
            self.waiting.remove(entry)
            entry.attach.close()
        self._removal([entry.container_id for entry in entries])

    def _removal(self, ids: list[str]) -> None:
        if ids:
            held = [fd for fd in inherited_fds() if fd > 2]
            self.removing.add(fork(partial(self.backend.remove, ids), held))


def fork(work: Callable[[], int | None], close: Iterable[int]) -> int:
    """Run ``work`` in a child of the server (exit status: what it returns, None 0); its pid.
    The child closes ``close`` (the server's descriptors) and ignores the signals that stop
    the server: it finishes what it holds, and a handler outlives its server."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for fd in close:
                with suppress(OSError):
                    os.close(fd)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            code = work() or 0
        finally:
            os._exit(code)
    return pid
