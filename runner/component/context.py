"""The handler's view of its Run: the host's invocation values and the two call methods.

A :class:`RunContext` is built by the runtime from validated ``flow/run`` params and
is the only way handler code reaches the host. Call arguments are checked here, in
the caller, before anything is admitted: a malformed id, name, intent or channel map,
or an input outside JSON/1, raises ``ValueError`` (``runner.json1.JSON1Error`` is one)
and writes nothing. That is a programming error, so it is deliberately not an
``OperationError`` a handler might mistake for the host's answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import cast

from runner.component.calls import Parser
from runner.component.messages import Root, parse_capability_result, parse_run_result
from runner.component.model import (
    MAX_INTENT_SCALARS,
    MAX_MAP_ENTRIES,
    Attachment,
    JSONObject,
    RunResult,
    is_local_name,
    is_wire_id,
)
from runner.json1 import JSONValue

Invoke = Callable[[str, JSONObject, Parser], Awaitable[object]]
"""Sends one request (method, params) and returns the parsed reply."""


class RunContext:
    """One Run's input, settings, attachments, channel grants, scratch and deadline."""

    __slots__ = ("_invoke", "_root")

    def __init__(self, root: Root, invoke: Invoke) -> None:
        self._root = root
        self._invoke = invoke

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
        """Port name → the endpoint grant object exactly as the host sent it (read-only)."""
        return self._root.channels

    @property
    def scratch(self) -> str:
        """A private read-write directory for this Run."""
        return self._root.scratch

    @property
    def deadline_unix_ms(self) -> int:
        """When the host will stop this Run (UTC epoch ms); advisory, the host enforces it."""
        return self._root.deadline_unix_ms

    async def run_child_flow(
        self,
        *,
        operation_id: str,
        slot: str,
        input: JSONValue,
        intent: str | None = None,
        channels: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run a child Flow through an admitted child slot and return its complete result."""
        params = _call_params(operation_id, slot, input, channels)
        if intent is not None:
            if not isinstance(intent, str) or not 1 <= len(intent) <= MAX_INTENT_SCALARS:
                raise ValueError("intent must be a string of 1–16,384 Unicode scalars")
            params["intent"] = intent
        result = await self._invoke("flow/run-child", params, parse_run_result)
        return cast(RunResult, result)

    async def call_capability(
        self,
        *,
        operation_id: str,
        slot: str,
        method: str,
        input: JSONValue,
        channels: Mapping[str, str] | None = None,
    ) -> JSONValue:
        """Call ``method`` through the capability slot ``slot``; return its ``value``.

        A declared application error raises :class:`CapabilityError`.
        """
        params = _call_params(operation_id, slot, input, channels)
        if not is_local_name(method):
            raise ValueError(f"method {method!r} is not a LocalName")
        params["method"] = method
        value = await self._invoke("capability/call", params, parse_capability_result)
        return cast(JSONValue, value)


def _call_params(
    operation_id: str, slot: str, input: JSONValue, channels: Mapping[str, str] | None
) -> JSONObject:
    if not is_wire_id(operation_id):
        raise ValueError(f"operation_id {operation_id!r} is not 1–128 ASCII of the id grammar")
    if not is_local_name(slot):
        raise ValueError(f"slot {slot!r} is not a LocalName")
    params: JSONObject = {"operationId": operation_id, "slot": slot, "input": input}
    if channels is not None:
        params["channels"] = _channel_references(channels)
    return params


def _channel_references(channels: Mapping[str, str]) -> JSONObject:
    if len(channels) > MAX_MAP_ENTRIES:
        raise ValueError(f"channels maps at most {MAX_MAP_ENTRIES} ports")
    for port, endpoint in channels.items():
        if not is_local_name(port) or not is_wire_id(endpoint):
            raise ValueError(f"channels entry {port!r}: {endpoint!r} is not LocalName → reference")
    return dict(channels)
