"""One connection to the warm runner: a forked handler reads the request and answers it.

The server reads nothing a client sends; a handler lives as long as the run it watches, so
the server's stop or death never touches a run. ``run``: the handler checks its peer's
groups and the request (:func:`runner.warm.context.refusal`), takes the client's directory
and environment, leaves the server's session (only the signals the client forwards reach
the run) and forks the run, which waits until the client has been told it started: a
handler killed before that leaves a run that ends having run nothing, so the client runs
the command itself, once. The handler reports the run's status (as the run exits: the
run writes it, with the client's descriptors closed, before its process is torn down),
then sweeps (:func:`sweep_alongside`); should the client go first (killed), it sends the
run SIGTERM, which cancels it as in process. ``status`` answers what the server is and
whether this client would be refused; ``stop`` sends the server SIGTERM and passes back a
pidfd to wait on.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from socket import socket
from typing import TYPE_CHECKING, NoReturn

from runner.exits import EXIT_INFRASTRUCTURE
from runner.warm import peer, wire
from runner.warm.adopt import adopt, become, set_recursion
from runner.warm.context import inherited_fds, refusal, stack_depth
from runner.warm.envwatch import Reads
from runner.warm.pool import Claims

if TYPE_CHECKING:
    from runner.warm.wire import Message

_sweep: Callable[[list[str]], object] | None = None


def sweep_alongside(sweep: Callable[[list[str]], object]) -> None:
    """Have each handler call ``sweep(argv)`` once its run's status is reported, off the run's
    path (the CLI layer gives it: the warm runner imports no sandbox); errors are ignored."""
    global _sweep
    _sweep = sweep


REQUEST_SECONDS = 30.0
"""Time a client has to send its request once connected."""


@dataclass(frozen=True)
class Served:
    """What a handler knows of the server that forked it."""

    key: str
    socket: str
    pid: int
    started: float
    idle: float
    reads: Reads
    main: Callable[[Callable[[int], object]], object]
    """The CLI's main: runs the command, tells its argument the exit status, then exits."""
    busy: int
    quiet_since: float
    connections: int
    """Connections accepted before this one."""
    use_pool: Callable[[Claims], None] | None = None
    """Make a run's launches claim from the server's pool (None: the server keeps none)."""
    pool_waiting: int = 0
    """Containers waiting in the pool, handed to the server, when this connection came."""


def attend(conn: socket, served: Served, channel: socket | None = None) -> int:
    """Read the request on ``conn`` and answer it; the handler's exit status. ``channel``:
    the run's end of its channel to the server's pool (:mod:`runner.warm.pool`)."""
    conn.settimeout(REQUEST_SECONDS)
    try:
        request, fds = wire.receive(conn, wire.MAX_FDS + 1)
    except (OSError, wire.WireError):
        return 1
    op = request.get("op")
    reason = None if op == "stop" else _check(conn, request, served)
    if op == "run" and reason is None:
        return _start(conn, request, fds, served, channel)  # the descriptors are its to close
    for fd in fds:
        os.close(fd)
    if op == "stop":
        return _stop(conn, served)
    if op == "status":
        wire.send(conn, _status(served) | {"refusal": reason})
    else:
        wire.send(conn, {"refused": reason or f"no such request: {op!r}"})
    return 0


def _check(conn: socket, request: Message, served: Served) -> str | None:
    if request.get("key") != served.key:
        return "another installation's request"
    try:
        if peer.groups(conn) != frozenset({os.getegid(), *os.getgroups()}):
            return "not the same groups as the warm runner"
        return refusal(request, served.reads)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"a malformed request ({type(exc).__name__}: {exc})"
    except OSError as exc:
        return f"its groups could not be read: {exc.strerror}"


def _status(served: Served) -> Message:
    named = ("pid", "socket", "started", "idle", "busy", "connections")
    return {name: getattr(served, name) for name in named} | {
        "quiet": time.monotonic() - served.quiet_since,
        "pool": served.pool_waiting if served.use_pool is not None else None,
    }


def _stop(conn: socket, served: Served) -> int:
    try:
        pidfd = os.pidfd_open(served.pid)
    except ProcessLookupError:
        pidfd = -1
    try:
        if pidfd < 0 or os.getppid() != served.pid:  # the server is gone (this is init's now)
            wire.send(conn, {"stopped": None})
            return 0
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        wire.send(conn, {"stopped": served.pid}, [pidfd])
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    return 0


