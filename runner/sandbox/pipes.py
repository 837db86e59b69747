"""A local process's stdio as pipes of our own, served by :mod:`runner.sandbox.streams`
(asyncio's and anyio's subprocess streams cost a loop turn more each way). stdout and
stderr stop being read while more than :data:`READ_LIMIT` bytes wait for the reader.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from runner.sandbox.streams import Inbox, StdinWriter

READ_LIMIT = 1 << 18
"""Bytes of a pipe kept for its reader before the pipe is no longer read."""
READ_BYTES = 1 << 16
"""The most a pipe is read at once: under glibc's mmap threshold (see attach.py's)."""


class Pipes:
    """The three pipes of one child: :attr:`child` are the descriptors to give it as 0, 1
    and 2 (closed by :meth:`started` once it has them); the rest is ours, served."""

    def __init__(self) -> None:
        self.child: list[int] = []
        self._raw: list[int] = []  # our ends, not yet served
        self.stdin: StdinWriter | None = None
        self.stdout: Inbox | None = None
        self.stderr: Inbox | None = None

    async def open(self) -> None:
        """Make the pipes and serve our ends; on any failure nothing stays open (each
        closes on exec: the child gets its ends as 0, 1, 2)."""
        loop = asyncio.get_running_loop()
        try:
            for _ in range(3):
                read, write = os.pipe()
                self._raw += (read, write)
            stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w = self._raw
            self.child = [stdin_r, stdout_w, stderr_w]
            self._raw = [stdin_w, stdout_r, stderr_r]
            writer, stdin = StdinWriter(), self._take(stdin_w, "wb")
            try:
                await loop.connect_write_pipe(lambda: writer, stdin)
            except BaseException:
                stdin.close()
                raise
            self.stdin = writer
            self.stdout = await _output(loop, self._take(stdout_r, "rb"))
            self.stderr = await _output(loop, self._take(stderr_r, "rb"))
        except BaseException:
            self.close()
            raise

    def started(self) -> None:
        """The child has its ends (or will never start): ours of them are closed."""
        for fd in self.child:
            os.close(fd)
        self.child = []

    def close(self) -> None:
        self.started()
        for fd in self._raw:
            os.close(fd)
        self._raw = []
        if self.stdin is not None:
            self.stdin.abort()
        for inbox in (self.stdout, self.stderr):
            if inbox is not None:
                inbox.discard()

    def _take(self, fd: int, mode: str) -> Any:
        """A file object that owns ``fd`` from now on (it is no longer ours to close)."""
        pipe = os.fdopen(fd, mode, buffering=0)
        self._raw.remove(fd)
        return pipe


async def _output(loop: asyncio.AbstractEventLoop, pipe: Any) -> Inbox:
    inbox = Inbox(READ_LIMIT)
    try:
        _PipeReader(loop, pipe, inbox)
    except BaseException:
        pipe.close()
        raise
    return inbox


class _PipeReader:
    """Our end of a child's stdout or stderr, read into its :class:`Inbox` as bytes come,
    and the inbox's valve."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pipe: Any, inbox: Inbox) -> None:
        self._loop = loop
        self._pipe = pipe
        self._fd: int = pipe.fileno()
        self._inbox = inbox
        self._reading = self._closed = False
        os.set_blocking(self._fd, False)
        inbox.attach(self)
        self.resume_reading()

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not (self._reading or self._closed):
            self._reading = True
            self._loop.add_reader(self._fd, self._read)

    def close(self) -> None:
        if not self._closed:
            self.pause_reading()
            self._closed = True
            self._pipe.close()

    def _read(self) -> None:
        try:
            data = os.read(self._fd, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the pipe broke: an end like any other, for the reader
            data = b""
        if data:
            self._inbox.put(data)
        else:
            self.close()
            self._inbox.end()
