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
is judged on the record's word: it only says what to start early.

The record is in the warm runner's socket directory (:mod:`runner.warm.rundir`), which only
this user may enter: whoever could write there could already answer this user's commands
in the warm runner's place. A record is read only when it is this user's and grants nothing
to others, and is used only when it starts no more than the security defaults allow, with
no host path and no network (:func:`_startable`: a run with an attachment, or under a
loosened profile, launches fresh); :data:`KEEP` records are kept, the oldest go. The container is
labelled as this process's: gc spares it while the process lives and sweeps it after
(kill -9 included, or a Ctrl-C while it was being created); an exit without a claim
removes it (:func:`end`). ``FLOW_RUNNER_HEAD_START=0`` turns it off.

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
    import socket
    from collections.abc import Mapping
    from typing import Any

    from runner.sandbox.docker.ahead import Ahead

DISABLE = "FLOW_RUNNER_HEAD_START"
"""``FLOW_RUNNER_HEAD_START=0``: never start a container ahead in a cold ``exec``."""
KEEP = 32
"""Records kept per user: a command line's record is ~20 KB (the seccomp profile's text)."""
MAX_RECORD_BYTES = 1 << 20
PREFIX = "head-start-"

current: HeadStart | None = None
"""This process's head start, once :func:`begin` made one."""


class Claimed:
    """The container started ahead as a launch receives it (``PooledContainer``)."""

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
        command. Blocking."""
        del claimer  # its owner is this process: gc spares it while this process lives
        text = json.dumps(config, sort_keys=True)
        if text != self.recorded:
            _write(self.path, text)
        if self._asked:
            return None
        self._asked = True
        ahead = self._take()
        if ahead is None:
            return None
        started = ahead.started()
        ready = time.perf_counter()
        if text != self.recorded or not started or ahead.sock is None:
            ahead.remove()
            return None
        if _said_something(ahead.sock):
            ahead.remove()
            return None
        return Claimed(ahead, ahead.sock.detach(), ready)

    def released(self, container_id: str) -> None:
        """The claimed container was removed by its run: nothing is left to do."""

    def end(self) -> None:
        """Remove a container started ahead and never claimed, and forget the record that
        started one no launch wanted. Blocking; once, as the process ends."""
        ahead = self._take()
        if ahead is not None:
            ahead.remove()
            _forget(self.path)

    def done(self) -> bool:
        """Whether no thread is asking the engine for the container any more."""
        return self._thread is None or not self._thread.is_alive()

    def _take(self) -> Ahead | None:
        if self._thread is not None:
            self._thread.join()
        ahead, self.ahead = self.ahead, None
        return ahead


def begin(argv: list[str], environ: Mapping[str, str]) -> None:
    """Make this process's head start (:data:`current`) if ``argv`` is an ``exec``, and
    start its container if the command line has a record. Called once the command is
    known to run in this process."""
    global current
    if argv[1:2] != ["exec"] or environ.get(DISABLE) == "0":
        return
    path = record_path(argv, environ)
    current = HeadStart(path, _read(os.path.dirname(path), path))


def record_path(argv: list[str], environ: Mapping[str, str]) -> str:
    """Where the record of the command line ``argv``, run in this directory, is kept."""
    digest = blake2b(repr((os.getcwd(), argv[1:])).encode("utf-8", "surrogateescape"))
    return os.path.join(rundir.directory(environ), f"{PREFIX}{digest.hexdigest()[:32]}.json")


def end(status: int) -> None:
    """As the process ends (its exit status is ``status``): :meth:`HeadStart.end`."""
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


def _read(place: str, path: str) -> str | None:
    """The record at ``path`` as sorted-key JSON, or None: none, not this user's alone, too
    large, not a launch configuration, or one naming a host path writable by it."""
    try:
        if rundir.unsafe(place) is not None:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
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
        data = file.read(MAX_RECORD_BYTES)
    try:
        config = json.loads(data)
    except ValueError:
        return None
    return json.dumps(config, sort_keys=True) if _startable(config) else None


def _startable(config: object) -> bool:
    """Whether ``config`` has a launch configuration's shape and starts nothing the
    security defaults would not: no host path, no network, no device or added capability;
    every capability dropped, a read-only root, no new privileges, a seccomp profile,
    memory and pids limits, a user other than root. A record can start no more than a
    local image in that sandbox, with nothing to read or reach."""
    if not isinstance(config, dict) or set(config) != {
        "image", "command", "user", "host_config", "source"
    }:  # fmt: skip
        return False
    host, user = config["host_config"], str(config["user"])
    if not isinstance(host, dict) or {"Binds", "Privileged", "CapAdd", "Devices"} & set(host):
        return False
    options = host.get("SecurityOpt")
    return (
        host.get("NetworkMode") == "none"
        and host.get("Mounts") == []
        and host.get("CapDrop") == ["ALL"]
        and host.get("ReadonlyRootfs") is True
        and isinstance(options, list)
        and "no-new-privileges" in options
        and any(str(option).startswith("seccomp={") for option in options)
        and all(isinstance(host.get(limit), int) and host[limit] > 0 for limit in _LIMITS)
        and user.partition(":")[0] not in ("", "0", "root")
    )


_LIMITS = ("Memory", "PidsLimit")


def _write(path: str, text: str) -> None:
    """Record ``text`` at ``path`` (atomically, mode 0600), keeping the :data:`KEEP` newest."""
    place = os.path.dirname(path)
    try:
        rundir.ensure(place)
        partial = f"{path}.{os.getpid()}.part"
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
        return  # no record: the next run starts nothing ahead


def _forget(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        return


def _said_something(sock: socket.socket) -> bool:
    """Whether the component wrote (or its stream ended) before its ``flow/run``."""
    import select

    return bool(select.select([sock], [], [], 0)[0])
