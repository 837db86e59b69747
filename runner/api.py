"""The Python API: run one invocation in a sandbox and get its judged report.

``execute`` ties a sandbox backend, the driver and a broker together; the CLI is a thin
layer over it, and so are the tests and benchmarks that need a real run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.host.broker import Broker, UnavailableBroker
from runner.host.driver import Graces, RunControl, RunOutcome, drive
from runner.json1 import JSONValue
from runner.protocol.completion import Verdict
from runner.report import ReportedError, RunReport
from runner.sandbox.base import LaunchRequest, Sandbox


@dataclass
class Invocation:
    """One Run: the component's input and settings, its deadline and its mounts."""

    input: JSONValue = None
    settings: dict[str, JSONValue] = field(default_factory=dict)
    deadline_unix_ms: int = 0
    launch: LaunchRequest = field(default_factory=LaunchRequest)

    @classmethod
    def within(cls, seconds: float, **kwargs: object) -> Invocation:
        """An invocation whose deadline is ``seconds`` from now."""
        deadline = int((time.time() + seconds) * 1000)
        return cls(deadline_unix_ms=deadline, **kwargs)  # type: ignore[arg-type]


@dataclass
class Execution:
    """The verdict of a run together with its report."""

    verdict: Verdict
    report: RunReport


def new_run_id() -> str:
    """A fresh run id, unique enough to label containers with."""
    return uuid.uuid4().hex[:16]


async def execute(
    sandbox: Sandbox,
    invocation: Invocation,
    *,
    target: str,
    backend: str,
    broker: Broker | None = None,
    graces: Graces | None = None,
    control: RunControl | None = None,
    stderr_sink: Callable[[bytes], None] | None = None,
    depth: int = 0,
) -> Execution:
    """Launch the component, drive Run/1 to the end and judge it.

    ``depth`` is 0 for a root run and grows by one for each level of child flows.
    """
    request = invocation.launch
    if not request.run_id:
        request = LaunchRequest(
            request.attachments, request.scratch_dir, new_run_id(), request.parent_run_id
        )
    async with sandbox.launch(request) as component:
        params: dict[str, JSONValue] = {
            "protocol": "run/1",
            "input": invocation.input,
            "settings": invocation.settings,
            "attachments": {
                a.name: {"path": component.attachment_paths[a.name], "access": a.access}
                for a in request.attachments
            },
            "scratch": component.scratch_path,
            "deadlineUnixMs": invocation.deadline_unix_ms,
        }
        outcome = await drive(
            component,
            params,
            broker or UnavailableBroker(),
            run_id=request.run_id,
            depth=depth,
            graces=graces or Graces(),
            control=control,
            stderr_sink=stderr_sink,
        )
    facts = component.facts
    report = _report(outcome, request.run_id, target, backend)
    report.timings.update(facts.timings)
    report.oom_killed = report.oom_killed or facts.oom_killed
    return Execution(outcome.verdict, report)


def _report(outcome: RunOutcome, run_id: str, target: str, backend: str) -> RunReport:
    verdict, session, ending = outcome.verdict, outcome.session, outcome.ending
    error = verdict.error
    return RunReport(
        run_id=run_id,
        target=target,
        backend="docker" if backend == "docker" else "process",
        status="succeeded" if verdict.result is not None else "failed",
        outcome=str(verdict.result["outcome"]) if verdict.result is not None else None,
        error=ReportedError(code=error.code, message=error.message, details=error.details)
        if error is not None
        else None,
        reasons=list(verdict.reasons),
        exit_code=ending.exit_code,
        oom_killed=ending.oom_killed,
        host_kill=ending.host_kill,
        condition=session.condition,
        timings=dict(outcome.timings),
        bytes_from_component=session.bytes_received,
        bytes_to_component=session.bytes_sent,
        component_requests=session.lifetime_requests,
        dispatches=outcome.dispatches,
        stderr_bytes=outcome.stderr.total,
        stderr_truncated=outcome.stderr.truncated,
        stderr=outcome.stderr.text(),
    )
