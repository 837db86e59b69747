"""Which failures are the infrastructure's, not the component's: the only ones batch retries
(the same invocation may succeed on the next attempt; a Run outcome or error is final)."""

from __future__ import annotations

from runner.api import Execution
from runner.sandbox.registry import SandboxEngine


def is_infrastructure_failure(outcome: Execution | BaseException, engine: SandboxEngine) -> bool:
    """True if ``outcome`` failed because of the engine, not the component: a report
    whose sandbox was lost under it (``report.lost``), an error the backend calls
    transient (not a missing image or a bad profile, which no retry fixes), or an
    exception group holding one."""
    if isinstance(outcome, Execution):
        return outcome.report.lost is not None
    if isinstance(outcome, BaseExceptionGroup):
        return any(is_infrastructure_failure(e, engine) for e in outcome.exceptions)
    return engine.transient(outcome)


def backoff(attempt: int, base: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: doubling from ``base``, capped."""
    return float(min(base * 2 ** (attempt - 1), 30.0))
