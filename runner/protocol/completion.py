"""Acceptance of a Run and the classification of every other ending (PROTOCOL.md §11).

A Run is accepted only when its root response is valid and correlated, no component
request is pending, stdout ended exactly on a frame boundary after it, and the process
exited 0 by itself. Every other ending is classified deterministically, with its reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from runner.json1 import JSONValue
from runner.protocol.codes import OperationError, bounded_message
from runner.protocol.session import Condition, HostSession, RootError, RootResult, SessionState

HostKill = Literal["cancel", "post-response", "violation", "lost"]
"""Why the host killed the component, when it did."""


@dataclass(frozen=True)
class Ending:
    """Facts about how one component ended, gathered by the driver."""

    exit_code: int | None
    host_kill: HostKill | None = None
    oom_killed: bool = False


@dataclass(frozen=True)
class Verdict:
    """The judged end of a Run: an accepted result, or an error with its reasons."""

    result: dict[str, JSONValue] | None
    error: OperationError | None
    reasons: tuple[str, ...] = field(default=())

    @property
    def accepted(self) -> bool:
        """True when the Run's response was accepted (result or a wire error)."""
        return self.result is not None or (
            self.error is not None and self.error.code not in ("PROTOCOL_ERROR", "CHANNEL_LOST")
        )


def judge(session: HostSession, ending: Ending) -> Verdict:
    """Decide the Run's end from the session's state and how the process ended."""
    response = session.root_response
    clean_end = session.state is SessionState.ENDED
    blockers = _acceptance_blockers(session, ending, clean_end)
    if response is not None and not blockers:
        if isinstance(response, RootResult):
            return Verdict(response.result, None, ("accepted",))
        error = response.error
        if error.code == "CANCELLED" and session.condition == "DEADLINE_EXCEEDED":
            # The host's recorded condition, not the component's view of it, decides (§9.3).
            reason = "accepted: the component stopped cooperatively at the deadline"
            message = "the deadline passed; the component stopped when cancelled"
            error = OperationError("DEADLINE_EXCEEDED", message, error.details)
            return Verdict(None, error, (reason,))
        return Verdict(None, error, ("accepted: the component answered with an error",))
    reasons = tuple(blockers) if response is not None else _premature_reasons(session, ending)
    return Verdict(None, _classify(session, ending, response, clean_end), reasons)


def _acceptance_blockers(session: HostSession, ending: Ending, clean_end: bool) -> list[str]:
    blockers: list[str] = []
    if session.violation is not None:
        blockers.append(f"protocol violation: {session.violation}")
    if session.pending:
        blockers.append(f"{len(session.pending)} component request(s) still pending")
    if not clean_end:
        blockers.append("stdout did not end cleanly on a frame boundary")
    if ending.exit_code != 0:
        # A kill that found the process already gone (exit 0 by itself) blocks nothing.
        if ending.host_kill is not None:
            blockers.append(f"the host killed the component ({ending.host_kill})")
        blockers.append(_exit_reason(ending))
    return blockers


def _premature_reasons(session: HostSession, ending: Ending) -> tuple[str, ...]:
    reasons = ["no root response"]
    if session.condition is not None:
        reasons.append(f"{session.condition} recorded before the end")
    if session.violation is not None:
        reasons.append(f"protocol violation: {session.violation}")
    if ending.host_kill is not None:
        reasons.append(f"the host killed the component ({ending.host_kill})")
    reasons.append(_exit_reason(ending))
    return tuple(reasons)


def _classify(
    session: HostSession,
    ending: Ending,
    response: RootResult | RootError | None,
    clean_end: bool,
) -> OperationError:
    details: dict[str, JSONValue] = {"exitCode": ending.exit_code}
    if ending.oom_killed:
        details["oom"] = True
    condition: Condition | None = session.condition
    if response is None and condition is not None and ending.host_kill is not None:
        # §11 premature termination, rule 1: a kill after a recorded condition ends the
        # Run with it, whatever the kill waited for (a condition is recorded only while
        # the run is open, so any kill comes after it).
        return OperationError(condition, _condition_message(condition), details)
    if session.violation is not None:
        # The reasons keep the whole violation; the message quoting the component is cut.
        return OperationError("PROTOCOL_ERROR", bounded_message(session.violation), details)
    if response is not None and session.pending:
        return OperationError(
            "PROTOCOL_ERROR", "root response with component requests pending", details
        )
    if response is not None and not clean_end:
        return OperationError("PROTOCOL_ERROR", "stdout did not end on a frame boundary", details)
    if response is not None and ending.host_kill == "post-response":
        return OperationError(
            "EXECUTION_FAILED", "the component did not exit after its response", details
        )
    if ending.exit_code not in (0, None) or ending.oom_killed:
        return OperationError("EXECUTION_FAILED", _exit_reason(ending), details)
    return OperationError(
        "CHANNEL_LOST", "the component ended without a complete root response", details
    )


def _condition_message(condition: Condition) -> str:
    if condition == "CANCELLED":
        return "the run was cancelled and the component was stopped"
    return "the deadline passed and the component was stopped"


def _exit_reason(ending: Ending) -> str:
    if ending.oom_killed:
        return f"the component ran out of memory (exit {ending.exit_code})"
    if ending.exit_code is None:
        return "the component's exit status is unknown"
    if ending.exit_code > 128:
        return f"component killed by signal {ending.exit_code - 128}"
    return f"component exited {ending.exit_code}"
