"""What the host hands out of the hub: an invocation's admission, a provider's endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from runner.contracts.ports import PortSpec, check_required
from runner.host.channels.party import ChannelParty
from runner.json1 import JSONValue


@dataclass
class ChannelOffer:
    """The channel side of admitting one invocation: its own table, and the rights
    ``mapping`` (port → token) moves from the caller ``giver`` (``None`` for a root run)."""

    party: ChannelParty
    giver: ChannelParty | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)

    def admit(self, ports: Mapping[str, PortSpec] | None) -> dict[str, JSONValue]:
        """Move the mapped rights into :attr:`party` and return its grants, or raise."""
        if self.giver is None:
            check_required(ports, {})
            return {}
        return self.giver.transfer(self.mapping, ports, self.party)


class HostEndpoint:
    """An endpoint as an in-process capability provider holds it, one per port of a
    ``capability/call``'s ``channels`` map: ``await send(v)`` / ``close()`` on a writer,
    ``async for v in`` (or ``next()``) and ``release()`` on a receiver."""

    def __init__(self, party: ChannelParty, grant: Mapping[str, JSONValue]) -> None:
        self._party = party
        self.token = str(grant["endpoint"])
        self.direction = grant["direction"]
        self.delivery = grant["delivery"]
        self.start_sequence = grant.get("startSequence")

    async def send(self, value: JSONValue) -> None:
        await self._party.send(self.token, value)

    async def close(self) -> None:
        self._party.close(self.token)

    async def next(self) -> dict[str, JSONValue]:
        """``{"item": {"sequence", "value"}}`` or ``{"end": {"lastSequence"}}``."""
        return await self._party.next(self.token)

    async def release(self) -> dict[str, JSONValue]:
        return self._party.release(self.token)

    def __aiter__(self) -> HostEndpoint:
        return self

    async def __anext__(self) -> JSONValue:
        answer = await self.next()
        item = answer.get("item")
        if not isinstance(item, dict):
            raise StopAsyncIteration
        return item["value"]
