"""The Python API: run one invocation in a sandbox and get its judged report.

``execute`` ties a sandbox backend, the driver and a broker together; the CLI is a thin
layer over it, and so are the tests and benchmarks that need a real run.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from runner.contracts.ports import required_ports
from runner.host.broker import Broker, UnavailableBroker
from runner.host.channels import ChannelHub, ChannelOffer, ChannelParty
from runner.host.driver import Graces, RunControl, RunOutcome, drive
from runner.host.operations import RETAINED_BYTES
from runner.json1 import JSONValue
from runner.package.checks import (
    channel_contract_resolver,
    channel_ports,
    check_attachments,
    check_settings,
    input_failure,
    result_failure,
)
from runner.package.errors import InvocationRefused
from runner.protocol.codes import OperationError
from runner.protocol.completion import Verdict
from runner.protocol.frames import MAX_PAYLOAD_BYTES
from runner.protocol.session import flow_run_overflow
from runner.report import ReportedError, RunReport, SandboxLoss
from runner.sandbox.base import DiskBreach, LaunchRequest, Sandbox
from runner.sandbox.errors import SandboxLost

if TYPE_CHECKING:
    from runner.package.reader import Package


@dataclass
class Invocation:
    """One Run: the component's input and settings, its deadline and its mounts."""

    input: JSONValue = None
    settings: dict[str, JSONValue] = field(default_factory=dict)
    deadline_unix_ms: int = 0
    launch: LaunchRequest = field(default_factory=LaunchRequest)
    channels: ChannelOffer | None = None
    """The invocation's channel table and the rights its caller maps to it; a root run
    gets a table of its own in a fresh hub."""

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
    on_stopped: Callable[[Execution], None] | None = None,
    retained_bytes: int = RETAINED_BYTES,
) -> Execution:
    """Launch the component, drive Run/1 to the end and judge it.

    ``depth`` is 0 for a root run and grows by one for each level of child flows. If the
    task running this is cancelled, the run is stopped (root cancel, grace, kill, cleanup)
    and, before the cancellation goes on, ``on_stopped`` gets its judged execution: a
    parent's report keeps the children its cancellation stopped.

    When the sandbox's image carries a FLOW package, the run is held to it: settings and
    attachments are checked first (:class:`~runner.package.InvocationRefused`), then the
    input (an ``INVALID_INPUT`` Run failure with no container created), and after the
    run the outcome and ``result.schema.json`` (``INVALID_RESULT``). A broken package
    raises :class:`~runner.package.PackageError` before anything runs.

    A container, or the engine running it, that goes away once the container exists is
    the run's failure (``CHANNEL_LOST``, the loss in ``report.lost``), not an exception:
    the component's channel went with it, whatever it had said.
    """
    request = invocation.launch
    if not request.run_id:
        request = LaunchRequest(
            request.attachments, request.scratch_dir, new_run_id(), request.parent_run_id
        )
    package = await _package_of(sandbox)
    offer = invocation.channels or ChannelOffer(ChannelHub().party(request.run_id))
    ports = None
    if package is not None:
        check_settings(package, invocation.settings)
        check_attachments(package, request.attachments)
        ports = channel_ports(package)
        if offer.giver is None and required_ports(ports):
            raise InvocationRefused(
                "INVALID_CHANNELS",
                f"package {package.name!r} needs channel port(s) "
                f"{', '.join(required_ports(ports))} connected; only a parent flow can wire "
                "them (run it as a child flow with a channels map)",
            )
        offer.party.resolve_contract = channel_contract_resolver(package)
        refused = input_failure(package, invocation.input)
        if refused is not None:
            offer.party.conclude(refused)
            return _refused(refused, request.run_id, target, backend)
    grants = offer.admit(ports)  # the last check: after it, rights have moved
    control = control or RunControl()
    try:
        attachments, scratch = _planned_paths(request, backend)
        _check_frame(_params(invocation, attachments, scratch, grants))
        return await _launch_and_drive(
            sandbox, invocation, request, package, target, backend, broker, graces, control,
            stderr_sink, depth, retained_bytes, offer.party, grants,
        )  # fmt: skip
    except SandboxLost as lost:
        execution = _lost(lost, request.run_id, target, backend)
        offer.party.conclude(execution.verdict.error)
        return execution
    except anyio.get_cancelled_exc_class():
        stopped = control.stopped
        if on_stopped is not None and stopped is not None:
            report = _report(stopped, stopped.verdict, request.run_id, target, backend)
            on_stopped(Execution(stopped.verdict, report))
        raise
    finally:  # a no-op once the run was judged; else it was stopped or failed to launch
        offer.party.conclude(OperationError("CANCELLED", "the invocation was stopped"))


