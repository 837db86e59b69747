"""The attach connection: one hijacked socket carrying the component's stdio.

The connection is the engine's attach request, taken over (``Engine.attach_socket``,
runner/sandbox/docker/http.py), and served by an asyncio protocol of our own: every read
the event loop makes is demultiplexed at once (the stream arrives as 8-byte headers and
frames of up to 32 KiB, split by :class:`AttachDemuxer`, sans-I/O), filed by stream, and
wakes the one task waiting for that stream, if any. The socket is read whoever reads
what, so a reader never waits on another and waiting for the end never waits on a reader,
as long as no stream holds more than its bound for its reader (:data:`STDOUT_LIMIT`,
:data:`STDERR_LIMIT`). Past that the socket is not read until the reader takes bytes
(both streams wait: they are one socket), so the engine stops taking the component's
output and the component waits on its write, not the host's memory; a stream nobody will
read is discarded (``aclose``), which drops its bytes and lets the socket be read to its
end. A receive with bytes already filed returns them without a loop
turn; stdin is a :class:`StdinWriter` (no lock, no checkpoint while the buffer has
room). Half-closing stdin is a ``shutdown(SHUT_WR)`` on the socket, which the engine
turns into EOF for the component (``StdinOnce``).

Not anyio's socket stream: its every receive adds the socket to the selector and removes
it again, and its every send takes one more loop turn (bench/channels.py).
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
"""Bytes of stdout kept for its reader before the socket is no longer read (20 MiB).

A whole maximal frame (16 MiB and its LF) can wait here while the host decodes the one
before it in a worker thread, so a component that streams large frames is not made to
wait for each decode to end before it can send the next; the 4 MiB over that cover what
is left of the frame before and a reader's take (the driver takes 64 KiB at a time).
The socket is paused within one read of the bound (:data:`READ_BYTES`): the host holds
under 20.1 MiB of a component's stdout here, however fast it writes."""
STDERR_LIMIT = 1 << 20
"""Bytes of stderr kept for its reader (it takes all there is as it comes, and keeps a
tail of it): past this the socket is not read either."""
READ_BYTES = 1 << 16
"""The most the socket is read at once, into a buffer kept for the connection.

asyncio's own socket reads allocate a fresh 256 KiB bytes object for every read, which
glibc maps in and out each time until it raises its mapping threshold (bench/README.md,
"sixth session"). Reading into one buffer of 64 KiB, and copying out only what arrived
(under glibc's 128 KiB threshold), never does."""
_HEADER = struct.Struct(">BxxxL")


class AttachDemuxer:
    """Splits Docker's multiplexed attach stream into (stream, payload) pieces; no I/O.

    Each frame is an 8-byte header (stream type, three zero bytes, big-endian length) and
    its payload. Payload is handed out as soon as it arrives, so a frame split across
    reads, or a line split across frames, costs no extra buffering: only a header split
    across reads is kept, and a payload is sliced out of the read once.
    """

    def __init__(self) -> None:
        self._header = b""  # the start of a header split across reads
        self._stream = 0
        self._remaining = 0

    @property
    def mid_frame(self) -> bool:
        """True if the bytes fed so far end inside a frame."""
        return bool(self._header) or self._remaining > 0

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
        self.stdout.attach(self._reading.hold())
        self.stderr.attach(self._reading.hold())
        self._inboxes = {STDOUT: self.stdout, STDERR: self.stderr}
        self._ended = anyio.Event()

    async def drain(self) -> None:
        """Wait for the end of the stream, keeping what the readers have not taken yet
        (up to its bound: past that the end waits for a reader to take bytes, or for the
        stream to be discarded).

        A broken stream ends too: whether the container exited, was removed or lost its
        engine is for the inspection that follows to tell.
        """
        await self._ended.wait()

    async def aclose(self) -> None:
        self.stdin.abort()
        self._end()

    # ----- fed by the protocol ---------------------------------------------------------

    def _made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.stdin.attach(transport)
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
        # A reset (an engine gone over TCP) is an end like any other: whether the
        # container exited, was removed or lost its engine is for inspection to tell.
        self._connection.stdin.lose()
        self._connection._end()

    def pause_writing(self) -> None:
        self._connection.stdin.pause()

    def resume_writing(self) -> None:
        self._connection.stdin.resume()


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
