"""Run/1 messages from the component's side: parse what arrives, build what leaves.

Pure: JSON/1 values in, records or frame bytes out. What arrives is checked by the
protocol core, as the host checks what it receives; here checked values become records
and failures are decided as a *receiver of ``flow/run``* and *originator of calls*: a
malformed result, a standard JSON-RPC error or an unknown ``-32000`` code in reply to our
call is fatal without a reply (the peers disagree on Run/1); invalid ``flow/run`` params
earn a ``-32602`` and end the Run. History checks live in ``channels.py``.

Outbound calls are encoded at admission (:class:`PreparedRequest`): that snapshots the
caller's values and proves the frame JSON/1, so a bad argument fails in the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, cast

from runner import json1
from runner.component.errors import CapabilityError, OperationError, protocol_error
from runner.component.model import (
    Attachment,
    AttachmentAccess,
    ChannelContractIdentity,
    Delivery,
    JSONObject,
    ReleaseStatus,
    RunResult,
)
from runner.json1 import JSONValue
from runner.protocol.builders import cancel_notification, error_response
from runner.protocol.codes import (
    MAX_ERROR_MESSAGE_SCALARS,
    OPERATIONAL,
    WireCode,
    is_wire_code,
)
from runner.protocol.envelope import ErrorResponse
from runner.protocol.frames import MAX_PAYLOAD_BYTES
from runner.protocol.names import (
    CHANNEL_CREATE,
    CHANNEL_NEXT,
    CHANNEL_RELEASE,
    CHANNEL_SEND,
    CHANNEL_SUBSCRIBE,
    FLOW_RUN,
    JSONRPC_VERSION,
    is_local_name,
)
from runner.protocol.params import validate_params
from runner.protocol.results import (
    validate_capability_result,
    validate_channel_result,
    validate_run_result,
)

COMPONENT_ID_PREFIX: Final = "component:"


class InvalidParams(ValueError):
    """Known method, invalid params: the receiver answers ``-32602``."""


@dataclass(frozen=True, slots=True)
class Grant:
    """One endpoint grant (§7.1); ``start_sequence`` is set for receivers and only for them."""

    endpoint: str
    direction: Literal["send", "receive"]
    delivery: Delivery
    contract: ChannelContractIdentity | None
    start_sequence: int | None


@dataclass(frozen=True, slots=True)
class Root:
    """The validated params of the one ``flow/run``; ``grants`` is ``channels`` checked."""

    input: JSONValue
    settings: JSONObject
    attachments: dict[str, Attachment]
    scratch: str
    deadline_unix_ms: int
    channels: JSONObject
    grants: dict[str, Grant]


@dataclass(frozen=True, slots=True)
class Item:
    """A ``channel/next`` item."""

    sequence: int
    value: JSONValue


@dataclass(frozen=True, slots=True)
class End:
    """A ``channel/next`` clean end."""

    last_sequence: int


# --- inbound ---------------------------------------------------------------------------


def parse_root(params: JSONValue) -> Root:
    """Validate ``flow/run`` params exactly (§4), as the host does; raise :class:`InvalidParams`."""
    reason = validate_params(FLOW_RUN, params)
    if reason is not None:
        raise InvalidParams(reason)
    fields = cast(JSONObject, params)
    attachments = cast(dict[str, JSONObject], fields["attachments"])
    channels = cast(JSONObject, fields.get("channels", {}))
    return Root(
        input=fields["input"],
        settings=cast(JSONObject, fields["settings"]),
        attachments={
            name: Attachment(cast(str, entry["path"]), cast(AttachmentAccess, entry["access"]))
            for name, entry in attachments.items()
        },
        scratch=cast(str, fields["scratch"]),
        deadline_unix_ms=int(cast(float, fields["deadlineUnixMs"])),
        channels=channels,
        grants={name: _grant(grant) for name, grant in channels.items()},
    )


def _grant(value: JSONValue) -> Grant:
    """A checked endpoint grant (§7.1) as a record."""
    grant = cast(JSONObject, value)
    contract = cast("dict[str, str] | None", grant.get("contract"))
    start = grant.get("startSequence")
    return Grant(
        cast(str, grant["endpoint"]),
        cast(Literal["send", "receive"], grant["direction"]),
        cast(Delivery, grant["delivery"]),
        None
        if contract is None
        else ChannelContractIdentity(contract["id"], contract["version"], contract["digest"]),
        None if start is None else int(cast(float, start)),
    )


def operation_error(response: ErrorResponse) -> OperationError:
    """The ``-32000`` reply to one of our calls (checked by the envelope step); a standard
    JSON-RPC error is fatal (§1, §9)."""
    if response.code != OPERATIONAL:
        raise protocol_error(f"the host answered a call with JSON-RPC error {response.code}")
    data = cast(JSONObject, response.error["data"])
    return OperationError(cast(WireCode, data["code"]), response.message, data.get("details"))


def parse_run_result(result: JSONValue) -> RunResult:
    """A child Run's result: exactly ``{outcome, output}`` with a LocalName outcome."""
    _check(validate_run_result(result), "a child result")
    fields = cast(JSONObject, result)
    return RunResult(cast(str, fields["outcome"]), fields["output"])


