"""Which failures are the infrastructure's, not the run's: the only ones batch retries.

A Run outcome or a Run error (EXECUTION_FAILED, DEADLINE_EXCEEDED, INVALID_INPUT, ...) is
the component's answer and final. An engine that went away, an API call that failed, a
container removed from outside mid-run is not the component's doing: the same
invocation may well succeed on the next attempt. All of that is decided here, in one
place, so a new classification (a run report that says "infrastructure") is one change.
"""

from __future__ import annotations

from runner.api import Execution
from runner.sandbox.attachments import AttachmentError
from runner.sandbox.errors import (
    CommandNotFound,
    FilesTooLarge,
    ImageMissing,
    RuntimeMissing,
    SandboxError,
)
from runner.sandbox.profiles import ProfileError
from runner.sandbox.registry import BackendUnknown

_NOT_INFRASTRUCTURE = (
    ImageMissing,
    RuntimeMissing,
    CommandNotFound,
    AttachmentError,
    ProfileError,
    FilesTooLarge,
    BackendUnknown,
)
"""Sandbox errors that the same invocation meets again every time: final."""


def is_infrastructure_failure(outcome: Execution | BaseException) -> bool:
    """True if ``outcome`` failed because of the engine, not because of the component.

    Recognised: a judged execution whose report says the sandbox was lost under it
    (``report.lost``: the container removed from outside, or the engine gone; ``exec``
    exits 4 or 5 for those), the sandbox errors of an engine that does not answer or
    fails an API call before the run (``EngineUnavailable``, ``DockerSandboxError``; not
    a missing image or runtime, which no retry fixes), docker-py's API errors, and
    connection errors of docker-py's HTTP transport (the engine restarting). An
    exception group is infrastructure if any of its exceptions is. Any other judged
    execution is the component's own result.
    """
    if isinstance(outcome, Execution):
        return outcome.report.lost is not None
    if isinstance(outcome, BaseExceptionGroup):
        return any(is_infrastructure_failure(e) for e in outcome.exceptions)
    if isinstance(outcome, SandboxError):
        return not isinstance(outcome, _NOT_INFRASTRUCTURE)
    import docker.errors
    import requests.exceptions

    if isinstance(outcome, docker.errors.ImageNotFound):
        return False
    return isinstance(
        outcome,
        docker.errors.APIError
        | requests.exceptions.ConnectionError
        | requests.exceptions.Timeout
        | ConnectionError,
    )


def backoff(attempt: int, base: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: doubling from ``base``, capped."""
    return float(min(base * 2 ** (attempt - 1), 30.0))
