"""Making the handler and its forked run the client's process (see :mod:`runner.warm.context`).

:func:`adopt` runs in the handler before the fork and may fail (the request is refused,
the command runs in process); :func:`become` runs in the forked run and cannot fail on a
request :func:`runner.warm.context.refusal` let through.
"""

from __future__ import annotations

import fcntl
import io
import locale
import os
import resource
import signal
import sys
import time
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runner.warm.context import inherited_fds

if TYPE_CHECKING:
    from runner.warm.wire import Message

STREAMS = (("<stdin>", "r"), ("<stdout>", "w"), ("<stderr>", "w"))


def adopt(request: Message, cwd: int) -> None:
    """Enter the client's working directory (OSError if it cannot be entered), take its
    environment and umask."""
    os.fchdir(cwd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(request["umask"])


def become(request: Message, received: list[int], own: list[int]) -> list[int]:
    """Take the client's descriptors (``received`` at the numbers ``request["fds"]`` lists,
    every other closed but ``own``, moved above them: their new numbers are returned),
    limits, signals, locale, streams, ``__main__`` and argv."""
    targets: list[int] = request["fds"]
    top = max([*targets, *received, *own]) + 1
    kept = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top) for fd in own]
    for fd in own:
        os.close(fd)
    top = max([top - 1, *kept]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top) for fd in received]
    for fd in received:
        os.close(fd)
    for source, target in zip(moved, targets, strict=True):
        os.dup2(source, target)
    keep = set(targets) | set(kept)
    for fd in inherited_fds():
        if fd not in keep:
            os.close(fd)
    for name, limits in request["rlimits"].items():
        resource.setrlimit(getattr(resource, name), tuple(limits))
    _signals(request["signals"], request["blocked"])
    try:
        locale.setlocale(locale.LC_CTYPE, "")
    except locale.Error:  # as at the interpreter's start: an unknown locale leaves "C"
        locale.setlocale(locale.LC_CTYPE, "C")
    time.tzset()
    _streams(request["streams"])
    main = types.ModuleType("__main__")
    main.__package__ = request["main_package"]
    sys.modules["__main__"] = main
    sys.argv = list(request["argv"])
    sys.orig_argv = list(request["orig_argv"])
    return kept


def set_recursion(request: Message, depth: int) -> None:
    """Leave the CLI the head-room it has in the client, with ``depth`` frames below it."""
    limit, theirs = request["recursion"]
    sys.setrecursionlimit(limit + depth - theirs)


def _signals(dispositions: Mapping[str, str], blocked: list[int]) -> None:
    handlers: dict[str, Any] = {
        "ignore": signal.SIG_IGN,
        "default": signal.SIG_DFL,
        "interrupt": signal.default_int_handler,
    }
    for name, disposition in dispositions.items():
        signum = int(name)
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(signum, handlers[disposition])
        except (OSError, ValueError):
            continue  # one the C library keeps for itself
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _streams(described: list[list[Any]]) -> None:
    """New ``sys.stdin``, ``stdout`` and ``stderr`` over 0, 1 and 2, built as the
    interpreter builds them at start-up, with the client's encoding, errors and buffering."""
    streams = []
    for fd, ((name, mode), (encoding, errors, line_buffering, write_through, raw)) in enumerate(
        zip(STREAMS, described, strict=True)
    ):
        file = io.FileIO(fd, mode, closefd=False)
        file.name = name
        size = os.fstat(fd).st_blksize
        size = size if size > 1 else io.DEFAULT_BUFFER_SIZE  # as open() sizes a buffer
        buffer: io.FileIO | io.BufferedReader | io.BufferedWriter = file
        if not raw:
            buffer = io.BufferedReader(file, size) if mode == "r" else io.BufferedWriter(file, size)
        stream = io.TextIOWrapper(buffer, encoding, errors, "\n", line_buffering, write_through)
        setattr(stream, "mode", mode)  # noqa: B010 (not in the type, set by the interpreter too)
        streams.append(stream)
    sys.stdin, sys.stdout, sys.stderr = streams
    for name, stream in zip(("__stdin__", "__stdout__", "__stderr__"), streams, strict=True):
        setattr(sys, name, stream)