def parse_capability_result(result: JSONValue) -> JSONValue | CapabilityError:
    """``{value}`` → the value; ``{error: {name, data}}`` → a :class:`CapabilityError`."""
    _check(validate_capability_result(result), "a capability result")
    fields = cast(JSONObject, result)
    if "value" in fields:
        return fields["value"]
    error = cast(JSONObject, fields["error"])
    return CapabilityError(cast(str, error["name"]), error["data"])


def parse_null(result: JSONValue) -> None:
    """``channel/send`` and ``channel/close`` answer exactly ``null``."""
    _channel_result(CHANNEL_SEND, result)


def parse_pair(result: JSONValue) -> tuple[Grant, Grant]:
    """A direct ``channel/create`` result: a writer and its one reader, told apart (§7.2)."""
    fields = _channel_result(CHANNEL_CREATE, result)
    if "receive" not in fields:
        raise protocol_error("a direct channel/create was answered with a broadcast result")
    send, receive = _grant(fields["send"]), _grant(fields["receive"])
    if send.endpoint == receive.endpoint:
        raise protocol_error("a created writer and reader share one endpoint reference")
    if send.contract != receive.contract:
        raise protocol_error("a created writer and reader carry different contracts")
    return send, receive


def parse_broadcast(result: JSONValue) -> tuple[Grant, str]:
    """A broadcast ``channel/create`` result: the writer and the opaque source reference."""
    fields = _channel_result(CHANNEL_CREATE, result)
    if "source" not in fields:
        raise protocol_error("a broadcast channel/create was answered with a direct pair")
    return _grant(fields["send"]), cast(str, fields["source"])


def parse_subscription(result: JSONValue) -> Grant:
    """A ``channel/subscribe`` result: one broadcast receiver grant."""
    return _grant(_channel_result(CHANNEL_SUBSCRIBE, result))


def parse_next(result: JSONValue) -> Item | End:
    """A ``channel/next`` result: an ``item`` or an ``end`` (§7.2); whether the sequence
    fits the history is the receiver's check."""
    fields = _channel_result(CHANNEL_NEXT, result)
    if "item" in fields:
        item = cast(JSONObject, fields["item"])
        return Item(int(cast(float, item["sequence"])), item["value"])
    end = cast(JSONObject, fields["end"])
    return End(int(cast(float, end["lastSequence"])))


def parse_release(result: JSONValue) -> ReleaseStatus:
    """A ``channel/release`` result: ``released``, ``ended`` with a sequence, or ``failed``."""
    fields = _channel_result(CHANNEL_RELEASE, result)
    if fields["status"] == "ended":
        return ReleaseStatus("ended", last_sequence=int(cast(float, fields["lastSequence"])))
    if fields["status"] == "failed":
        code = cast(WireCode, fields["code"])
        return ReleaseStatus("failed", code=code, details=fields.get("details"))
    return ReleaseStatus("released")


