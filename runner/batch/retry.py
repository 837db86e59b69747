"""Which failures are the infrastructure's, not the run's: the only ones batch retries.

A Run outcome or a Run error (EXECUTION_FAILED, DEADLINE_EXCEEDED, INVALID_INPUT, ...) is
the component's answer and final. An engine that went away, an API call that failed, a
container removed from outside mid-run is not the component's doing: the same
invocation may well succeed on the next attempt. All of that is decided here, in one
place, so a new classification (a run report that says "infrastructure") is one change.
"""

from __future__ import annotations

from runner.api import Execution
from runner.sandbox.registry import SandboxEngine


def is_infrastructure_failure(outcome: Execution | BaseException, engine: SandboxEngine) -> bool:
    """True if ``outcome`` failed because of the engine, not because of the component.

    Recognised: a judged execution whose report says the sandbox was lost under it
    (``report.lost``: the container removed from outside, or the engine gone; ``exec``
    exits 4 or 5 for those), and an error the engine's backend calls transient (an
    engine that does not answer or fails a call before the run; not a missing image or
    runtime, a bad profile or attachment, which no retry fixes). An exception group is
    infrastructure if any of its exceptions is. Any other judged execution is the
    component's own result.
    """
    if isinstance(outcome, Execution):
        return outcome.report.lost is not None
    if isinstance(outcome, BaseExceptionGroup):
        return any(is_infrastructure_failure(e, engine) for e in outcome.exceptions)
    return engine.transient(outcome)


def backoff(attempt: int, base: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: doubling from ``base``, capped."""
    return float(min(base * 2 ** (attempt - 1), 30.0))
