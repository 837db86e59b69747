"""The handler's view of its Run: the host's invocation values, calls and channels.

A :class:`RunContext` is the only way handler code reaches the host. Call arguments are
checked in the caller before anything is admitted: a malformed id, name, intent, channel
map or option, or an input outside JSON/1, raises ``ValueError`` (``JSON1Error`` is one)
and writes nothing. It is a programming error, so deliberately not an ``OperationError``
a handler might mistake for the host's answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal, cast, overload

from runner.component.calls import CallTable
from runner.component.channels import (
    BroadcastSource,
    ChannelEndpoint,
    ChannelPair,
    ChannelReceiver,
    Channels,
    ChannelSender,
)
from runner.component.messages import Root, parse_capability_result, parse_run_result
from runner.component.model import Attachment, Delivery, JSONObject, RunResult
from runner.json1 import JSONValue
from runner.protocol.names import (
    MAX_CHANNEL_ENTRIES,
    MAX_CONTRACT_PATH_CHARS,
    MAX_INTENT_SCALARS,
    is_local_name,
    is_wire_id,
)

ChannelMap = Mapping[str, str | ChannelEndpoint]
"""Callee port name → an endpoint of this Run, as an object or by its reference."""

_CONTRACT_PATH: Final = re.compile(r"\./[^\\]+")


class RunContext:
    """One Run's input, settings, attachments, channel grants, scratch and deadline."""

    __slots__ = ("_calls", "_channels", "_root")

    def __init__(self, root: Root, calls: CallTable, channels: Channels) -> None:
        self._root = root
        self._calls = calls
        self._channels = channels

    @property
    def input(self) -> JSONValue:
        """The invocation input, decoded from the request (treat it as read-only)."""
        return self._root.input

    @property
    def settings(self) -> JSONObject:
        """The complete settings object (treat it as read-only)."""
        return self._root.settings

    @property
    def attachments(self) -> Mapping[str, Attachment]:
        """Name → sandbox-local path and access; the sandbox, not the SDK, enforces access."""
        return MappingProxyType(self._root.attachments)

    @property
    def channels(self) -> JSONObject:
        """Port name → the grant object as the host sent it (read-only); :meth:`sender` and
        :meth:`receiver` give the endpoints to use."""
        return self._root.channels

    @property
    def scratch(self) -> str:
        """A private read-write directory for this Run."""
        return self._root.scratch

    @property
    def deadline_unix_ms(self) -> int:
        """When the host will stop this Run (UTC epoch ms); advisory, the host enforces it."""
        return self._root.deadline_unix_ms

    def sender(self, port: str) -> ChannelSender:
        """The writer the host granted for ``port`` (the same object every time);
        ``ValueError`` if it is a reader, ``KeyError`` if the port has no grant."""
        return self._channels.port(port, ChannelSender)

    def receiver(self, port: str) -> ChannelReceiver:
        """The reader the host granted for ``port``; ``ValueError`` if it is a writer."""
        return self._channels.port(port, ChannelReceiver)

    @overload
    async def channel(
        self,
        *,
        delivery: Literal["direct"] = "direct",
        schema: JSONObject | bool | None = None,
        contract: str | None = None,
    ) -> ChannelPair: ...

    @overload
    async def channel(
        self,
        *,
        delivery: Literal["broadcast"],
        schema: JSONObject | bool | None = None,
        contract: str | None = None,
    ) -> BroadcastSource: ...

    async def channel(
        self,
        *,
        delivery: Delivery = "direct",
        schema: JSONObject | bool | None = None,
        contract: str | None = None,
    ) -> ChannelPair | BroadcastSource:
        """Create a source owned by this Run (``channel/create``): ``direct`` gives a writer and
        its one reader, ``broadcast`` a writer and a source to :meth:`~BroadcastSource.subscribe`
        to. Items are any JSON/1 unless ``schema`` (a Schema/1 item schema) or ``contract`` (a
        ``./`` Channel Contract/1 descriptor), which exclude each other, constrain them. A pair
        nobody touches is released when the handler returns."""
        return await self._channels.create(delivery, _create_params(delivery, schema, contract))

    async def run_child_flow(
        self,
        *,
        operation_id: str,
        slot: str,
        input: JSONValue,
        intent: str | None = None,
        channels: ChannelMap | None = None,
    ) -> RunResult:
        """Run a child Flow through an admitted child slot and return its complete result;
        ``channels`` offers unused endpoints of this Run to the child's ports."""
        params = _call_params(operation_id, slot, input)
        if intent is not None:
            if not isinstance(intent, str) or not 1 <= len(intent) <= MAX_INTENT_SCALARS:
                raise ValueError("intent must be a string of 1–16,384 Unicode scalars")
            params["intent"] = intent
        self._map_channels(params, channels)
        result = await self._calls.call("flow/run-child", params, parse_run_result)
        return cast(RunResult, result)

    async def call_capability(
        self,
        *,
        operation_id: str,
        slot: str,
        method: str,
        input: JSONValue,
        channels: ChannelMap | None = None,
    ) -> JSONValue:
        """Call ``method`` through the capability slot ``slot`` and return its ``value`` (a declared
        application error raises :class:`CapabilityError`); ``channels`` offers unused endpoints
        of this Run to the method's ports."""
        params = _call_params(operation_id, slot, input)
        if not is_local_name(method):
            raise ValueError(f"method {method!r} is not a LocalName")
        params["method"] = method
        self._map_channels(params, channels)
        value = await self._calls.call("capability/call", params, parse_capability_result)
        return cast(JSONValue, value)

    def _map_channels(self, params: JSONObject, channels: ChannelMap | None) -> None:
        """Add the ``channels`` member last, once every other argument passed its checks."""
        if channels is None:
            return
        if len(channels) > MAX_CHANNEL_ENTRIES:
            raise ValueError(f"channels maps at most {MAX_CHANNEL_ENTRIES} ports")
        references: dict[str, str] = {}
        for port, endpoint in channels.items():
            reference = endpoint.reference if isinstance(endpoint, ChannelEndpoint) else endpoint
            if not is_local_name(port) or not is_wire_id(reference):
                raise ValueError(
                    f"channels entry {port!r}: {endpoint!r} is not LocalName → endpoint"
                )
            references[port] = reference
        self._channels.offer(list(references.values()))
        params["channels"] = JSONObject(references)


