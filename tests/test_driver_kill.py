"""The report names a host kill only when the kill is what ended the component.

An engine accepts a kill for a process already on its way out: the component that wrote
trailing bytes and exited 0 by itself, in the moment between the host seeing the violation
and the signal, was not killed, whatever the kill call returned. CI once read
``(0, "violation")`` from the Docker test of this (tests/test_docker_exec.py, px04).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from hostkit import ScriptedBroker
from memkit import MemoryComponent
from runner.host import pump
from runner.host.bounds import loop_limiter
from runner.host.driver import RunControl, drive
from runner.host.pump import DECODE_IN_THREAD
from runner.json1 import JSONValue
from runner.protocol.session import decode
from runner.sandbox.base import SandboxFacts
from runner.sandbox.docker.attach import STDOUT_LIMIT, AttachConnection, open_connection
from runner.sandbox.registry import StopGraces

PARAMS: dict[str, JSONValue] = {
    "protocol": "run/1", "input": None, "settings": {}, "attachments": {},
    "scratch": "/tmp", "deadlineUnixMs": 2**52,
}  # fmt: skip
GRACES = StopGraces(cancel=0.2)  # the decode below outlasts it


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _trailing_bytes_then_exit(exit_code: int) -> tuple[str | None, int | None, str]:
    component = MemoryComponent(exit_code)

    async def play() -> None:
        root = await component.frames().__anext__()
        done = {"jsonrpc": "2.0", "id": root["id"], "result": {"outcome": "done", "output": 1}}
        await component.to_host.send(json.dumps(done).encode() + b"\nunexpected\n")
        # No exit by itself: the host's kill (the violation) is what ends this component.

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            outcome = await drive(component, PARAMS, ScriptedBroker())  # type: ignore[arg-type]
    assert outcome.verdict.error is not None
    return outcome.ending.host_kill, outcome.ending.exit_code, outcome.verdict.error.code


@pytest.mark.anyio
async def test_a_kill_that_ended_the_component_is_reported() -> None:
    assert await _trailing_bytes_then_exit(137) == ("violation", 137, "PROTOCOL_ERROR")


@pytest.mark.anyio
async def test_a_kill_accepted_after_the_component_exited_by_itself_is_not_reported() -> None:
    assert await _trailing_bytes_then_exit(0) == (None, 0, "PROTOCOL_ERROR")


@pytest.mark.anyio
async def test_a_kill_after_cancel_is_cancelled_when_stdout_ended_first() -> None:
    """§11 rule 1: the component answers the root's ``request/cancel`` by closing stdout
    with no response and not exiting; the host kills it once the exit grace runs out. That
    kill, after the recorded cancellation, ends the Run ``CANCELLED``, not as a failure
    of the component's own (its exit status is the host's SIGKILL)."""
    component = MemoryComponent(137)
    control = RunControl()

    async def play() -> None:
        frames = component.frames()
        await frames.__anext__()  # the root
        control.cancel()
        cancel = await frames.__anext__()
        assert cancel["method"] == "request/cancel"
        await component.to_host.aclose()  # stdout ends; the process lives on

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            outcome = await drive(
                component,  # type: ignore[arg-type]
                PARAMS,
                ScriptedBroker(),
                control=control,
                graces=StopGraces(cancel=5, exit=0.2),
            )
    assert (outcome.ending.host_kill, outcome.ending.exit_code) == ("lost", 137)
    assert outcome.verdict.error is not None and outcome.verdict.error.code == "CANCELLED"


class _AttachedComponent:
    """A component over a real attach connection, with no engine: the test writes the
    engine's side of the socket; exit is the end of the stream, as on Docker."""

    def __init__(self, connection: AttachConnection) -> None:
        self.connection = connection
        self.stdin = connection.stdin
        self.stdout = connection.stdout
        self.stderr = connection.stderr
        self.attachment_paths: dict[str, str] = {}
        self.scratch_path = "/tmp"
        self.facts = SandboxFacts()
        self.killed = anyio.Event()

    async def wait(self) -> int:
        with anyio.fail_after(10):  # the host waits for exit shielded: fail, do not hang
            await self.connection.drain()
        return 137 if self.facts.killed_by_host else 0

    async def kill(self) -> None:
        self.facts.killed_by_host = True
        self.killed.set()


