"""Frames over the process's stdin and stdout: LF framing, a reader, a looping writer.

A pipe or socket stdin (every host's case) is read by the event loop itself
(:class:`LoopReader`): one ``os.read`` when it is readable, its frames handled before the
next, so a flooding host cannot grow memory. Anything else (a file, a terminal: gVisor
and attach streams vary) is read by a thread (:class:`FrameReader`) that hands each
read's frames to the loop, a few batches ahead at most; a thread hand-off per read would
be a large part of a call's round trip, hence not for pipes.

Writes block on the loop thread, one frame looped until every byte is out (gVisor writes
short above 64 KiB), so frames never interleave; a conforming host keeps reading stdout
while stdin is drained, so the pipes cannot deadlock. :func:`take_stdio` moves the
protocol descriptors out of user code's way.
"""

from __future__ import annotations

import asyncio
import os
import select
import stat
import sys
import threading
from collections.abc import Callable
from typing import Final

from runner.component.errors import ChannelFault, fault_of
from runner.protocol.codes import ProtocolViolation
from runner.protocol.frames import FrameDecoder

_READ_SIZE: Final = 65_536
_BATCHES_IN_FLIGHT: Final = 4

Delivery = list[bytes] | ChannelFault
"""What the reader hands the loop: the frames one read completed, or the end of the input."""


def start_reader(
    fd: int, loop: asyncio.AbstractEventLoop, deliver: Callable[[Delivery], None]
) -> None:
    """Read frames from ``fd`` into ``deliver`` on ``loop``: in the loop for a pipe or
    socket, else from a thread."""
    mode = os.fstat(fd).st_mode
    reader = LoopReader if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else FrameReader
    reader(fd, loop, deliver).start()


class _Reader:
    """Reads ``fd`` one chunk at a time and hands ``deliver`` what each read brings."""

    def __init__(
        self, fd: int, loop: asyncio.AbstractEventLoop, deliver: Callable[[Delivery], None]
    ) -> None:
        self._fd = fd
        self._loop = loop
        self._deliver = deliver
        self._frames = FrameDecoder()

    def _take(self, read: Callable[[int, int], bytes]) -> tuple[Delivery | None, bool]:
        """One ``read``: the frames it completed (or ``None``) or how the input ended, and
        whether it ended; ``BlockingIOError`` passes through."""
        try:
            chunk = read(self._fd, _READ_SIZE)
        except BlockingIOError:
            raise
        except OSError as error:
            return ChannelFault("CHANNEL_LOST", f"reading stdin failed: {error}"), True
        try:
            if chunk:
                return self._frames.feed(chunk) or None, False
            self._frames.eof()
        except ProtocolViolation as violation:
            return fault_of(violation), True
        return ChannelFault("CHANNEL_LOST", "stdin ended before the root response"), True


class LoopReader(_Reader):
    """Frames from a pipe or socket ``fd``, read when the loop sees it readable (blocking or
    not: a read then returns at once; a spurious report on a non-blocking one reads nothing).
    """

    def start(self) -> None:
        self._loop.add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        try:
            delivery, ended = self._take(os.read)
        except BlockingIOError:
            return
        if ended:
            self._loop.remove_reader(self._fd)
        if delivery is not None:
            self._deliver(delivery)


class FrameReader(_Reader):
    """A daemon thread reading frames from ``fd`` into ``deliver`` on the event loop."""

    def start(self) -> None:
        self._credit = threading.Semaphore(_BATCHES_IN_FLIGHT)
        threading.Thread(target=self._run, name="flow-stdin", daemon=True).start()

    def _run(self) -> None:
        while True:
            delivery, ended = self._take(_read)
            if delivery is not None and not self._post(delivery):
                return
            if ended:
                return

    def _post(self, item: Delivery) -> bool:
        self._credit.acquire()
        try:
            self._loop.call_soon_threadsafe(self._handle, item)
        except RuntimeError:  # the loop is closed: the process is on its way out
            return False
        return True

    def _handle(self, item: Delivery) -> None:
        try:
            self._deliver(item)
        finally:
            self._credit.release()


def _read(fd: int, size: int) -> bytes:
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:  # someone handed us a non-blocking descriptor
            select.select([fd], [], [])


def write_frame(fd: int, payload: bytes) -> None:
    """Write one frame (payload + LF) completely; raise ``OSError`` if the pipe fails."""
    remaining = memoryview(payload + b"\n")
    while remaining:
        try:
            written = os.write(fd, remaining)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        remaining = remaining[written:]


def take_stdio() -> tuple[int, int]:
    """Claim stdin/stdout for the protocol; return the private ``(input_fd, output_fd)``. Fd 0
    then reads ``/dev/null`` and fd 1 is a copy of stderr, so ``print()``, raw fd-1 writes
    and subprocesses write diagnostics, not frames."""
    input_fd, output_fd = os.dup(0), os.dup(1)  # dup'd descriptors are not inheritable
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return input_fd, output_fd
