"""The Python API: run one invocation in a sandbox and get its judged report."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from runner.contracts.ports import required_ports
from runner.host.broker import Broker, UnavailableBroker
from runner.host.channels import ChannelHub, ChannelOffer, ChannelParty
from runner.host.driver import RunControl, RunOutcome, drive
from runner.host.operations import RETAINED_BYTES
from runner.json1 import JSONValue
from runner.package.errors import InvocationRefused
from runner.package.reader import sandbox_package
from runner.protocol.codes import OperationError
from runner.protocol.completion import Verdict
from runner.protocol.frames import MAX_PAYLOAD_BYTES
from runner.protocol.session import flow_run_overflow
from runner.report import ReportedError, ReportedPackage, RunReport, SandboxLoss
from runner.sandbox.base import LaunchRequest, Sandbox, SandboxFacts
from runner.sandbox.errors import SandboxLost
from runner.sandbox.registry import StopGraces

if TYPE_CHECKING:
    from runner.package.parse import Package


@dataclass
class Invocation:
    """One Run: the component's input and settings, its deadline and its mounts."""

    input: JSONValue = None
    settings: dict[str, JSONValue] = field(default_factory=dict)
    deadline_unix_ms: int = 0
    deadline_seconds: float | None = None
    """When set, ``deadline_unix_ms`` is set at launch to this long after it: the component
    gets the whole of it, however long its container took to start."""
    launch: LaunchRequest = field(default_factory=LaunchRequest)
    channels: ChannelOffer | None = None
    """The channel table and the rights its caller maps to it; ``None``: a fresh hub's."""
    package: Package | None = None
    """The package to hold the run to; ``None``: the image's, if it carries one."""

    @classmethod
    def within(cls, seconds: float, **kwargs: object) -> Invocation:
        """An invocation whose deadline is ``seconds`` from its component's launch."""
        deadline = int((time.time() + seconds) * 1000)
        return cls(deadline_unix_ms=deadline, deadline_seconds=seconds, **kwargs)  # type: ignore[arg-type]


@dataclass(slots=True, eq=False)
class Execution:
    """The verdict of a run together with its report."""

    verdict: Verdict
    report: RunReport

    def report_json(self) -> str:
        """The report as ``--report`` writes it (indented JSON)."""
        return self.report.dumps()

    @property
    def lost(self) -> str | None:
        """What went away under the run, ``container`` or ``engine``, or ``None``."""
        return None if self.report.lost is None else self.report.lost.what


REFUSED_BEFORE_LAUNCH = "refused by the package before launch; no container was created"
"""The one reason of a run whose input its package refused: no container exists."""


def new_run_id() -> str:
    """A fresh run id, unique enough to label containers with."""
    return uuid.uuid4().hex[:16]


async def execute(
    sandbox: Sandbox,
    invocation: Invocation,
    *,
    target: str,
    broker: Broker | None = None,
    graces: StopGraces | None = None,
    control: RunControl | None = None,
    stderr_sink: Callable[[bytes], None] | None = None,
    depth: int = 0,
    retained_bytes: int = RETAINED_BYTES,
) -> Execution:
    """Launch the component, drive Run/1 to the end and judge it.

    ``depth`` is 0 for a root run, one more for each level of child flows. Cancelling the
    task stops the run (root cancel, grace, kill, cleanup) before the cancellation goes
    on; ``control`` stops it without cancelling the task. ``timings.total`` runs from the
    launch to the container's removal, the children's teardown included.

    A run held to a package (the image's or the invocation's) has its settings and
    attachments checked first (:class:`~runner.package.InvocationRefused`), then its
    input (an ``INVALID_INPUT`` failure, no container created), after the run its
    result (``INVALID_RESULT``). A broken package raises
    :class:`~runner.package.PackageError` before anything runs. A container or engine
    that goes away once the container exists is the run's ``CHANNEL_LOST`` failure, not
    an exception.
    """
    request = invocation.launch
    if not request.run_id:
        request = replace(request, run_id=new_run_id())
    package = invocation.package or await sandbox_package(sandbox)
    offer = invocation.channels or ChannelOffer(ChannelHub().party(request.run_id))
    run = _RunRecord(request.run_id, target, sandbox.name, package)
    ports = None
    if package is not None:
        from runner.package.checks import (
            channel_contract_resolver,
            channel_ports,
            check_attachments,
            check_settings,
            input_failure,
        )

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
            verdict = Verdict(None, refused, (REFUSED_BEFORE_LAUNCH,))
            return Execution(verdict, run.report(verdict))
    grants = offer.admit(ports)  # the last check: after it, rights have moved
    control = control or RunControl()
    try:
        attachments, scratch = sandbox.planned_paths(request)
        _check_frame(_params(invocation, attachments, scratch, grants))
        launched = time.monotonic()
        async with sandbox.launch(request) as component:
            if invocation.deadline_seconds is not None:
                started = int((time.time() + invocation.deadline_seconds) * 1000)
                invocation = replace(invocation, deadline_unix_ms=started)
            run.facts = component.facts
            paths = component.attachment_paths
            outcome = await drive(
                component,
                _params(invocation, paths, component.scratch_path, grants),
                broker or UnavailableBroker(),
                run_id=request.run_id,
                depth=depth,
                graces=graces or StopGraces(),
                control=control,
                stderr_sink=stderr_sink,
                retained_bytes=retained_bytes,
                channels=offer.party,
            )
        wall = time.monotonic() - launched  # the teardown included, the driver's total not
        return _judged(outcome, component.facts, run, offer.party, wall)
    except SandboxLost as lost:
        execution = _lost(lost, run)
        offer.party.conclude(execution.verdict.error)
        return execution
    finally:  # a no-op once the run was judged; else it was stopped or failed to launch
        offer.party.conclude(OperationError("CANCELLED", "the invocation was stopped"))


