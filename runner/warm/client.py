"""The command's side: hand the run to the warm runner, forward signals, return its status.

:func:`hand_off` returns None whenever the command should run in its own process (no
socket directory, at one ``lstat``; an unsafe one; no server of this uid for this key; a
refusal): until the server says the run started nothing has happened. A started run
writes to this process's descriptors; this process forwards the signals sent to it (Ctrl-C
cancels as in process; Ctrl-Z and ``fg`` stop and continue the run with it) and exits with
the run's status or dies by its signal; should the handler be killed first, it waits for
the run to end and exits with :data:`EXIT_LOST`.
"""

from __future__ import annotations

import os
import stat
import sys

from runner.exits import EXIT_INFRASTRUCTURE
from runner.warm import rundir
from runner.warm.key import installation_key

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    import signal
    import types
    from _socket import socket
    from collections.abc import Mapping
    from typing import NoReturn

    from runner.warm.wire import Message
else:  # signal's own import builds its enums (~3 ms of every warm command); same calls
    import _signal as signal

EXIT_LOST = EXIT_INFRASTRUCTURE
"""The run ended, its handler killed before reporting its status (retrying may succeed)."""
DISABLE = "FLOW_RUNNER_WARM"
"""``FLOW_RUNNER_WARM=0`` runs every command in its own process."""
ANSWER = 10.0
"""Seconds the server has to answer a request (a run: that it started); then the command
runs in process (a run started later finds its client gone and is cancelled)."""


def hand_off() -> int | None:
    """Run this command (``sys.argv``) in the warm runner: its exit status, or None. Called
    where the command would call the CLI's main, before this process opened any descriptor:
    the run gets the ones it has, by number."""
    if os.environ.get(DISABLE) == "0" or sys.argv[1:2] == ["daemon"]:
        return None
    caller = sys._getframe(1)
    found = connect(os.environ)
    if found is None:
        return None
    sock, key = found
    try:
        return _run(sock, key, caller)
    finally:
        sock.close()


def connect(environ: Mapping[str, str]) -> tuple[socket, str] | None:
    """A connection to this installation's warm runner and its key, or None: there is none
    (or none of this uid's, in a directory of this uid's alone)."""
    place = rundir.directory(environ)
    try:
        if rundir.unsafe(place) is not None:
            return None
    except OSError:
        return None
    key = installation_key()
    path = rundir.socket_path(place, key)
    try:
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != os.getuid():
        return None
    from _socket import AF_UNIX, SOCK_CLOEXEC, SOCK_STREAM
    from _socket import socket as unix_socket  # socket's own import costs ~3 ms

    from runner.warm import peer

    sock = unix_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC)
    try:
        sock.connect(path)
        pid, uid, _ = peer.credentials(sock)
        if uid != os.getuid():
            raise PermissionError("the warm runner's socket is another user's")
        if peer.stopped(pid):  # the kernel still queues connections for a stopped server
            raise ConnectionRefusedError("the warm runner is stopped")
        sock.settimeout(ANSWER)
    except OSError:
        sock.close()
        return None
    return sock, key


def request(op: str) -> tuple[Message, list[int]] | None:
    """Ask this installation's warm runner ``op`` (``status``, ``stop``): its reply and the
    descriptors that came with it, or None when there is no warm runner to ask."""
    from runner.warm import context, wire

    found = connect(os.environ)
    if found is None:
        return None
    sock, key = found
    try:
        wire.send(sock, context.describe(op, key))
        return wire.receive(sock, 1)
    except (OSError, wire.WireError):
        return None
    finally:
        sock.close()


def _run(sock: socket, key: str, caller: types.FrameType) -> int | None:
    from runner.warm import context, wire

    fds = [fd for fd in context.inherited_fds() if fd != sock.fileno()]
    described = context.describe_run(key, fds, context.stack_depth(caller))
    if described is None:
        return None
    try:
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        wire.send(sock, described, [cwd, *fds])
        reply, pidfds = wire.receive(sock, 1)
    except (OSError, wire.WireError):
        return None
    finally:
        os.close(cwd)
    if "started" not in reply or len(pidfds) != 1:
        for fd in pidfds:
            os.close(fd)
        return None  # refused: nothing ran
    sock.settimeout(None)  # the run takes as long as it takes
    return _wait(sock, pidfds[0])


def _wait(sock: socket, pidfd: int) -> int:
    import select

    from runner.warm import wire

    def forward(signum: int, _frame: object) -> None:
        try:
            signal.pidfd_send_signal(pidfd, signum)
        except ProcessLookupError:
            return  # it has exited: its status is on its way

    def suspend(signum: int, _frame: object) -> None:
        forward(signal.SIGSTOP, None)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until SIGCONT
        signal.signal(signal.SIGTSTP, suspend)

    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM,
                   signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):  # fmt: skip
        signal.signal(signum, forward)
    signal.signal(signal.SIGTSTP, suspend)
    try:
        reply: Message | None = wire.receive(sock)[0]
    except (OSError, wire.WireError):
        reply = None
    if reply is not None and isinstance(reply.get("exit"), int):
        return int(reply["exit"])
    if reply is not None and isinstance(reply.get("signal"), int):
        _die_by(int(reply["signal"]))
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.poll()  # readable once the run has exited
    sys.stderr.write(
        "flow-runner: the warm runner's handler was lost before it reported how the run "
        f"ended; the run has ended, its exit status is unknown (exit {EXIT_LOST})\n"
    )
    sys.stderr.flush()
    return EXIT_LOST


def _die_by(signum: int) -> NoReturn:
    """End as the run ended: by the same signal, as a shell and a supervisor see it."""
    from contextlib import suppress

    with suppress(OSError):  # SIGKILL (the OOM killer, kill -9) has no handler
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is not to end the process
