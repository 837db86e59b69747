"""A cold ``exec``'s head start: its last launch's container, started while it imports.

A cold ``exec`` spends ~150 ms importing and parsing before it asks the engine for a
container, and the engine then takes ~150 ms to start one. When this command line, in this
directory, last launched a container that could have waited in a pool, its launch
configuration was recorded. The next run of it creates and attaches a container of that
configuration and asks for its start as soon as it knows it runs cold (:func:`begin`, from
:mod:`runner.launch`; in a thread, which waits on the engine while the command imports),
then goes on while the engine starts it (:mod:`runner.sandbox.docker.ahead`). The run
claims it as a pooled one (:class:`HeadStart` is its pool): only if the configuration the
run computed itself is the recorded one, byte for byte, the engine started it and the
component has said nothing; otherwise it is removed and the run launches fresh. Nothing
is judged on the record's word: it only says what to start early, and the component,
started before the run's checks, may be removed unused (its input refused, say) without
having been sent anything.

The record is in the warm runner's socket directory (:mod:`runner.warm.rundir`), which only
this user may enter: whoever could write there could already answer this user's commands
in the warm runner's place. A record is read only when it is a regular file of this user's
granting nothing to others, and used only when it starts nothing looser than the shipped
profiles (:func:`~runner.sandbox.docker.ahead.startable`: no host path, no network; a run
with an attachment, or under a loosened profile, is not recorded and launches fresh);
:data:`KEEP` records are kept, the least recently used go. The container is labelled as
this process's: gc spares it while the process lives and sweeps it after. Every end of the
process removes it (:meth:`HeadStart.end`: the command's exit, an exception, Ctrl-C,
SIGTERM or SIGHUP) but ``kill -9`` and a Ctrl-C while it is being created, which leave it
to the next sweep. ``FLOW_RUNNER_HEAD_START=0`` turns it off.

This module is imported before the command's own: the standard library's cheap parts only
until a record is found; then the engine's modules, which the run imports anyway.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from _blake2 import blake2b

from runner.warm import rundir

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    import signal
    import socket
    from collections.abc import Mapping
    from typing import Any

    from runner.sandbox.docker.ahead import Ahead
else:  # signal's own import builds its enums (~3 ms); the same calls
    import _signal as signal

DISABLE = "FLOW_RUNNER_HEAD_START"
"""``FLOW_RUNNER_HEAD_START=0``: never start a container ahead in a cold ``exec``."""
KEEP = 32
"""Records kept per user: a command line's record is ~8 KB (the seccomp profile's text)."""
MAX_RECORD_BYTES = 1 << 20
PREFIX = "head-start-"
WAIT = 10.0
"""Seconds a claim or the process's end waits for the thread asking the engine; past
them the container is not waited for (the next sweep removes one made late)."""

current: HeadStart | None = None
"""This process's head start, once :func:`begin` made one."""


class Claimed:
    """The container started ahead as a launch receives it (``PooledContainer``); it
    waited started ``pool_wait`` seconds: none, since its claim waits for its start."""

    def __init__(self, ahead: Ahead, fd: int, ready: float) -> None:
        self.container_id = ahead.container_id
        self.run_id = ahead.run_id
        self.attach_fd = fd
        self.timings = {"pool_wait": time.perf_counter() - ready}


class HeadStart:
    """A pool of at most one container, this process's (``LaunchPool``): the recorded
    configuration's, started ahead, for the first launch that matches it."""

    def __init__(self, path: str, recorded: str | None) -> None:
        self.path = path
        self.recorded = recorded
        """The record's text as read (sorted-key JSON), or None."""
        self.ahead: Ahead | None = None
        self._asked = False
        self._lock = threading.Lock()  # a flow's launches claim from several threads
        self._thread: threading.Thread | None = None
        if recorded is not None:
            from runner.sandbox.docker.ahead import start_ahead

            def start() -> None:
                try:
                    self.ahead = start_ahead(json.loads(recorded))
                except Exception:  # a head start that fails is none: the run launches fresh
                    self.ahead = None

            self._thread = threading.Thread(target=start, name="head-start", daemon=True)
            self._thread.start()

    def claim(self, config: Mapping[str, Any], claimer: str) -> Claimed | None:
        """The container started ahead if ``config`` is the one it was started with, the
        engine started it and its component has said nothing, else None (removed). The
        first launch only; each records its configuration for the next run of this
        command, if one could be started ahead. Blocking."""
        from runner.sandbox.docker.ahead import startable

        del claimer  # its owner is this process: gc spares it while this process lives
        text = json.dumps(config, sort_keys=True)
        if not startable(json.loads(text)):
            _forget(self.path)
        elif text != self.recorded:
            _write(self.path, text)
        with self._lock:
            if self._asked:
                return None
            self._asked = True
            ahead = self._wait()
            if ahead is None:
                return None
            try:
                if text != self.recorded or not ahead.started() or ahead.sock is None:
                    return None
                ready = time.perf_counter()
                if _said_something(ahead.sock):
                    return None
                _touch(self.path)
                claimed = Claimed(ahead, ahead.sock.detach(), ready)
                self.ahead = None
                return claimed
            finally:
                if self.ahead is not None:
                    self.end()

    def released(self, container_id: str) -> None:
        """The claimed container was removed by its run: nothing is left to do."""

    def end(self) -> None:
        """Remove a container started ahead and not claimed, and forget the record that
        started one no launch took. Blocking; again after an interruption, harmless."""
        ahead = self._wait()
        if ahead is not None:
            ahead.remove()
            self.ahead = None  # only once removed: an interrupted removal is made again
            if not self._asked:
                _forget(self.path)

    def done(self) -> bool:
        """Whether no thread is asking the engine for the container any more."""
        return self._thread is None or not self._thread.is_alive()

    def _wait(self) -> Ahead | None:
        """The container asked for, once its thread is done (:data:`WAIT` at most)."""
        if self._thread is not None:
            self._thread.join(WAIT)
        return self.ahead if self.done() else None


