"""Where component requests go: the broker interface the driver dispatches to.

The driver has already checked the envelope, the params and admission; a broker only
decides what the call means (which child flow, which capability provider, which channel)
and either returns the method's success result or raises :class:`OperationError`. With no
host configuration nothing is admitted, which :class:`UnavailableBroker` expresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runner.json1 import JSONValue
from runner.protocol.codes import OperationError


@dataclass(frozen=True)
class CallContext:
    """What the broker may know about the calling invocation."""

    run_id: str
    deadline_unix_ms: int
    depth: int = 0


class Broker(Protocol):
    """Answers ``flow/run-child``, ``capability/call`` and ``channel/*`` requests."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        """Return the method's success result, or raise OperationError."""
        ...


class UnavailableBroker:
    """Admits nothing: every child run, capability call and channel is ``UNAVAILABLE``."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        what = {
            "flow/run-child": f"no child flow is admitted for slot {params.get('slot')!r}",
            "capability/call": f"no capability is bound to slot {params.get('slot')!r}",
        }.get(method, "the channels extension is not enabled on this host")
        raise OperationError("UNAVAILABLE", f"{what}: run with a host configuration")
