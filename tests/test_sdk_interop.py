"""The component SDK against flow-runner's own host: both sides real, no container.

``tests/test_component_sdk.py`` checks the SDK against a scripted host, frame by frame;
here the same scenario component runs under the real HostSession and driver, so the two
halves of the project are proven to agree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio

from hostkit import error_code, output, run
from runner.host.broker import CallContext
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError
from runner.sandbox.process import ProcessSandbox
from runner.sandbox.registry import StopGraces

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "components" / "scenarios.py"


def sdk_component() -> ProcessSandbox:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return ProcessSandbox([sys.executable, str(SCENARIOS)], env=env)


class InteropBroker:
    """Children and capabilities as the scenario component expects them."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls = 0

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.delay)
            if method == "flow/run-child":
                return {"outcome": "done", "output": {"child-saw": params["input"]}}
            if params.get("method") == "read":
                return {"error": {"name": "not-found", "data": {"path": "missing"}}}
            if params.get("slot") == "artifacts":
                return {"value": {"uri": "artifact://r"}}
            if params.get("slot") == "store":
                return {"value": {"stored": params["input"]}}
            raise OperationError("UNAVAILABLE", "not scripted")
        finally:
            self.in_flight -= 1


def sdk_run(scenario: str, **kwargs: Any) -> Any:
    broker = kwargs.pop("broker", InteropBroker())
    return run(sdk_component(), input={"scenario": scenario, **kwargs.pop("args", {})},
               broker=broker, **kwargs)  # fmt: skip


def test_golden_conversation() -> None:
    seen = output(sdk_run("golden", args={"topic": "tides"}))
    assert seen["research"] == ["done", {"child-saw": {"scenario": "golden", "topic": "tides"}}]
    assert seen["stored"] == {"uri": "artifact://r"}
    assert seen["missing"] == ["not-found", {"path": "missing"}]


def test_sixty_five_concurrent_calls_keep_at_most_64_on_the_wire() -> None:
    broker = InteropBroker(delay=0.5)  # long enough for all 64 to be in flight together
    assert output(sdk_run("fanout", args={"calls": 65}, broker=broker)) == {"settled": 65}
    assert broker.calls == 65
    assert broker.most_in_flight == 64


def test_root_cancel_reaches_the_handler() -> None:
    execution = sdk_run("sleep", args={"seconds": 30}, cancel=True)
    assert error_code(execution) == "CANCELLED"
    assert execution.verdict.accepted, "the SDK answered CANCELLED itself; no kill needed"
    assert execution.report.host_kill is None


def test_deadline_with_cooperative_component_is_deadline_exceeded() -> None:
    execution = sdk_run("sleep", args={"seconds": 30}, deadline=0.8, graces=StopGraces(2, 2))
    assert error_code(execution) == "DEADLINE_EXCEEDED"
    assert execution.report.host_kill is None


def test_abandoned_call_fails_the_root() -> None:
    execution = sdk_run("abandon", broker=InteropBroker(delay=2))
    assert error_code(execution) == "EXECUTION_FAILED"
    assert execution.verdict.accepted


def test_handler_exception_and_invalid_result() -> None:
    explode = sdk_run("explode")
    assert error_code(explode) == "EXECUTION_FAILED"
    assert "ZeroDivisionError" in explode.report.stderr
    invalid = sdk_run("invalid-result", args={"result": {"outcome": "Not A Name", "output": 1}})
    assert error_code(invalid) == "INVALID_RESULT"


def test_stray_output_goes_to_stderr_and_the_run_succeeds() -> None:
    execution = sdk_run("stray-output")
    assert output(execution) == "printed"
    for text in ("print() output", "sys.stdout output", "raw fd 1 output", "subprocess output"):
        assert text in execution.report.stderr