def begin(argv: list[str], environ: Mapping[str, str]) -> None:
    """Make this process's head start (:data:`current`) if ``argv`` is an ``exec``, and
    start its container if the command line has a record. Called once the command is
    known to run in this process; never raises (without a head start, a run is as ever)."""
    global current
    if argv[1:2] != ["exec"] or environ.get(DISABLE) == "0":
        return
    try:
        path = record_path(argv, environ)
        current = HeadStart(path, _read(os.path.dirname(path), path))
    except Exception:  # no working directory, say: nothing to record or start
        return
    if current.recorded is not None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:  # an ignored one stays ignored
                signal.signal(signum, _terminated)


def record_path(argv: list[str], environ: Mapping[str, str]) -> str:
    """Where the record of the command line ``argv``, run in this directory, is kept."""
    digest = blake2b(repr((os.getcwd(), argv[1:])).encode("utf-8", "surrogateescape"))
    return os.path.join(rundir.directory(environ), f"{PREFIX}{digest.hexdigest()[:32]}.json")


def end(status: int = 0) -> None:
    """As the process ends (with ``status``, which changes nothing): :meth:`HeadStart.end`."""
    del status
    if current is not None:
        current.end()


def abandon() -> None:
    """A Ctrl-C before the command's event loop: :meth:`HeadStart.end` once its thread is
    done. One still asking the engine is not waited for (this runs in a signal handler,
    which must not wait on a thread): its container names this process, so the next sweep
    removes it."""
    if current is not None and current.done():
        current.end()


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP before the command's event loop (which takes them over): the
    container started ahead removed, then the signal's default (the process ends by it)."""
    try:
        abandon()
    finally:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _read(place: str, path: str) -> str | None:
    """The record at ``path`` as sorted-key JSON, or None: none, not a regular file of
    this user's alone in a directory of this user's alone, too large, or not JSON."""
    try:
        if rundir.unsafe(place) is not None:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        found = os.fstat(fd)
        if (
            not stat.S_ISREG(found.st_mode)
            or found.st_uid != os.getuid()
            or found.st_mode & 0o077
            or found.st_size > MAX_RECORD_BYTES
        ):
            return None
        data = file.read(MAX_RECORD_BYTES + 1)
    try:
        config = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return json.dumps(config, sort_keys=True) if isinstance(config, dict) else None


def _write(path: str, text: str) -> None:
    """Record ``text`` at ``path`` (atomically, mode 0600), keeping the :data:`KEEP` most
    recently used records."""
    place = os.path.dirname(path)
    partial = f"{path}.{os.getpid()}.part"
    try:
        rundir.ensure(place)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(partial, path)
        records = [
            entry
            for entry in os.scandir(place)
            if entry.name.startswith(PREFIX) and entry.name.endswith(".json")
        ]
        records.sort(key=lambda entry: entry.stat(follow_symlinks=False).st_mtime_ns)
        for entry in records[:-KEEP]:
            os.unlink(entry.path)
    except (OSError, rundir.UnsafeDirectory):
        _forget(partial)  # no record: the next run starts nothing ahead


def _touch(path: str) -> None:
    """Mark the record at ``path`` used now (records are kept by use)."""
    try:
        os.utime(path, follow_symlinks=False)
    except OSError:
        return


def _forget(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        return


def _said_something(sock: socket.socket) -> bool:
    """Whether the component wrote (or its stream ended) before its ``flow/run``."""
    import select

    return bool(select.select([sock], [], [], 0)[0])
