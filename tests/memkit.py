"""An in-memory component for driver tests: the test writes its stdout and reads its stdin
through anyio memory streams; it notes in which task the driver reads stdout, and exits
with whatever code the test chooses."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from runner.sandbox.base import SandboxFacts


class Stdout:
    """The component's stdout as the driver reads it; records the reading task."""

    def __init__(self, source: ObjectReceiveStream[bytes]) -> None:
        self.source = source
        self.readers: set[int] = set()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        self.readers.add(anyio.get_current_task().id)
        try:
            return await self.source.receive()
        except anyio.EndOfStream:
            raise
        except anyio.ClosedResourceError:
            raise anyio.EndOfStream from None

    def __aiter__(self) -> Stdout:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.source.aclose()


class Stdin:
    """The component's stdin: the driver may write it without waiting while it has room
    (``send_nowait``); it notes in which tasks the driver wrote, and how."""

    def __init__(self, sink: ObjectSendStream[bytes]) -> None:
        self.sink = sink
        self.writes: list[tuple[int | None, bytes]] = []
        """(the writing task, or None for a loop callback; the bytes) of every write."""
        self.waited = 0  # writes that went through ``send``

    def send_nowait(self, data: bytes) -> bool:
        try:
            self.sink.send_nowait(data)
        except anyio.WouldBlock:
            return False
        task = asyncio.current_task()
        self.writes.append((None if task is None else anyio.get_current_task().id, data))
        return True

    async def send(self, item: bytes) -> None:
        self.waited += 1
        self.writes.append((anyio.get_current_task().id, item))
        await self.sink.send(item)

    async def send_eof(self) -> None:
        await self.sink.aclose()

    async def aclose(self) -> None:
        await self.sink.aclose()


class MemoryComponent:
    def __init__(self, exit_code: int = 0, stdin_room: int = 100) -> None:
        self.exit_code = exit_code
        self.to_host, from_component = anyio.create_memory_object_stream[bytes](100)
        to_component, self.from_host = anyio.create_memory_object_stream[bytes](stdin_room)
        self.stdout = Stdout(from_component)
        self.stdin = Stdin(to_component)
        _, self.stderr = anyio.create_memory_object_stream[bytes](1)
        self.attachment_paths: dict[str, str] = {}
        self.scratch_path = "/tmp"
        self.facts = SandboxFacts()
        self.exited = anyio.Event()

    async def wait(self) -> int:
        await self.exited.wait()
        self.facts.exit_code = self.exit_code
        return self.exit_code

    async def kill(self) -> None:
        """Like an engine's kill: accepted while running, whether it ends the process or
        not is the exit code the test chose."""
        if not self.exited.is_set():
            self.facts.killed_by_host = True
        self.exited.set()
        await self.to_host.aclose()  # a killed process's stdout ends

    async def finish(self, root: dict[str, Any]) -> None:
        """Answer the root request ``done``, end stdout and exit, as a component does."""
        done = {"jsonrpc": "2.0", "id": root["id"], "result": {"outcome": "done", "output": None}}
        await self.to_host.send(json.dumps(done).encode() + b"\n")
        await self.to_host.aclose()
        await self.kill()

    async def frames(self) -> Any:
        """Every frame the host wrote, one object at a time."""
        buffer = b""
        async for data in self.from_host:
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield json.loads(line)