def _channel_result(method: str, result: JSONValue) -> JSONObject:
    """``result`` once the protocol core found it a valid answer to ``method``."""
    _check(validate_channel_result(method, result), f"a {method} result")
    return cast(JSONObject, result)


def _check(reason: str | None, what: str) -> None:
    """A host result that breaks Run/1 ends the channel, with no reply (§1)."""
    if reason is not None:
        raise protocol_error(f"{what}: {reason}")


# --- outbound --------------------------------------------------------------------------


class PreparedRequest:
    """One admitted call, encoded once around a placeholder id (before ``params``, at most 4
    bytes shorter than a real one, which the size check allows for); :meth:`frame` puts
    the wire id in at send time."""

    __slots__ = ("_head", "_tail")

    _PLACEHOLDER: Final = f"{COMPONENT_ID_PREFIX}0"
    _ID_GROWTH: Final = len("65536") - len("0")

    def __init__(self, method: str, params: JSONObject) -> None:
        placeholder = self._PLACEHOLDER
        frame = json1.dumps(
            {"jsonrpc": JSONRPC_VERSION, "id": placeholder, "method": method, "params": params}
        )
        if len(frame) + self._ID_GROWTH > MAX_PAYLOAD_BYTES:
            raise ValueError(f"the {method} request would exceed the 16 MiB frame limit")
        self._head, _, self._tail = frame.partition(f'"{self._PLACEHOLDER}"'.encode())

    def frame(self, wire_id: str) -> bytes:
        return b"".join((self._head, b'"', wire_id.encode("ascii"), b'"', self._tail))


def cancel_frame(request_id: str) -> bytes:
    return json1.dumps(cancel_notification(request_id))


def standard_error_frame(request_id: str, code: int, message: str) -> bytes:
    return json1.dumps(error_response(request_id, code, message[:MAX_ERROR_MESSAGE_SCALARS]))


def result_frame(root_id: str, result: object) -> bytes:
    """The root success response; ``ValueError`` if ``result`` is not a valid Run result."""
    outcome, output = _result_members(result)
    if not is_local_name(outcome):
        raise ValueError(f"the outcome {outcome!r} is not a LocalName")
    result_member: JSONObject = {"outcome": outcome, "output": output}
    return _encode({"jsonrpc": JSONRPC_VERSION, "id": root_id, "result": result_member})


def _result_members(result: object) -> tuple[object, JSONValue]:
    if isinstance(result, RunResult):
        return result.outcome, result.output
    if isinstance(result, Mapping) and result.keys() == {"outcome", "output"}:
        return result["outcome"], result["output"]
    raise ValueError("a handler must return a RunResult or a mapping of exactly outcome and output")


def operation_error_frame(root_id: str, error: OperationError) -> bytes:
    """The root ``-32000`` response; ``ValueError`` if ``error`` cannot travel as is."""
    if not is_wire_code(error.code):
        raise ValueError(f"{error.code!r} is not a wire code")
    message = error.message
    if not isinstance(message, str) or not 1 <= len(message) <= MAX_ERROR_MESSAGE_SCALARS:
        raise ValueError("an error message must hold 1–1,024 Unicode scalars")
    data: JSONObject = {"code": error.code}
    if error.details is not None:
        data["details"] = error.details
    error_member: JSONObject = {"code": OPERATIONAL, "message": message, "data": data}
    return _encode({"jsonrpc": JSONRPC_VERSION, "id": root_id, "error": error_member})


def _encode(message: JSONObject) -> bytes:
    frame = json1.dumps(message)
    if len(frame) > MAX_PAYLOAD_BYTES:
        raise ValueError("the frame would exceed the 16 MiB limit")
    return frame
