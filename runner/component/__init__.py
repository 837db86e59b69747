"""A standard-library-only SDK for writing FLOW Run/1 components (Run SDK/1, Python).

A component is a process that serves exactly one ``flow/run`` over stdin/stdout::

    from runner.component import RunContext, RunResult, handle

    async def run(ctx: RunContext) -> RunResult:
        return RunResult("done", {"echo": ctx.input})

    handle(run)

It imports only the standard library and ``runner.json1``, so an image needs nothing
but ``runner/__init__.py``, ``runner/json1.py`` and this package. Nothing here exposes
envelopes, request ids or pending tables: the wire belongs to the SDK.
"""

from runner.component.context import RunContext
from runner.component.errors import CapabilityError, OperationError, OperationErrorCode, WireCode
from runner.component.model import Attachment, AttachmentAccess, JSONObject, RunResult
from runner.component.runtime import Handler, handle
from runner.json1 import JSONValue

__all__ = [
    "Attachment",
    "AttachmentAccess",
    "CapabilityError",
    "Handler",
    "JSONObject",
    "JSONValue",
    "OperationError",
    "OperationErrorCode",
    "RunContext",
    "RunResult",
    "WireCode",
    "handle",
]