@pytest.mark.anyio
async def test_a_run_stopped_while_its_stdout_is_full_is_killed_and_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driving task is cancelled while the pump decodes a large frame and stdout is
    full (the attach socket paused): after the grace the host kills, and the end of the
    stream is still seen, though nothing reads stdout any more (it is discarded)."""
    release = threading.Event()

    def stuck(payload: bytes) -> Any:
        release.wait()  # a decode that outlasts the grace
        return decode(payload)

    monkeypatch.setattr(pump, "decode", stuck)
    ours, engine = socket.socketpair()
    engine.setblocking(False)
    loop = asyncio.get_running_loop()
    big = b"[" + b"0," * (DECODE_IN_THREAD // 2) + b"0]\n"
    stream = b"".join(
        bytes([1, 0, 0, 0]) + len(piece).to_bytes(4, "big") + piece
        for data in (big, big, b"y" * (STDOUT_LIMIT + (4 << 20)))
        for piece in (data[i : i + 32768] for i in range(0, len(data), 32768))
    )
    control = RunControl()
    stopping = anyio.CancelScope()
    try:
        component = _AttachedComponent(await open_connection(ours))
        transport: Any = component.connection._transport

        async def play() -> None:
            await loop.sock_sendall(engine, stream)  # all of it taken, or dropped
            await component.killed.wait()
            engine.shutdown(socket.SHUT_WR)  # the container is gone: the stream ends

        async def run() -> None:
            with stopping:
                await drive(component, PARAMS, ScriptedBroker(), control=control, graces=GRACES)  # type: ignore[arg-type]

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(play)
                tg.start_soon(run)
                while transport.is_reading():  # stdout full: the socket is paused
                    await anyio.lowlevel.checkpoint()
                stopping.cancel()
    finally:
        release.set()
        engine.close()
    assert control.stopped is not None
    assert (control.stopped.ending.exit_code, control.stopped.ending.host_kill) == (137, "cancel")


@pytest.mark.anyio
async def test_large_decodes_of_all_the_runs_of_a_loop_take_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three runs in one loop (a root and its children) each send a frame to decode in a
    thread: BIG_DECODES of them decode at once, the third waits its turn (a hostile 16 MiB
    frame can take ~0.5 GiB to refuse)."""
    active = peak = 0
    changed = threading.Condition()
    release = threading.Event()

    def held(payload: bytes) -> Any:
        nonlocal active, peak
        with changed:
            active += 1
            peak = max(peak, active)
            changed.notify_all()
        release.wait(10)
        with changed:
            active -= 1
        return decode(payload)

    monkeypatch.setattr(pump, "decode", held)
    big = b"[" + b"0," * (DECODE_IN_THREAD // 2) + b"0]\n"

    async def one() -> None:
        component = MemoryComponent(137)

        async def play() -> None:
            await component.frames().__anext__()
            await component.to_host.send(big)

        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            await drive(component, PARAMS, ScriptedBroker(), graces=GRACES)  # type: ignore[arg-type]

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(one)

            def two_decoding() -> bool:
                with changed:
                    return changed.wait_for(lambda: active == 2, 10)

            assert await anyio.to_thread.run_sync(two_decoding)
            await anyio.wait_all_tasks_blocked()
            assert loop_limiter(pump._big_decodes, pump.BIG_DECODES).statistics().tasks_waiting == 1
            release.set()
    assert peak == pump.BIG_DECODES == 2


class _GatedStdin:
    """A stdin whose sends wait for a gate: the component reads only once it is killed."""

    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate
        self.sent: list[bytes] = []

    async def send(self, data: bytes) -> None:
        await self.gate.wait()
        self.sent.append(bytes(data))

    async def aclose(self) -> None:
        pass


class _EndsOnKill:
    """stdout and stderr: nothing until the kill, then the end."""

    def __init__(self, killed: anyio.Event) -> None:
        self.killed = killed

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await self.killed.wait()
        raise anyio.EndOfStream

    def __aiter__(self) -> _EndsOnKill:
        return self

    async def __anext__(self) -> bytes:
        await self.killed.wait()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        pass


class _ReadsAsItIsKilled:
    """A component that takes nothing from stdin until the host's kill, and the write the
    host had in progress lands just then (its send returns after the output was dropped)."""

    def __init__(self) -> None:
        self.killed = anyio.Event()
        self.stdin = _GatedStdin(self.killed)
        self.stdout = _EndsOnKill(self.killed)
        self.stderr = _EndsOnKill(self.killed)
        self.attachment_paths: dict[str, str] = {}
        self.scratch_path = "/tmp"
        self.facts = SandboxFacts()

    async def wait(self) -> int:
        await self.killed.wait()
        return 137

    async def kill(self) -> None:
        self.facts.killed_by_host = True
        self.killed.set()


@pytest.mark.anyio
async def test_a_write_that_lands_after_the_kill_dropped_the_output_is_no_error() -> None:
    """The host's write of flow/run waits (the component does not read); the deadline
    comes, the grace passes, the kill drops what waited, and only then the write returns:
    the run ends DEADLINE_EXCEEDED, not with an error in the writer."""
    import time

    component = _ReadsAsItIsKilled()
    params = {**PARAMS, "deadlineUnixMs": int(time.time() * 1000) + 200}
    with anyio.fail_after(10):
        outcome = await drive(component, params, ScriptedBroker(), graces=GRACES)  # type: ignore[arg-type]
    assert component.stdin.sent, "the write in progress did land"
    assert (outcome.ending.host_kill, outcome.ending.exit_code) == ("cancel", 137)
    assert outcome.verdict.error is not None
    assert outcome.verdict.error.code == "DEADLINE_EXCEEDED"


@pytest.mark.anyio
@pytest.mark.timeout(30)  # the hang this guards against is past any scope's deadline
async def test_a_caller_cancelled_as_the_run_begins_stops_it() -> None:
    """The driving task is cancelled before the run's first wait: the run is still stopped
    (request/cancel, the grace, the kill), not left waiting for its own tasks for ever."""
    component = MemoryComponent(137)  # ends by the host's kill
    control = RunControl()
    with anyio.fail_after(10):
        with anyio.CancelScope() as scope:
            scope.cancel()
            await drive(component, PARAMS, ScriptedBroker(), control=control, graces=GRACES)  # type: ignore[arg-type]
    assert scope.cancelled_caught
    assert control.stopped is not None
    assert control.stopped.verdict.error is not None
    assert control.stopped.verdict.error.code == "CANCELLED"
