"""The warm runner's server: flow-runner imported once, a handler forked per connection.

``flow-runner daemon serve SECONDS [--detach] [--pool N] [--pool-idle SECONDS]
[--pool-max N]`` (what ``daemon start`` runs; the console
script reaches it without parsing anything, so no command-line state is left in the
process its runs are forked from):

1. the socket directory is created or checked (:mod:`runner.warm.rundir`), the
   installation's key computed (:mod:`runner.warm.key`) *before* anything is imported,
   and the key's lock taken: one server per key;
2. everything a command may import is imported, with the environment watched
   (:mod:`runner.warm.envwatch`); no thread may have been started by it (a fork copies
   only the thread that forks); the garbage collector is run and frozen, so forked runs
   do not copy the pages of what it would walk;
3. the socket is bound (mode 0600, in a 0700 directory) and the ready line written to
   stderr (then, detached, stderr is closed: ``daemon start`` waits for that);
4. one thread, no event loop: ``poll`` on the socket and a self-pipe for signals; a
   connection from another uid is closed unread, any other gets a forked handler
   (:mod:`runner.warm.handler`); handlers are reaped on SIGCHLD;
5. it exits on SIGTERM, SIGINT or SIGHUP, or when no handler has run for ``SECONDS`` and
   none runs, removing its socket first, then its pool's containers. Handlers running
   then finish on their own.

With ``--pool N`` the same loop keeps the pool (:mod:`runner.warm.pool`): each connection
gets a channel to it, and the pool's descriptors (channels, waiting containers' attach
sockets, preparations in flight) are polled beside the socket; its engine work runs in
forked children, never in this thread.
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
    try:
        found = Options(float(args[0]))
        rest = args[1:]
        while rest:
            name, *rest = rest
            if name == "--detach":
                found = replace(found, detach=True)
            elif name == "--pool":
                found = replace(found, pool=int(rest.pop(0)))
            elif name == "--pool-max":
                found = replace(found, pool_max=int(rest.pop(0)))
            elif name == "--pool-idle":
                found = replace(found, pool_idle=float(rest.pop(0)))
            else:
                return None
    except (IndexError, ValueError):
        return None
    if found.idle <= 0 or found.pool < 0 or found.pool_max < 0 or found.pool_idle <= 0:
        return None
    return found


def serve(args: list[str], load: Callable[[], Callable[[], object]]) -> NoReturn:
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
    path, lock_path = rundir.socket_path(place, key), rundir.lock_path(place, key)
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
        backend = pool.registered()
        containers = None
        if given.pool and backend is not None and given.pool_max:
            containers = pool.Pool(backend, given.pool, given.pool_idle, given.pool_max)
        gc.collect()
        gc.freeze()
        listener = _bind(path)
        try:
            served = Served(
                key, path, os.getpid(), time.time(), idle,
                Reads(dict(reads.values), reads.whole), main, 0, time.monotonic(), 0,
                backend.use if containers is not None and backend is not None else None,
            )  # fmt: skip
            os.chdir("/")
            _say(f"{READY}: pid {os.getpid()}, socket {path}, stops after {idle:g} s unused")
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
    if containers is not None:
        containers.server_fds = server_fds
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
                pid = os.fork()
                if pid == 0:
                    pooled = tuple(containers.fds()) if containers is not None else ()
                    _handle(conn, now, server_fds + pooled, channel)
                if channel is not None:
                    channel.close()
                handlers.add(pid)
        if containers is not None:
            containers.expire()


def _handle(
    conn: socket.socket,
    served: Served,
    server_fds: tuple[int, ...],
    channel: socket.socket | None,
) -> NoReturn:
    """The forked handler: drop the server's descriptors and signals, then attend."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for fd in server_fds:
            os.close(fd)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # a handler outlives its server
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        code = attend(conn, served, channel)
    finally:
        os._exit(code)


def _reap(handlers: set[int], others: set[int]) -> bool:
    """Collect the children that ended (``handlers``, and the pool's, some of them in
    ``others``: each is taken out of its set); whether a handler did."""
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


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _exit(line: str, code: int) -> NoReturn:
    _say(line)
    os._exit(code)