async def _launch_and_drive(
    sandbox: Sandbox,
    invocation: Invocation,
    request: LaunchRequest,
    package: Package | None,
    target: str,
    backend: str,
    broker: Broker | None,
    graces: Graces | None,
    control: RunControl,
    stderr_sink: Callable[[bytes], None] | None,
    depth: int,
    retained_bytes: int,
    channels: ChannelParty,
    grants: dict[str, JSONValue],
) -> Execution:
    async with sandbox.launch(request) as component:
        paths = component.attachment_paths
        outcome = await drive(
            component,
            _params(invocation, paths, component.scratch_path, grants),
            broker or UnavailableBroker(),
            run_id=request.run_id,
            depth=depth,
            graces=graces or Graces(),
            control=control,
            stderr_sink=stderr_sink,
            retained_bytes=retained_bytes,
            channels=channels,
        )
    facts = component.facts
    verdict = outcome.verdict
    if package is not None and verdict.result is not None:
        failure = result_failure(package, verdict.result)
        if failure is not None:
            verdict = Verdict(None, failure, (*verdict.reasons, "result refused by the package"))
    if facts.disk_breach is not None:
        verdict = _disk_failure(facts.disk_breach, verdict)
    verdict = _settle_channels(channels, verdict)
    report = _report(outcome, verdict, request.run_id, target, backend)
    report.timings.update(facts.timings)
    report.oom_killed = report.oom_killed or facts.oom_killed
    return Execution(verdict, report)


def _disk_failure(breach: DiskBreach, verdict: Verdict) -> Verdict:
    """A run whose host directory grew past its disk bound fails, whatever it answered.

    The backend stopped it on the breach, or found the breach in its last measurement
    after the component ended; either way the bytes are on the host's disk.
    """
    details: dict[str, JSONValue] = {"disk": dict(breach.details())}
    error = OperationError("RESOURCE_EXHAUSTED", breach.message(), details)
    return Verdict(None, error, (*verdict.reasons, f"disk bound exceeded ({breach.reason})"))


def _params(
    invocation: Invocation,
    attachment_paths: Mapping[str, str],
    scratch: str,
    grants: dict[str, JSONValue],
) -> dict[str, JSONValue]:
    """The ``flow/run`` params, with the paths the component sees."""
    params: dict[str, JSONValue] = {
        "protocol": "run/1",
        "input": invocation.input,
        "settings": invocation.settings,
        "attachments": {
            a.name: {"path": attachment_paths[a.name], "access": a.access}
            for a in invocation.launch.attachments
        },
        "scratch": scratch,
        "deadlineUnixMs": invocation.deadline_unix_ms,
    }
    if grants:
        params["channels"] = grants
    return params


def _planned_paths(request: LaunchRequest, backend: str) -> tuple[dict[str, str], str]:
    """The attachment and scratch paths the backend will give the component, known before
    launch so that the ``flow/run`` frame can be measured first.

    Docker mounts every attachment at ``/flow/attachments/NAME`` and scratch at
    ``/flow/scratch``; the process backend passes host paths, and a private scratch is a
    ``tempfile.mkdtemp`` directory of a fixed-length name (the same JSON length).
    """
    if backend == "docker":
        from runner.sandbox.docker import ATTACHMENTS_DIR, SCRATCH_PATH

        mounted = {a.name: f"{ATTACHMENTS_DIR}/{a.name}" for a in request.attachments}
        return mounted, SCRATCH_PATH
    private = Path(tempfile.gettempdir(), "flow-runner-scratch-" + "x" * 8)
    scratch = request.scratch_dir or private
    return {a.name: str(a.host_path) for a in request.attachments}, str(scratch)


