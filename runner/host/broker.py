"""Where component requests go: the broker interface the driver dispatches to.

The driver has already checked the envelope, params, admission and operation identity;
a broker only decides what the call means (which child flow, capability provider or
channel) and returns the method's success result or raises :class:`OperationError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from runner.contracts.ports import PortSpec
from runner.host.channels import ChannelParty, HostEndpoint
from runner.json1 import JSONValue
from runner.protocol.codes import LOCAL_CODES, OperationError, WireCode, bounded_message


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


class CapabilitySlot(Protocol):
    """A bound capability: answers with the capability/call result shape."""

    async def call(
        self, method: str, input: JSONValue, channels: Mapping[str, HostEndpoint] | None = None
    ) -> JSONValue:
        """``{"value": ...}`` or ``{"error": {"name", "data"}}``, or raise OperationError."""
        ...

    def channel_ports(self, method: str) -> dict[str, PortSpec] | None:
        """The method's declared ports (``None``: undeclared); raise if it takes none."""
        ...


RunChild = Callable[
    [str, JSONValue, CallContext, Mapping[str, str]], Awaitable[dict[str, JSONValue]]
]
"""Run the named flow as a child with this input and these channel rights (port → the
caller's endpoint token); its Run result, or OperationError."""


class UnavailableBroker:
    """Admits nothing: every child run, capability call and channel is ``UNAVAILABLE``."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        raise _unavailable(method, params, "run with a host configuration (--config)")


class ChildBudget:
    """Children running at once under one root run, across the whole tree."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0

    def __enter__(self) -> None:
        if self.running >= self.limit:
            raise OperationError(
                "RESOURCE_EXHAUSTED",
                f"{self.limit} child flows are already running under this root run",
            )
        self.running += 1

    def __exit__(self, *_: object) -> None:
        self.running -= 1


@dataclass(frozen=True, kw_only=True, eq=False)
class FlowBroker:
    """Routes one invocation's requests by the configuration of its flow."""

    children: Mapping[str, str]
    capabilities: Mapping[str, CapabilitySlot]
    run_child: RunChild
    budget: ChildBudget
    max_depth: int
    channels: ChannelParty | None = None
    """The calling invocation's channel table: where mapped rights move from."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        slot = params.get("slot")
        if method == "flow/run-child" and isinstance(slot, str) and slot in self.children:
            if call.depth + 1 >= self.max_depth:
                raise OperationError(
                    "RESOURCE_EXHAUSTED",
                    f"child flows may nest {self.max_depth} deep; slot {slot!r} would go deeper",
                )
            with self.budget:
                return await self.run_child(
                    self.children[slot], params["input"], call, _mapping(params)
                )
        if method == "capability/call" and isinstance(slot, str) and slot in self.capabilities:
            name = params["method"]
            assert isinstance(name, str)
            mapping = _mapping(params)
            binding = self.capabilities[slot]
            if not mapping:
                return await binding.call(name, params["input"])
            if self.channels is None:
                raise OperationError("UNAVAILABLE", "channels are not enabled for this run")
            callee = self.channels.hub.party(f"{call.run_id}/{slot}")
            grants = self.channels.transfer(mapping, binding.channel_ports(name), callee)
            ends = {port: HostEndpoint(callee, grant) for port, grant in grants.items()}  # type: ignore[arg-type]
            try:
                result = await binding.call(name, params["input"], ends)
            except BaseException:
                callee.conclude(OperationError("EXECUTION_FAILED", f"capability {slot!r} failed"))
                raise
            failed = isinstance(result, dict) and "error" in result
            callee.conclude(
                OperationError("EXECUTION_FAILED", f"capability {slot!r} answered an error")
                if failed
                else None
            )
            return result
        raise _unavailable(method, params, "the host configuration does not admit it")


def child_failure(error: OperationError, dispatched: int) -> OperationError:
    """What a parent sees when its child failed (PROTOCOL.md §5): wire codes pass through;
    a local one is ``EXECUTION_FAILED`` if the child dispatched nothing (it had no effects
    through us), else ``UNCERTAIN``."""
    if error.code not in LOCAL_CODES:
        return error
    code: WireCode = "UNCERTAIN" if dispatched else "EXECUTION_FAILED"
    details: dict[str, JSONValue] = {"child": error.code, "dispatched": dispatched}
    return OperationError(code, bounded_message(f"the child flow failed: {error.message}"), details)


def _mapping(params: Mapping[str, JSONValue]) -> dict[str, str]:
    """The call's ``channels`` map (port → endpoint token), shape-checked by the session."""
    channels = params.get("channels")
    if not isinstance(channels, dict):
        return {}
    return {port: token for port, token in channels.items() if isinstance(token, str)}


def _unavailable(method: str, params: dict[str, JSONValue], why: str) -> OperationError:
    slot = params.get("slot")
    what = {
        "flow/run-child": f"no child flow is admitted for slot {slot!r}",
        "capability/call": f"no capability is bound to slot {slot!r}",
    }.get(method, f"{method!r} is not brokered")
    return OperationError("UNAVAILABLE", f"{what}: {why}")