def _start(
    conn: socket, request: Message, fds: list[int], served: Served, channel: socket | None
) -> int:
    cwd, *received = fds
    try:
        if len(received) != len(request["fds"]):
            raise ValueError("descriptors missing")
        adopt(request, cwd)
    except (OSError, ValueError) as exc:
        for fd in received:
            os.close(fd)
        wire.send(conn, {"refused": f"its process could not be taken over: {exc}"})
        return 0
    finally:
        os.close(cwd)
    os.setsid()
    go_read, go_write = os.pipe2(os.O_CLOEXEC)
    status_read, status_write = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(go_write)
        os.close(status_read)
        _run(conn, go_read, status_write, request, received, served, channel)
    os.close(go_read)
    os.close(status_write)
    if channel is not None:
        channel.close()
    for fd in received:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        wire.send(conn, {"started": pid}, [pidfd])
        os.write(go_write, b"go")
    except OSError:
        pass  # the client is gone: the run reads no "go" and ends having run nothing
    finally:
        os.close(go_write)
    code = _watch(conn, pid, pidfd, status_read)
    if _sweep is not None:  # after: a hung engine delays neither the status nor a SIGTERM
        with suppress(Exception):
            _sweep(list(request["argv"]))
    return code


def _run(
    conn: socket,
    go: int,
    status: int,
    request: Message,
    received: list[int],
    served: Served,
    channel: socket | None,
) -> NoReturn:
    """The forked run: wait for the word, become the client's process, call the CLI."""
    main = served.main
    try:
        os.close(conn.detach())
        said = os.read(go, 2)
        os.close(go)
        if said != b"go":
            os._exit(0)
        own = [status] if channel is None else [status, channel.detach()]
        status, *kept = become(request, received, own)
        if kept and served.use_pool is not None:
            served.use_pool(Claims(socket(fileno=kept[0])))
        set_recursion(request, stack_depth(sys._getframe()))
    except BaseException as exc:  # nothing may return into the server's code
        os.write(2, f"flow-runner: the warm runner could not take over: {exc!r}\n".encode())
        os._exit(EXIT_INFRASTRUCTURE)  # a bug: the handler checked the request
    try:
        main(partial(_exiting, status))
    except KeyboardInterrupt:  # as the interpreter ends on one nobody caught
        _uncaught()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        _uncaught()
    os._exit(1)


def _exiting(status: int, code: int) -> None:
    """Close every descriptor but ``status`` (a reader of the client's output sees its end
    now, not after this process is torn down), then write the exit status on it. The run
    has ended: a signal the client forwards after this cannot change what it reported.
    The open ones are listed, not a range closed: without close_range(2) that is a close
    per number up to the descriptor limit, which a client may have raised to millions."""
    for fd in inherited_fds():
        if fd != status:
            with suppress(OSError):
                os.close(fd)
    os.write(status, bytes([code]))


def _uncaught() -> None:
    kind, value, traceback = sys.exc_info()
    assert kind is not None and value is not None
    sys.excepthook(kind, value, traceback)
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()


def _watch(conn: socket, pid: int, pidfd: int, status: int) -> int:
    """Wait for the run to exit and report how (unless the client has gone: then cancel).
    The status the run writes on ``status`` as it exits is reported at once, before its
    process is torn down; a run that exits without writing one is reported as it ended."""
    poller = select.poll()
    for fd in (pidfd, conn.fileno(), status):
        poller.register(fd, select.POLLIN)
    answered = False  # the client has the run's status, or has gone
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if status in ready:
            poller.unregister(status)
            said = os.read(status, 1)
            if said and not answered:
                answered = True
                poller.unregister(conn)
                with suppress(OSError):  # the client is gone
                    wire.send(conn, {"exit": said[0]})
        if pidfd in ready:
            break
        if conn.fileno() in ready and not answered:  # sends nothing more: readable = closed
            answered = True
            poller.unregister(conn)
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            signal.pidfd_send_signal(pidfd, signal.SIGCONT)  # were it stopped with the client
    os.close(pidfd)
    os.close(status)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if not answered:
        with suppress(OSError):  # the client is gone
            wire.send(conn, {"exit": code} if code >= 0 else {"signal": -code})
    return 0
