"""The attach connection: one hijacked socket carrying the component's stdio.

Served by an asyncio protocol of our own (anyio's socket stream costs a loop turn per
send): every read is demultiplexed at once, filed by stream, and wakes its reader, so a
reader never waits on another while no stream is over its bound (:data:`STDOUT_LIMIT`,
:data:`STDERR_LIMIT`); past it the socket is not read, and the component waits on its
write. Half-closing stdin is a ``shutdown(SHUT_WR)``: EOF for the component.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import anyio

from runner.json1 import MAX_DOCUMENT_BYTES
from runner.sandbox.streams import Inbox, SharedReading, StdinWriter

STDOUT, STDERR = 1, 2
STDOUT_LIMIT = MAX_DOCUMENT_BYTES + (4 << 20)
"""Bytes of stdout kept for its reader before the socket is no longer read (20 MiB): a
whole maximal frame can wait while the one before is decoded, plus room for the rest of
that one and a reader's take."""
STDERR_LIMIT = 1 << 20
"""Bytes of stderr kept for its reader (it takes all there is as it comes, and keeps a
tail of it): past this the socket is not read either."""
READ_BYTES = 1 << 16
"""The most the socket is read at once, into one buffer kept for the connection: what is
copied out stays under glibc's mmap threshold (asyncio's 256 KiB reads do not)."""
_HEADER = struct.Struct(">BxxxL")


class AttachDemuxer:
    """Splits Docker's multiplexed attach stream (8-byte headers: type, three zeros,
    big-endian length) into (stream, payload) pieces as they arrive; no I/O."""

    def __init__(self) -> None:
        self._header = b""  # the start of a header split across reads
        self._stream = 0
        self._remaining = 0

    def feed(self, data: bytes | memoryview) -> list[tuple[int, bytes]]:
        """Consume ``data``; return the payload pieces it completes, in order, as bytes of
        their own (``data`` may be a view of a buffer that the next read overwrites)."""
        if self._header:
            data = self._header + data
            self._header = b""
        pieces: list[tuple[int, bytes]] = []
        pos, end = 0, len(data)
        stream, remaining = self._stream, self._remaining
        while pos < end:
            if remaining == 0:
                if end - pos < _HEADER.size:
                    self._header = bytes(data[pos:])
                    break
                stream, remaining = _HEADER.unpack_from(data, pos)
                pos += _HEADER.size
                if stream not in (STDOUT, STDERR):
                    raise ValueError(f"attach stream out of step: frame type {stream}")
                continue
            take = min(remaining, end - pos)
            piece = data if pos == 0 and take == end else data[pos : pos + take]
            pieces.append((stream, piece if type(piece) is bytes else bytes(piece)))
            pos += take
            remaining -= take
        self._stream, self._remaining = stream, remaining
        return pieces


class AttachConnection:
    """The hijacked attach socket: raw stdin out, demultiplexed stdout and stderr in."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._demuxer = AttachDemuxer()
        self.stdin = StdinWriter()
        """Half-closing it is a ``shutdown(SHUT_WR)``: stdout and stderr keep flowing."""
        self._reading = SharedReading()
        self.stdout = Inbox(STDOUT_LIMIT)
        self.stderr = Inbox(STDERR_LIMIT)
        self.stdout.attach(self._reading)
        self.stderr.attach(self._reading)
        self._inboxes = {STDOUT: self.stdout, STDERR: self.stderr}
        self._ended = anyio.Event()

    async def drain(self) -> None:
        """Wait for the end of the stream, keeping what the readers have not taken (up to
        its bound). A broken stream ends too: inspection tells what happened."""
        await self._ended.wait()

    async def aclose(self) -> None:
        self.stdin.abort()
        self._end()

    def _made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.stdin.connection_made(transport)
        self._reading.attach(transport)

    def _received(self, data: bytes | memoryview) -> None:
        if self._ended.is_set():
            return
        try:
            pieces = self._demuxer.feed(data)
        except ValueError as exc:
            self._reading.stop()  # nothing after this can be trusted
            self._end(str(exc))
            return
        inboxes = self._inboxes
        for fd, payload in pieces:
            inboxes[fd].put(payload)

    def _end(self, failure: str | None = None) -> None:
        """Nothing more will come: every reader, and whoever waits for the end, is woken."""
        self.stdout.end(failure)
        self.stderr.end(failure)
        self._ended.set()


class _AttachProtocol(asyncio.BufferedProtocol):
    """Reads into one buffer of its own, :data:`READ_BYTES` at a time (see there)."""

    def __init__(self, connection: AttachConnection) -> None:
        self._connection = connection
        self._buffer = memoryview(bytearray(READ_BYTES))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._connection._made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._connection._received(self._buffer[:nbytes])

    def eof_received(self) -> bool:
        self._connection._end()
        return True  # keep our half open: stdin may still be written (and half-closed)

    def connection_lost(self, exc: Exception | None) -> None:
        # A reset is an end like any other: inspection tells what happened.
        self._connection.stdin.connection_lost(exc)
        self._connection._end()

    def pause_writing(self) -> None:
        self._connection.stdin.pause_writing()

    def resume_writing(self) -> None:
        self._connection.stdin.resume_writing()


async def open_connection(own: socket.socket) -> AttachConnection:
    """Serve our descriptor of the attach socket; closed here if that fails or is
    cancelled meanwhile."""
    connection = AttachConnection()
    try:
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: _AttachProtocol(connection), sock=own)
    except BaseException:
        own.close()  # cancelled while wrapping: the descriptor is still ours to close
        raise
    return connection
