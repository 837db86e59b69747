"""The attach connection: one hijacked socket carrying the component's stdio.

The connection is taken out of docker-py (``Engine.attach_socket``) and read with real
async I/O; stdout and stderr arrive multiplexed (8-byte headers, frames of up to 32 KiB)
and are split by :class:`AttachDemuxer` (sans-I/O), on demand, by whichever stream is
being read, so reading never blocks writing and no task is needed. Half-closing stdin is
a ``shutdown(SHUT_WR)`` on that socket, which the engine turns into EOF for the component
(``StdinOnce``).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections import deque

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketStream

STDOUT, STDERR = 1, 2
_HEADER = struct.Struct(">BxxxL")
_READ_SIZE = 1 << 16


class AttachDemuxer:
    """Splits Docker's multiplexed attach stream into (stream, payload) pieces; no I/O.

    Each frame is an 8-byte header (stream type, three zero bytes, big-endian length) and
    its payload. Payload is handed out as soon as it arrives, so a frame split across
    reads, or a line split across frames, costs no extra buffering.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._stream = 0
        self._remaining = 0

    @property
    def mid_frame(self) -> bool:
        """True if the bytes fed so far end inside a frame."""
        return bool(self._buffer) or self._remaining > 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Consume ``data``; return the payload pieces it completes, in order."""
        self._buffer += data
        pieces: list[tuple[int, bytes]] = []
        pos, end = 0, len(self._buffer)
        while pos < end:
            if self._remaining == 0:
                if end - pos < _HEADER.size:
                    break
                self._stream, self._remaining = _HEADER.unpack_from(self._buffer, pos)
                pos += _HEADER.size
                if self._stream not in (STDOUT, STDERR):
                    raise ValueError(f"attach stream out of step: frame type {self._stream}")
                continue
            take = min(self._remaining, end - pos)
            pieces.append((self._stream, bytes(self._buffer[pos : pos + take])))
            pos += take
            self._remaining -= take
        del self._buffer[:pos]
        return pieces


class AttachConnection:
    """The hijacked attach socket: raw stdin out, demultiplexed stdout and stderr in."""

    def __init__(self, stream: SocketStream) -> None:
        self._stream = stream
        self._demuxer = AttachDemuxer()
        self._pending: dict[int, deque[bytes]] = {STDOUT: deque(), STDERR: deque()}
        self._discard: set[int] = set()
        self._reading = False  # one task at a time reads the socket, for both streams
        self._progress = anyio.Event()  # set after every socket read, then replaced
        self._send_lock = anyio.Lock()
        self._eof = False
        self._stdin_closed = False

    async def send(self, data: bytes) -> None:
        if self._stdin_closed:
            raise anyio.ClosedResourceError
        async with self._send_lock:
            await self._stream.send(data)

    async def close_stdin(self) -> None:
        """Half-close: the component reads EOF; stdout and stderr keep flowing."""
        if self._stdin_closed:
            return
        self._stdin_closed = True
        async with self._send_lock:
            # OSError: the engine already closed the connection, there is no stdin left.
            with contextlib.suppress(OSError):
                await self._stream.send_eof()

    async def receive(self, fd: int, max_bytes: int) -> bytes:
        """Bytes for ``fd``; whoever reads the socket files the other stream's bytes.

        A reader never waits on the socket while bytes for it are already filed: the
        one waiting for the other's read is woken after every read (not queued behind a
        lock the reader could take again and block on, which stalls the exchange).
        """
        pending = self._pending[fd]
        while not pending:
            if self._eof:
                raise anyio.EndOfStream
            await self._read_or_wait()
        chunk = pending.popleft()
        if len(chunk) > max_bytes:
            pending.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        return chunk

    def discard(self, fd: int) -> None:
        """Drop ``fd``'s bytes from now on: nobody will read them."""
        self._discard.add(fd)
        self._pending[fd].clear()

    async def drain(self) -> None:
        """Read to the end of the stream, keeping what the readers have not taken yet.

        A broken stream ends too: whether the container exited, was removed or lost its
        engine is for the inspection that follows to tell.
        """
        with contextlib.suppress(anyio.BrokenResourceError):
            while not self._eof:
                await self._read_or_wait()

    async def _read_or_wait(self) -> None:
        """Read the socket once, or wait until whoever is reading it has read once."""
        if self._reading:
            await self._progress.wait()
            return
        self._reading = True
        try:
            await self._read_once()
        finally:
            self._reading = False
            self._progress.set()
            self._progress = anyio.Event()

    async def _read_once(self) -> None:
        try:
            data = await self._stream.receive(_READ_SIZE)
        except anyio.EndOfStream:
            self._eof = True
            return
        except (anyio.BrokenResourceError, OSError) as exc:
            self._eof = True  # nothing more will come: every reader sees the end
            raise anyio.BrokenResourceError(str(exc)) from exc
        try:
            pieces = self._demuxer.feed(data)
        except ValueError as exc:
            self._eof = True
            raise anyio.BrokenResourceError(str(exc)) from exc
        for fd, payload in pieces:
            if fd not in self._discard:
                self._pending[fd].append(payload)

    async def aclose(self) -> None:
        await self._stream.aclose()


class Stdin(ByteSendStream):
    def __init__(self, connection: AttachConnection) -> None:
        self._connection = connection

    async def send(self, item: bytes) -> None:
        await self._connection.send(item)

    async def aclose(self) -> None:
        await self._connection.close_stdin()


class Output(ByteReceiveStream):
    def __init__(self, connection: AttachConnection, fd: int) -> None:
        self._connection = connection
        self._fd = fd
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        return await self._connection.receive(self._fd, max_bytes)

    async def aclose(self) -> None:
        self._closed = True
        self._connection.discard(self._fd)


async def open_connection(own: socket.socket) -> AttachConnection:
    """Wrap our descriptor of the attach socket; closed here if cancelled meanwhile.

    A transport-backed stream even for a unix socket: anyio's UNIXSocketStream registers
    and unregisters the socket with the event loop on every read (bench/channels.py).
    """
    try:
        return AttachConnection(await SocketStream.from_socket(own))
    except BaseException:
        own.close()  # cancelled while wrapping: the descriptor is still ours to close
        raise
