"""Shared pieces for host tests: the scripted broker and a one-call way to run the fake.

The fake component (``fake_component.py``) plays a HOST-CASES scenario; the
:class:`ScriptedBroker` answers its calls the way each scenario expects and counts what it
dispatched, so a test can check both what the component saw and what the host did.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from runner.api import Execution, Invocation, execute
from runner.host.broker import CallContext
from runner.host.driver import RunControl
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError
from runner.sandbox.base import Sandbox
from runner.sandbox.process import ProcessSandbox
from runner.sandbox.registry import StopGraces

FAKE = Path(__file__).with_name("fake_component.py")
FAST = StopGraces(cancel=0.5, exit=0.5)


class ScriptedBroker:
    """Answers ``capability/call`` by its input; records every dispatch.

    With ``gather``, a call whose input is an integer is held until that many such calls
    are in flight at once, then all are answered: calls kept in flight together by an
    event, not by a pause (RB-02).
    """

    def __init__(self, gather: int = 0) -> None:
        self.dispatched: list[tuple[str, dict[str, JSONValue]]] = []
        self.released = anyio.Event()
        self.gather = gather
        self.gathering = 0
        self.gathered = anyio.Event()

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        self.dispatched.append((method, params))
        if method != "capability/call":
            raise OperationError("UNAVAILABLE", f"{method} is not scripted")
        value = params["input"]
        if params["method"] == "raise":
            raise RuntimeError("the provider crashed")
        if value == "held":
            await self.released.wait()
            return {"value": {"receipt": "survived"}}
        if value == "release":
            self.released.set()
            return {"value": "released"}
        if value == "uncertain":
            raise OperationError("UNCERTAIN", "the provider was lost mid-call")
        if value == "slow":
            await anyio.sleep(30)
        if self.gather and isinstance(value, int) and not isinstance(value, bool):
            self.gathering += 1
            if self.gathering == self.gather:
                self.gathered.set()
            await self.gathered.wait()
        operation = params["operationId"]
        assert isinstance(operation, str)
        if operation.startswith("shared"):
            return {"value": {"receipt": "shared"}}
        return {"value": value}

    def count(self, operation_prefix: str) -> int:
        """Dispatches whose operationId starts with ``operation_prefix``."""
        return sum(
            1
            for _, params in self.dispatched
            if str(params.get("operationId", "")).startswith(operation_prefix)
        )


def fake(scenario: str) -> ProcessSandbox:
    """The fake component as a local process."""
    return ProcessSandbox([sys.executable, str(FAKE), scenario])


def run(
    sandbox: Sandbox,
    *,
    input: JSONValue = None,
    broker: ScriptedBroker | None = None,
    deadline: float = 20,
    graces: StopGraces = FAST,
    cancel: bool = False,
) -> Execution:
    """Run one invocation to its verdict; with ``cancel``, the root is cancelled from the
    start: the component reads ``flow/run``, then ``request/cancel``."""

    async def main() -> Execution:
        control = RunControl()
        if cancel:
            control.cancel()
        return await execute(
            sandbox,
            Invocation.within(deadline, input=input),
            target="fake",
            broker=broker or ScriptedBroker(),
            graces=graces,
            control=control,
        )

    return anyio.run(main)


def output(execution: Execution) -> Any:
    """The accepted Run output (fails the test if the run did not succeed)."""
    result = execution.verdict.result
    assert result is not None, (execution.verdict.error, execution.report.reasons)
    return result["output"]


def error_code(execution: Execution) -> str:
    """The Run's error code (fails the test if the run succeeded)."""
    error = execution.verdict.error
    assert error is not None, execution.verdict.result
    return error.code