def _create_params(
    delivery: Delivery, schema: JSONObject | bool | None, contract: str | None
) -> JSONObject:
    """``channel/create`` params; the default (direct) delivery is left implicit."""
    params: JSONObject = {}
    if delivery == "broadcast":
        params["delivery"] = delivery
    elif delivery != "direct":
        raise ValueError(f'delivery must be "direct" or "broadcast", not {delivery!r}')
    if schema is not None and contract is not None:
        raise ValueError("schema and contract exclude each other")
    if schema is not None:
        if not isinstance(schema, dict | bool):
            raise ValueError("schema must be a Schema/1 object or a boolean")
        params["schema"] = schema
    if contract is not None:
        if (
            not isinstance(contract, str)
            or len(contract) > MAX_CONTRACT_PATH_CHARS
            or _CONTRACT_PATH.fullmatch(contract) is None
        ):
            raise ValueError(f"contract {contract!r} is not a package-local ./ path")
        params["contract"] = contract
    return params


def _call_params(operation_id: str, slot: str, input: JSONValue) -> JSONObject:
    if not is_wire_id(operation_id):
        raise ValueError(f"operation_id {operation_id!r} is not 1–128 ASCII of the id grammar")
    if not is_local_name(slot):
        raise ValueError(f"slot {slot!r} is not a LocalName")
    return {"operationId": operation_id, "slot": slot, "input": input}
