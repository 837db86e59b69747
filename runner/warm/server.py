"""The warm runner's server: flow-runner imported once, a handler forked per connection.

``flow-runner daemon serve SECONDS [--detach] [--pool N] [--pool-idle SECONDS]
[--pool-max N]``, reached by the console script before it parses anything. Before it
imports, it checks the socket directory (:mod:`runner.warm.rundir`) and takes the lock of
the installation's key (:mod:`runner.warm.key`): one server per key. Its imports may start
no thread (a fork copies only the thread that forks); the garbage collector is then frozen,
so forked runs do not copy the pages it would walk. One thread polls the socket (0600, in a
0700 directory), a signal self-pipe and the pool's descriptors (:mod:`runner.warm.pool`):
a connection from another uid is closed unread, any other gets a forked handler
(:mod:`runner.warm.handler`). It exits on SIGTERM, SIGINT, SIGHUP or after ``SECONDS``
without a handler, removing its socket, then its pool's containers; handlers finish on
their own.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from functools import partial
from typing import NoReturn

from runner.exits import EXIT_USAGE
from runner.warm import peer, pool, rundir
from runner.warm.envwatch import Reads, watching
from runner.warm.handler import Served, attend
from runner.warm.key import installation_key
from runner.warm.pool import Pool

READY = "flow-runner: warm runner ready"
"""The first words of the line that says the server accepts (``daemon start`` reads it)."""


USAGE = (
    "usage: flow-runner daemon serve SECONDS [--detach] [--pool N] [--pool-idle SECONDS] "
    "[--pool-max N]"
)


@dataclass(frozen=True)
class Options:
    """``daemon serve``'s arguments (``daemon start`` writes them)."""

    idle: float
    detach: bool = False
    pool: int = 1
    """Containers kept waiting per launch configuration (0: no pool)."""
    pool_idle: float = 60.0
    pool_max: int = 4


def options(args: list[str]) -> Options | None:
    """The arguments, or None if they are not ``daemon serve``'s."""
    valued = {"--pool": int, "--pool-max": int, "--pool-idle": float}
    try:
        found = Options(float(args[0]))
        rest = args[1:]
        while rest:
            name, *rest = rest
            if name == "--detach":
                found = replace(found, detach=True)
            elif name in valued:
                found = replace(found, **{name[2:].replace("-", "_"): valued[name](rest.pop(0))})
            else:
                return None
    except (IndexError, ValueError):
        return None
    if found.idle <= 0 or found.pool < 0 or found.pool_max < 0 or found.pool_idle <= 0:
        return None
    return found


def serve(
    args: list[str], load: Callable[[], Callable[[Callable[[int], object]], object]]
) -> NoReturn:
    """Run the server; ``load`` imports everything and returns the CLI's main."""
    given = options(args)
    if given is None:
        _exit(USAGE, EXIT_USAGE)
    idle = given.idle
    place = rundir.directory(os.environ)
    try:
        rundir.ensure(place)
    except (rundir.UnsafeDirectory, OSError) as exc:
        _exit(f"flow-runner: {exc}", EXIT_USAGE)
    key = installation_key()
    path, lock_path = rundir.socket_path(place, key), os.path.join(place, f"{key}.lock")
    if len(os.fsencode(path)) > rundir.SOCKET_PATH_MAX:
        _exit(
            f"flow-runner: socket path {path} too long; set a shorter XDG_RUNTIME_DIR", EXIT_USAGE
        )
    held = rundir.lock(lock_path)
    if held is None:
        _exit(f"flow-runner: a warm runner for this installation is running already ({path})", 0)
    try:
        with watching() as reads:
            main = load()
        if threading.active_count() != 1:
            _exit("flow-runner: importing flow-runner started a thread; no warm runner", 1)
        containers = None
        if given.pool and pool.registered is not None and given.pool_max:
            containers = Pool(pool.registered, given.pool, given.pool_idle, given.pool_max)
        gc.collect()
        gc.freeze()
        listener = _bind(path)
        try:
            served = Served(
                key, path, os.getpid(), time.time(), idle,
                Reads(dict(reads.values), reads.whole), main, 0, time.monotonic(), 0,
                containers.backend.use if containers is not None else None,
            )  # fmt: skip
            os.chdir("/")
            ready = f"{READY}: pid {os.getpid()}, socket {path}, stops after {idle:g} s unused"
            print(ready, file=sys.stderr, flush=True)
            if given.detach:
                _detach()
            _loop(listener, served, held, containers)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(path)
            listener.close()
            if containers is not None:
                containers.close()
    finally:
        rundir.unlock(lock_path, held)
    os._exit(0)


def trusted(conn: socket.socket) -> bool:
    """Whether the peer is this process's uid (the kernel's word)."""
    try:
        return peer.credentials(conn)[1] == os.getuid()
    except OSError:
        return False


def _bind(path: str) -> socket.socket:
    with suppress(FileNotFoundError):
        os.unlink(path)  # a server that died left it: the lock is ours
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    umask = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(umask)
    listener.listen(64)
    listener.setblocking(False)
    return listener


def _loop(listener: socket.socket, served: Served, held: int, containers: Pool | None) -> None:
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _frame: stopping.append(signum))
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)  # poll wakes on the pipe
    server_fds = (listener.fileno(), wake_read, wake_write, held)
    handlers: set[int] = set()
    quiet_since = time.monotonic()
    accepted = 0
    while not stopping:
        if _reap(handlers, containers.removing if containers is not None else set()):
            quiet_since = time.monotonic()
        left = served.idle - (time.monotonic() - quiet_since)
        if not handlers and left <= 0:
            break
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(wake_read, select.POLLIN)
        timeout = None if handlers else left
        if containers is not None:
            for fd in containers.fds():
                poller.register(fd, select.POLLIN)
            expires = containers.timeout()
            if expires is not None:
                timeout = expires if timeout is None else min(timeout, expires)
        for fd, _ in poller.poll(None if timeout is None else timeout * 1000):
            if fd == wake_read:
                with suppress(BlockingIOError):
                    os.read(wake_read, 4096)
                continue
            if fd != listener.fileno():
                assert containers is not None
                containers.ready(fd)
                continue
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, ConnectionAbortedError):
                continue
            with conn:
                if not trusted(conn):
                    continue
                quiet_since = time.monotonic()
                now = replace(
                    served,
                    busy=len(handlers),
                    quiet_since=quiet_since,
                    connections=accepted,
                    pool_waiting=len(containers.waiting) if containers is not None else 0,
                )
                accepted += 1
                channel = containers.channel() if containers is not None else None
                pooled = tuple(containers.fds()) if containers is not None else ()
                handlers.add(pool.fork(partial(attend, conn, now, channel), server_fds + pooled))
                if channel is not None:
                    channel.close()
        if containers is not None:
            containers.expire()


def _reap(handlers: set[int], others: set[int]) -> bool:
    """Reap ended children out of ``handlers`` or ``others`` (the pool's); whether a handler
    ended."""
    reaped = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            reaped = reaped or bool(handlers)
            handlers.clear()
            others.clear()
            return reaped
        if pid == 0:
            return reaped
        others.discard(pid)
        if pid in handlers:
            handlers.discard(pid)
            reaped = True


def _detach() -> None:
    """Stop writing where ``daemon start`` reads, and read nothing from it."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _exit(line: str, code: int) -> NoReturn:
    print(line, file=sys.stderr, flush=True)
    os._exit(code)
