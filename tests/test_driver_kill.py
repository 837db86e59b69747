"""The report names a host kill only when the kill is what ended the component.

An engine accepts a kill for a process already on its way out: the component that wrote
trailing bytes and exited 0 by itself, in the moment between the host seeing the violation
and the signal, was not killed, whatever the kill call returned. CI once read
``(0, "violation")`` from the Docker test of this (tests/test_docker_exec.py, px04).
"""

from __future__ import annotations

import json

import anyio
import pytest

from hostkit import ScriptedBroker
from memkit import MemoryComponent
from runner.host.driver import drive
from runner.json1 import JSONValue

PARAMS: dict[str, JSONValue] = {
    "protocol": "run/1", "input": None, "settings": {}, "attachments": {},
    "scratch": "/tmp", "deadlineUnixMs": 2**52,
}  # fmt: skip


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