def _check_frame(params: dict[str, JSONValue]) -> None:
    """Refuse an invocation whose ``flow/run`` frame would not fit Run/1's frame bound."""
    size = flow_run_overflow(params)
    if size is not None:
        raise InvocationRefused(
            "INVALID_INPUT",
            f"the flow/run frame would be {size:,} bytes, over Run/1's bound of "
            f"{MAX_PAYLOAD_BYTES:,} bytes a frame: make the input (or the settings) "
            "smaller, or pass large data as an attachment",
        )


def _settle_channels(channels: ChannelParty, verdict: Verdict) -> Verdict:
    """End the invocation's channels (PROTOCOL.md §7.6) and say whether it still succeeds.

    A receiver it read from and left before end, failure or release is abandoned work:
    the run fails. Only then are held writers sealed (success) or aborted (failure).
    """
    if verdict.result is not None and (left := channels.unfinished()):
        error = OperationError(
            "EXECUTION_FAILED",
            f"{len(left)} channel receiver(s) were read from and left unfinished "
            "(neither at end, failed nor released)",
        )
        verdict = Verdict(None, error, (*verdict.reasons, "abandoned channel receivers"))
    channels.conclude(verdict.error)
    return verdict


async def _package_of(sandbox: Sandbox) -> Package | None:
    """The package of the sandbox's image, if its backend has one (Docker) and it carries one.

    Images without a FLOW.md (test images, a bare command) run unchecked, as before.
    """
    read = getattr(sandbox, "package", None)
    if read is None:
        return None
    package: Package | None = await read()
    return package


def _refused(error: OperationError, run_id: str, target: str, backend: str) -> Execution:
    """A Run that failed its package's checks before any container was created."""
    reason = "refused by the package before launch; no container was created"
    verdict = Verdict(None, error, (reason,))
    report = RunReport(
        run_id=run_id,
        target=target,
        backend="docker" if backend == "docker" else "process",
        status="failed",
        error=ReportedError(code=error.code, message=error.message, details=error.details),
        reasons=[reason],
    )
    return Execution(verdict, report)


def _lost(lost: SandboxLost, run_id: str, target: str, backend: str) -> Execution:
    """A Run whose container or engine went away under it (PROTOCOL.md §9.3: transport
    loss is ``CHANNEL_LOST``); the details say which, so a caller can retry an engine's."""
    loss = SandboxLoss(
        what=lost.what,
        step=lost.step,
        seconds=round(lost.seconds, 3),
        container_id=lost.container_id,
        container_left=lost.container_left,
    )
    details: dict[str, JSONValue] = {"lost": loss.what, "step": loss.step, "seconds": loss.seconds}
    error = OperationError("CHANNEL_LOST", str(lost)[:1024], details)
    reasons = [lost.reason, f"noticed in the {loss.step} step, {loss.seconds:.1f} s into the run"]
    if loss.container_left:
        reasons.append(
            "the container was left; `flow-runner gc` removes it once the engine answers"
        )
    verdict = Verdict(None, error, tuple(reasons))
    report = RunReport(
        run_id=run_id,
        target=target,
        backend="docker" if backend == "docker" else "process",
        status="failed",
        error=ReportedError(code=error.code, message=error.message, details=details),
        reasons=reasons,
        lost=loss,
    )
    return Execution(verdict, report)


def _report(
    outcome: RunOutcome, verdict: Verdict, run_id: str, target: str, backend: str
) -> RunReport:
    session, ending = outcome.session, outcome.ending
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
