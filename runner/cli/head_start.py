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
this process's: gc spares it while the process lives and sweeps it after. One the run did
not take is removed as its event loop ends, before any output (:func:`end`), and every
other end of the process removes it too (an exception, Ctrl-C, SIGTERM or SIGHUP) but
``kill -9`` and a signal while it is being created, which leave it to the next sweep; one
not claimed within :data:`IDLE` seconds (the command waits for its input) is removed
then. ``FLOW_RUNNER_HEAD_START=0`` turns it off.

This module is imported before the command's own: the standard library's cheap parts only
until a record is found; then the engine's modules, which the run imports anyway.
"""

from __future__ import annotations

import json
import os
import stat
import threading
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
WAIT = 5.0
"""Seconds a claim or the process's end waits for the thread asking the engine (a start
takes 0.15-0.5 s): past them the run launches fresh, and the thread removes what it makes."""
IDLE = 30.0
"""Seconds a container started ahead waits for its claim before its thread removes it."""

current: HeadStart | None = None
"""This process's head start, once :func:`begin` made one."""


class Claimed:
    """The container started ahead as a launch receives it (``PooledContainer``); it
    waited started no time (``pool_wait``), since its claim waits for its start."""

    def __init__(self, ahead: Ahead, fd: int) -> None:
        self.container_id = ahead.container_id
        self.run_id = ahead.run_id
        self.attach_fd = fd
        self.timings = {"pool_wait": 0.0}


class HeadStart:
    """A pool of at most one container, this process's (``LaunchPool``): the recorded
    configuration's, started ahead, for the first launch that matches it.

    Its thread asks the engine, then keeps the container until the claim or the end
    *settles* it, or :data:`IDLE` seconds pass (a command waiting for its input on stdin,
    say), and removes it then; one it finishes making after the settling it removes at
    once. Under ``_lock``, the container has one owner at a time."""

    def __init__(self, path: str, recorded: str | None) -> None:
        self.path = path
        self.recorded = recorded
        """The record's text as read (sorted-key JSON), or None."""
        self.ahead: Ahead | None = None
        self._lock = threading.RLock()  # a signal handler may settle in the middle of a removal
        self._made = threading.Event()  # the thread's engine calls are over
        self._settled = threading.Event()  # claimed or ended: nothing is kept after
        if recorded is None:
            self._made.set()
            return
        from runner.sandbox.docker.ahead import start_ahead

        def keep() -> None:
            try:
                made = start_ahead(json.loads(recorded))
            except Exception:  # a head start that fails is none: the run launches fresh
                made = None
            with self._lock:
                self.ahead = made
            self._made.set()
            self._settled.wait(IDLE)
            self._drop()  # claimed (none is kept), ended, made too late, or idle too long

        threading.Thread(target=keep, name="head-start", daemon=True).start()

    def claim(self, config: Mapping[str, Any], claimer: str) -> Claimed | None:
        """The container started ahead if ``config`` is the one it was started with, the
        engine started it and its component has said nothing, else None (removed). The
        first launch only; each records its configuration for the next run of this
        command, if one could be started ahead. Blocking, :data:`WAIT` seconds at most
        for the thread and as long again for the engine's start."""
        from runner.sandbox.docker.ahead import startable

        del claimer  # its owner is this process: gc spares it while this process lives
        text = json.dumps(config, sort_keys=True)
        if not startable(json.loads(text)):
            _forget(self.path)
        elif text != self.recorded:
            _write(self.path, text)
        if self._settled.is_set() or text != self.recorded:
            self._settled.set()  # its thread removes what it made, beside a fresh launch
            return None
        self._made.wait(WAIT)
        with self._lock:
            ahead, self.ahead = self.ahead, None
            self._settled.set()  # a thread still making one removes it when done
        if ahead is None:
            return None
        try:
            if ahead.refusal() is None and ahead.sock and not _said_something(ahead.sock):
                _touch(self.path)
                return Claimed(ahead, ahead.sock.detach())
        except Exception:  # not the engine's answer we expected: the run launches fresh
            pass
        ahead.remove()
        return None

    def released(self, container_id: str) -> None:
        """The claimed container was removed by its run: nothing is left to do."""

    def end(self, wait: bool = True) -> None:
        """Settle: remove a container started ahead and not claimed, and forget the record
        that started one no launch took. Blocking (:data:`WAIT` seconds at most for the
        thread, none if not ``wait``); again after an interruption, harmless."""
        if wait:
            self._made.wait(WAIT)
        if not self._settled.is_set() and self._made.is_set() and self.ahead is not None:
            _forget(self.path)  # started for a command that took none: not again
        self._settled.set()
        self._drop()

    def _drop(self) -> None:
        """Remove the container kept, if any; it is forgotten only once removed, so that
        an interrupted removal is made again."""
        with self._lock:
            ahead = self.ahead
            if ahead is not None:
                ahead.remove()
                self.ahead = None


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
    """A Ctrl-C, SIGTERM or SIGHUP before the command's event loop: :meth:`HeadStart.end`
    without waiting for the thread (this runs in a signal handler): a container still being
    made is left, naming this process, to the next sweep."""
    if current is not None:
        current.end(wait=False)


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

    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(0))