@dataclass
class _RunRecord:
    """What a run's report says whatever its end: its names, its package, and its
    sandbox's facts (the one record of its exit code and OOM kill)."""

    run_id: str
    target: str
    backend: str
    package: Package | None
    facts: SandboxFacts | None = None

    def report(self, verdict: Verdict, **fields: Any) -> RunReport:
        """The run's report for ``verdict`` (its error and reasons), with ``fields``."""
        package, error = None, None
        if self.package is not None:
            source = self.package.image_id or self.package.root
            package = ReportedPackage(self.package.name, self.package.digest, source)
        if verdict.error is not None:
            failure = verdict.error
            error = ReportedError(failure.code, failure.message, failure.details)
        return RunReport(
            run_id=self.run_id,
            target=self.target,
            backend=self.backend,
            package=package,
            status="succeeded" if verdict.result is not None else "failed",
            error=error,
            reasons=list(verdict.reasons),
            pooled=self.facts is not None and self.facts.details.get("pooled") is True,
            **fields,
        )


def _judged(
    outcome: RunOutcome, facts: SandboxFacts, run: _RunRecord, channels: ChannelParty, wall: float
) -> Execution:
    """The driven run judged, after cleanup (which may be what recorded its exit code and
    OOM kill): its result held to its package, its disk bound and its channels (settled
    here, before the caller's ``finally`` would cancel them)."""
    verdict = outcome.verdict
    if run.package is not None and verdict.result is not None:
        from runner.package.checks import result_failure

        failure = result_failure(run.package, verdict.result)
        if failure is not None:
            verdict = Verdict(None, failure, (*verdict.reasons, "result refused by the package"))
    if (breach := facts.disk_breach) is not None:  # whatever it answered: the bytes stay
        details: dict[str, JSONValue] = {"disk": dict(breach.details())}
        error = OperationError("RESOURCE_EXHAUSTED", breach.message(), details)
        verdict = Verdict(None, error, (*verdict.reasons, f"disk bound exceeded ({breach.reason})"))
    verdict = _settle_channels(channels, verdict)
    session = outcome.session
    report = run.report(
        verdict,
        outcome=str(verdict.result["outcome"]) if verdict.result is not None else None,
        exit_code=facts.exit_code,
        oom_killed=facts.oom_killed,
        host_kill=outcome.ending.host_kill,
        condition=session.condition,
        timings={**outcome.timings, **facts.timings, "total": wall},
        bytes_from_component=session.bytes_received,
        bytes_to_component=session.bytes_sent,
        component_requests=session.lifetime_requests,
        dispatches=outcome.dispatches,
        stderr_bytes=outcome.stderr.total,
        stderr_truncated=outcome.stderr.truncated,
        stderr=outcome.stderr.text(),
    )
    return Execution(verdict, report)


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
    """End the invocation's channels (PROTOCOL.md §7.6): a receiver read from and left
    unfinished is abandoned work and fails the run; then held writers are sealed
    (success) or aborted (failure)."""
    if verdict.result is not None and (left := channels.unfinished()):
        error = OperationError(
            "EXECUTION_FAILED",
            f"{len(left)} channel receiver(s) were read from and left unfinished "
            "(neither at end, failed nor released)",
        )
        verdict = Verdict(None, error, (*verdict.reasons, "abandoned channel receivers"))
    channels.conclude(verdict.error)
    return verdict


def _lost(lost: SandboxLost, run: _RunRecord) -> Execution:
    """A Run whose container or engine went away (PROTOCOL.md §9.3, ``CHANNEL_LOST``); the
    details say which, so a caller can retry an engine's."""
    seconds = round(lost.seconds, 3)
    details: dict[str, JSONValue] = {"lost": lost.what, "step": lost.step, "seconds": seconds}
    error = OperationError("CHANNEL_LOST", str(lost)[:1024], details)
    reasons = [lost.reason, f"noticed in the {lost.step} step, {seconds:.1f} s into the run"]
    if lost.container_left:
        reasons.append(
            "the container was left; `flow-runner gc` removes it once the engine answers"
        )
    loss = SandboxLoss(lost.what, lost.step, seconds, lost.container_id, lost.container_left)
    verdict = Verdict(None, error, tuple(reasons))
    return Execution(verdict, run.report(verdict, lost=loss))
