"""A component's stdio over asyncio transports, with no checkpoint while bytes flow
(anyio's streams spend a loop turn more per write or read, much of a small call's cost).

:class:`StdinWriter` writes at once and waits, in arrival order, only while the buffer
is over :data:`WRITE_LIMIT`; :class:`Inbox` files what a transport reads and wakes its
reader. Waits are on asyncio futures, which anyio's cancel scopes interrupt.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import suppress
from typing import Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

WRITE_LIMIT = 1 << 16
"""Bytes a transport may buffer before a send waits for the component to read."""


class StdinWriter(ByteSendStream, asyncio.BaseProtocol):
    """A component's stdin: ordered writes to one transport, and the protocol (or the
    delegate of one) that feeds it pause, resume and loss; ``aclose`` half-closes."""

    def __init__(self) -> None:
        self._transport: asyncio.WriteTransport | None = None
        self._paused = False
        self._turns: deque[asyncio.Future[None]] = deque()
        """Senders waiting for room, first come first served; the head is woken first."""
        self._closed = False  # half-closed, or closing, by us
        self._lost = False  # the transport is gone: nothing more can be written

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self._transport = transport
        transport.set_write_buffer_limits(WRITE_LIMIT)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._pass_turn()

    def connection_lost(self, exc: Exception | None) -> None:
        """The transport was lost: every waiting sender is woken to find it gone."""
        self._lost = True
        for turn in self._turns:
            if not turn.done():
                turn.set_result(None)

    def send_nowait(self, data: bytes) -> bool:
        """Write ``data`` if that needs no wait, else False; raises as :meth:`send` would."""
        self._check_open()
        if self._paused or self._turns:
            return False
        self._write(data)
        return True

    async def send(self, data: bytes) -> None:
        """Write ``data`` after every send before it; wait while the buffer is full."""
        self._check_open()
        if not (self._paused or self._turns):
            self._write(data)
            return
        await self._turn()
        try:
            self._write(data)
        finally:
            self._pass_turn()

    async def aclose(self) -> None:
        """Half-close once every byte sent before has left: the component reads EOF."""
        if self._closed:
            return
        self._closed = True
        if (self._paused or self._turns) and not self._lost:
            await self._turn()
            self._pass_turn()
        if not self._lost and self._transport is not None:
            with suppress(OSError, RuntimeError):  # the peer went away meanwhile
                self._transport.write_eof()

    def abort(self) -> None:
        """Drop whatever is unsent and close the transport (once: a pipe half-closed with
        nothing left to write is closing already, and asyncio would close it again)."""
        self._closed = True
        transport = self._transport
        if transport is None or self._lost:
            return
        if not (transport.is_closing() and transport.get_write_buffer_size() == 0):
            transport.abort()

    def _check_open(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._lost:
            raise anyio.BrokenResourceError

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if self._lost or transport is None or transport.is_closing():
            raise anyio.BrokenResourceError
        transport.write(data)

    async def _turn(self) -> None:
        """Wait to be first in line with room (or loss); the caller then passes the turn."""
        if self._lost:
            return
        turn = asyncio.get_running_loop().create_future()
        self._turns.append(turn)
        try:
            await turn
        except BaseException:
            self._turns.remove(turn)
            if turn.done() and not turn.cancelled():
                self._pass_turn()  # woken, then cancelled before running: pass it on
            raise
        self._turns.remove(turn)

    def _pass_turn(self) -> None:
        if self._turns and not self._paused:
            head = self._turns[0]
            if not head.done():
                head.set_result(None)


class ReadValve(Protocol):
    """What stops and restarts the reading that fills an :class:`Inbox`."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


class SharedReading:
    """One read transport filling several inboxes (the attach socket's stdout and
    stderr), and the valve of each: read while none of them is paused."""

    def __init__(self) -> None:
        self._transport: asyncio.ReadTransport | None = None
        self._holds = 0
        self._stopped = False

    def attach(self, transport: asyncio.ReadTransport) -> None:
        self._transport = transport

    def stop(self) -> None:
        """Nothing more is to be read (the stream went out of step)."""
        self._stopped = True
        if self._transport is not None:
            self._transport.pause_reading()

    def pause_reading(self) -> None:
        """One more inbox is full (each pauses and resumes at most once in turn)."""
        self._holds += 1
        if self._holds == 1 and self._transport is not None:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._holds -= 1
        if self._holds == 0 and not self._stopped and self._transport is not None:
            self._transport.resume_reading()  # a no-op once it is closing

    def close(self) -> None:
        """An inbox was discarded: the transport stays, for the others and for the end."""


class Inbox(ByteReceiveStream):
    """A component's stdout or stderr, filed in order; one task at a time waits;
    ``aclose`` drops it. Reading is paused while more than ``limit`` bytes are filed, so
    a component writing faster than the host reads waits."""

    def __init__(self, limit: int) -> None:
        self._chunks: deque[bytes] = deque()
        self._filed = 0
        self._limit = limit
        self._valve: ReadValve | None = None
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._failure: str | None = None
        self._discard = False

    def attach(self, valve: ReadValve) -> None:
        self._valve = valve

    def put(self, data: bytes) -> None:
        if self._discard or self._ended or not data:
            return
        self._chunks.append(data)
        self._filed += len(data)
        valve = self._valve
        if self._filed > self._limit and valve is not None and not self._paused:
            self._paused = True
            valve.pause_reading()
        self._wake()

    def end(self, failure: str | None = None) -> None:
        """Nothing more will come; ``failure``: the reader's ``BrokenResourceError``."""
        if not self._ended:
            self._ended = True
            self._failure = failure
        self._wake()

    async def aclose(self) -> None:
        self.discard()

    def discard(self) -> None:
        """Drop what is filed and whatever comes (a shared transport is read on)."""
        self._discard = True
        self._chunks.clear()
        self._filed = 0
        if self._valve is not None:
            self._unpause()
            self._valve.close()
        self._wake()  # a reader waiting now finds the stream closed

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """All that is filed, up to ``max_bytes``, with no loop turn; else wait for some."""
        chunks = self._chunks
        while not chunks:
            if self._discard:
                raise anyio.ClosedResourceError
            if self._ended:
                if self._failure is not None:
                    raise anyio.BrokenResourceError(self._failure)
                raise anyio.EndOfStream
            if self._waiter is not None:
                raise anyio.BusyResourceError("reading from")
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        chunk = chunks.popleft()
        size = len(chunk)
        if size > max_bytes:
            chunks.appendleft(chunk[max_bytes:])
            chunk, size = chunk[:max_bytes], max_bytes
        elif chunks and size + len(chunks[0]) <= max_bytes:
            parts = [chunk]
            while chunks and size + len(chunks[0]) <= max_bytes:
                size += len(chunks[0])
                parts.append(chunks.popleft())
            chunk = b"".join(parts)
        self._filed -= size
        if self._paused and self._filed <= self._limit:
            self._unpause()
        return chunk

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _unpause(self) -> None:
        if self._paused:
            self._paused = False
            assert self._valve is not None
            self._valve.resume_reading()
