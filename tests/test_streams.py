"""The host's stdio streams (runner/sandbox/streams.py, attach.py, pipes.py) on real
sockets and pipes, with no engine: order and bounds of writes a component does not read,
cancellation of a waiting send or receive, streams split anyhow across reads."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from runner.sandbox.base import LaunchRequest
from runner.sandbox.docker.attach import (
    READ_BYTES,
    STDOUT_LIMIT,
    AttachConnection,
    open_connection,
)
from runner.sandbox.process import ProcessSandbox
from runner.sandbox.streams import WRITE_LIMIT, Inbox, SharedReading, StdinWriter

CHUNK = 1 << 15


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


@asynccontextmanager
async def attached() -> AsyncIterator[tuple[AttachConnection, socket.socket]]:
    """An attach connection on one end of a socket pair; the test plays the engine on the
    other (non-blocking, read and written through the loop)."""
    ours, engine = socket.socketpair()
    engine.setblocking(False)
    connection = await open_connection(ours)
    try:
        with anyio.fail_after(10):
            yield connection, engine
    finally:
        await connection.aclose()
        engine.close()


async def read_exactly(engine: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = bytearray()
    while len(data) < size:
        chunk = await loop.sock_recv(engine, size - len(data))
        assert chunk, "the host closed its end"
        data += chunk
    return bytes(data)


def buffered(connection: AttachConnection) -> int:
    """Bytes the host holds for a component that does not read (the transport's buffer)."""
    transport: Any = connection._transport
    return int(transport.get_write_buffer_size())


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_an_abort_after_the_half_close_of_a_pipe_closes_it_once() -> None:
    """Cleanup aborts a stdin the run half-closed: on a pipe with nothing left to write,
    asyncio has already scheduled the close, and a second one is an error of its loop."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    read, write = os.pipe()
    writer = StdinWriter()
    try:
        await loop.connect_write_pipe(lambda: writer, os.fdopen(write, "wb", buffering=0))
        await writer.send(b"x\n")
        await writer.aclose()
        writer.abort()
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        assert os.read(read, 16) == b"x\n"
        assert errors == []
    finally:
        os.close(read)
        loop.set_exception_handler(None)


@pytest.mark.anyio
async def test_writes_nobody_reads_stop_at_the_limit_and_leave_in_order() -> None:
    async with attached() as (connection, engine):
        stdin = connection.stdin
        accepted: list[bytes] = []
        while stdin.send_nowait(chunk := bytes([len(accepted) % 251]) * CHUNK):
            accepted.append(chunk)
            assert buffered(connection) <= WRITE_LIMIT + CHUNK
        assert accepted, "the socket took nothing"
        late: list[bytes] = [b"a" * CHUNK, b"b" * CHUNK]
        async with anyio.create_task_group() as tg:
            for chunk in late:
                tg.start_soon(stdin.send, chunk)
                await anyio.wait_all_tasks_blocked()  # each waits for room, in turn
            assert not stdin.send_nowait(b"c"), "nothing passes the waiting sends"
            assert buffered(connection) <= WRITE_LIMIT + CHUNK
            expected = b"".join(accepted + late)
            assert await read_exactly(engine, len(expected)) == expected


@pytest.mark.anyio
async def test_a_waiting_send_is_cancelled_without_writing_and_the_next_one_goes() -> None:
    async with attached() as (connection, engine):
        stdin = connection.stdin
        accepted: list[bytes] = []
        while stdin.send_nowait(chunk := bytes([65 + len(accepted) % 26]) * CHUNK):
            accepted.append(chunk)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stdin.send, b"x" * CHUNK)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
        async with anyio.create_task_group() as tg:
            tg.start_soon(stdin.send, b"y")
            expected = b"".join(accepted) + b"y"
            assert await read_exactly(engine, len(expected)) == expected


@pytest.mark.anyio
async def test_a_waiting_receive_is_cancelled_and_the_stream_still_serves() -> None:
    async with attached() as (connection, engine):
        with anyio.move_on_after(0) as scope:
            await connection.stdout.receive()
        assert scope.cancelled_caught
        await asyncio.get_running_loop().sock_sendall(engine, frame(1, b"late\n"))
        assert await connection.stdout.receive() == b"late\n"


@pytest.mark.anyio
async def test_streams_split_anyhow_come_back_exact() -> None:
    """Headers and payloads split across reads at every size, stdout and stderr
    interleaved: each reader gets its bytes exactly, then the end."""
    out = b"".join(b'{"jsonrpc":"2.0","id":"c:%d"}\n' % i for i in range(300))
    err = b"".join(b"log line %d\n" % i for i in range(100))
    stream = b"".join(
        frame(1, out[i * 30 : (i + 1) * 30]) + frame(2, err[i * 10 : (i + 1) * 10])
        for i in range(len(out) // 30 + 1)
    )
    loop = asyncio.get_running_loop()
    async with attached() as (connection, engine):
        got_out, got_err = bytearray(), bytearray()

        async def read_stderr() -> None:
            while chunk := await _receive_or_end(connection.stderr):
                got_err.extend(chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stderr)
            for size in (1, 7, 8, 9, 4096):
                got_out.clear()
                got_err.clear()
                for start in range(0, len(stream), size):
                    await loop.sock_sendall(engine, stream[start : start + size])
                while len(got_out) < len(out):
                    got_out += await connection.stdout.receive()
                await anyio.wait_all_tasks_blocked()  # stderr's reader took all it was sent
                assert (bytes(got_out), bytes(got_err)) == (out, err), size
            engine.shutdown(socket.SHUT_WR)
        with pytest.raises(anyio.EndOfStream):
            await connection.stdout.receive()
        await connection.drain()


async def _receive_or_end(inbox: Any) -> bytes:
    try:
        return bytes(await inbox.receive())
    except anyio.EndOfStream:
        return b""


class _Transport:
    """A read transport that only records pause and resume."""

    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.mark.anyio
async def test_a_pipe_is_not_read_while_its_reader_is_behind() -> None:
    inbox = Inbox(limit=100)
    transport = _Transport()
    inbox.attach(transport)  # type: ignore[arg-type]
    for _ in range(3):
        inbox.put(b"x" * 30)
    assert transport.reading  # 90 bytes filed
    inbox.put(b"x" * 30)
    assert not transport.reading  # 120
    assert await inbox.receive(50) == b"x" * 30  # whole chunks, up to 50 bytes
    assert transport.reading  # 90
    inbox.put(b"x" * 30)
    assert not transport.reading
    assert await inbox.receive() == b"x" * 120
    assert transport.reading


CHILD = """
import signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
sys.stderr.write("ready\\n")
sys.stderr.flush()
signal.sigwait({signal.SIGUSR1})  # stdin is not read before the test says so
sys.stdout.buffer.write(sys.stdin.buffer.read())
"""


@pytest.mark.anyio
async def test_a_process_that_does_not_read_stdin_holds_back_the_writes_not_memory() -> None:
    """The process backend's own pipes: what the child does not read stays within the
    write limit on our side and later sends wait, in order; once it reads, all of it
    arrives, and its stdout comes back whole."""
    sandbox = ProcessSandbox([sys.executable, "-c", CHILD])
    with anyio.fail_after(30):
        async with sandbox.launch(LaunchRequest()) as component:
            stdin: Any = component.stdin
            assert await component.stderr.receive() == b"ready\n"
            accepted: list[bytes] = []
            while stdin.send_nowait(chunk := b"%07d\n" % len(accepted) * (CHUNK // 8)):
                accepted.append(chunk)
                assert stdin._transport.get_write_buffer_size() <= WRITE_LIMIT + CHUNK
            late = [b"late one\n" * 1000, b"late two\n" * 1000]
            got = bytearray()
            async with anyio.create_task_group() as tg:
                for chunk in late:
                    tg.start_soon(stdin.send, chunk)
                    await anyio.wait_all_tasks_blocked()
                assert not stdin.send_nowait(b"x"), "nothing passes the waiting sends"
                os.kill(component._process.pid, signal.SIGUSR1)  # type: ignore[attr-defined]
            await stdin.aclose()
            while chunk := await _receive_or_end(component.stdout):
                got += chunk
            assert bytes(got) == b"".join(accepted + late)
            assert await component.wait() == 0


@pytest.mark.anyio
async def test_waits_for_room_end_when_the_connection_is_lost() -> None:
    """A component gone for good (the engine closed the connection): a send waiting for
    room fails, and half-closing, waiting behind it, returns; neither waits forever."""
    async with attached() as (connection, engine):
        stdin = connection.stdin
        while stdin.send_nowait(b"z" * CHUNK):
            pass
        failed: list[BaseException] = []

        async def send() -> None:
            try:
                await stdin.send(b"late")
            except anyio.BrokenResourceError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(stdin.aclose)
            await anyio.wait_all_tasks_blocked()
            engine.close()  # unread bytes: a reset, the transport is lost
        assert len(failed) == 1
        with pytest.raises(anyio.ClosedResourceError):
            await stdin.send(b"after")

    async with attached() as (connection, engine):
        while connection.stdin.send_nowait(b"z" * CHUNK):
            pass
        engine.close()
        await connection.drain()  # the loss is seen
        await connection.stdin.aclose()  # returns: nothing is left to wait for


@pytest.mark.anyio
async def test_closing_a_stream_ends_the_wait_of_its_reader() -> None:
    async with attached() as (connection, _):
        ended: list[BaseException] = []

        async def read() -> None:
            try:
                await connection.stderr.receive()
            except anyio.ClosedResourceError as exc:
                ended.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            await connection.stderr.aclose()
        assert len(ended) == 1


class _SharedTransport(_Transport):
    """A read transport that records pause, resume and close."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.anyio
async def test_inboxes_of_one_transport_pause_it_while_either_is_full() -> None:
    """The attach socket's two streams: reading stops while either holds more than its
    bound and resumes only once neither does; a stream discarded while full lets the
    transport be read again (for the other, and for the end) and does not close it."""
    reading, transport = SharedReading(), _SharedTransport()
    reading.attach(transport)  # type: ignore[arg-type]
    out, err = Inbox(limit=100), Inbox(limit=10)
    out.attach(reading)
    err.attach(reading)
    out.put(b"o" * 101)
    assert not transport.reading
    err.put(b"e" * 11)
    assert await out.receive() == b"o" * 101
    assert not transport.reading, "stderr is still over its bound"
    assert await err.receive(5) == b"e" * 5
    assert transport.reading
    out.put(b"o" * 200)
    assert not transport.reading
    await out.aclose()  # full, and nobody will read it
    assert (transport.reading, transport.closed) == (True, False)
    out.put(b"dropped")
    err.put(b"more")
    assert await err.receive() == b"e" * 6 + b"more"
    err.end()
    with pytest.raises(anyio.EndOfStream):
        await err.receive()
    with pytest.raises(anyio.ClosedResourceError):
        await out.receive()


@pytest.mark.anyio
async def test_a_stream_out_of_step_stops_the_reading_for_good() -> None:
    reading, transport = SharedReading(), _SharedTransport()
    reading.attach(transport)  # type: ignore[arg-type]
    out = Inbox(limit=10)
    out.attach(reading)
    out.put(b"o" * 11)
    reading.stop()
    assert await out.receive() == b"o" * 11
    assert not transport.reading


def stdout_frames(total: int) -> bytes:
    """``total`` bytes of stdout without an LF, as the engine multiplexes it."""
    return b"".join(frame(1, b"y" * CHUNK) for _ in range(total // CHUNK))


async def paused(connection: AttachConnection) -> None:
    """Return once the host has stopped reading the socket (it is an event of the
    transport with no callback: each turn of the loop may be the one that read)."""
    transport: Any = connection._transport
    while transport.is_reading():
        await anyio.lowlevel.checkpoint()


@pytest.mark.anyio
async def test_stdout_nobody_reads_stops_the_attach_socket_at_its_bound() -> None:
    """A component writes stdout faster than anyone takes it: the host holds at most the
    bound and one read of it (the engine's writes then wait), gives all of it back in
    order when the reader comes, and still sees the end; stderr written meanwhile waits
    behind it (one socket) and then arrives too."""
    total = STDOUT_LIMIT + (8 << 20)  # more than the host and the kernel hold
    loop = asyncio.get_running_loop()
    async with attached() as (connection, engine):
        async with anyio.create_task_group() as tg:

            async def write() -> None:
                await loop.sock_sendall(engine, stdout_frames(total) + frame(2, b"late\n"))
                engine.shutdown(socket.SHUT_WR)

            tg.start_soon(write)
            await paused(connection)
            assert STDOUT_LIMIT < connection.stdout._filed <= STDOUT_LIMIT + READ_BYTES
            got = 0
            while chunk := await _receive_or_end(connection.stdout):
                got += len(chunk)
        assert got == total // CHUNK * CHUNK
        assert await connection.stderr.receive() == b"late\n"
        await connection.drain()


@pytest.mark.anyio
async def test_discarding_a_full_stdout_lets_the_attach_socket_be_read_to_its_end() -> None:
    """After the verdict nobody reads stdout: discarding it drops what it holds and what
    comes, the socket is read on (not closed, not left paused), and its end is seen."""
    loop = asyncio.get_running_loop()
    async with attached() as (connection, engine):
        async with anyio.create_task_group() as tg:

            async def write() -> None:
                await loop.sock_sendall(engine, stdout_frames(STDOUT_LIMIT + (8 << 20)))
                await loop.sock_sendall(engine, frame(2, b"last words\n"))
                engine.shutdown(socket.SHUT_WR)

            tg.start_soon(write)
            await paused(connection)
            await connection.stdout.aclose()
            await connection.drain()
        assert await connection.stderr.receive() == b"last words\n"
        with pytest.raises(anyio.ClosedResourceError):
            await connection.stdout.receive()
