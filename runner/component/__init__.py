"""A standard-library-only SDK for writing FLOW Run/1 components (Run SDK/1, Python).

A component is a process that serves exactly one ``flow/run`` over stdin/stdout::

    from runner.component import RunContext, RunResult, handle

    async def run(ctx: RunContext) -> RunResult:
        return RunResult("done", {"echo": ctx.input})

    handle(run)

Channels (Run/1's extension) are objects: ``await ctx.channel()`` creates a direct
pair, ``ctx.sender(port)`` / ``ctx.receiver(port)`` wrap the grants the host sent::

    async with ctx.receiver("events") as events:
        async for value in events:
            ...

It imports only the standard library, ``runner.json1`` and ``runner.protocol`` (Run/1's
codes, names and message checks, the host's own, stdlib only too), so an image needs
nothing but ``runner/__init__.py``, ``runner/json1.py``, ``runner/protocol/`` and this
package. Nothing here exposes envelopes, request ids or pending tables: the wire belongs
to the SDK.
"""

from runner.component.channels import (
    BroadcastSource,
    ChannelEndpoint,
    ChannelPair,
    ChannelReceiver,
    ChannelSender,
)
from runner.component.context import RunContext
from runner.component.errors import CapabilityError, OperationError, OperationErrorCode
from runner.component.model import (
    Attachment,
    AttachmentAccess,
    ChannelContractIdentity,
    Delivery,
    JSONObject,
    ReleaseStatus,
    RunResult,
)
from runner.component.runtime import Handler, handle
from runner.json1 import JSONValue
from runner.protocol.codes import WireCode

__all__ = [
    "Attachment",
    "AttachmentAccess",
    "BroadcastSource",
    "CapabilityError",
    "ChannelContractIdentity",
    "ChannelEndpoint",
    "ChannelPair",
    "ChannelReceiver",
    "ChannelSender",
    "Delivery",
    "Handler",
    "JSONObject",
    "JSONValue",
    "OperationError",
    "OperationErrorCode",
    "ReleaseStatus",
    "RunContext",
    "RunResult",
    "WireCode",
    "handle",
]
