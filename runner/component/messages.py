"""Run/1 messages from the component's side: parse what arrives, build what leaves.

Everything here is pure: JSON/1 values in, typed records or frame bytes out. Frames
and envelopes are checked by the protocol core, as the host checks them
(:mod:`runner.protocol.frames`, :mod:`runner.protocol.envelope`); what follows are the
closed shapes of PROTOCOL.md §4–§7 and §9–§10 as a *receiver of ``flow/run``* and
*originator of calls* applies them:

- a malformed result, a standard JSON-RPC error, or an unknown ``-32000`` code in
  reply to one of our calls is fatal without a reply (the peers disagree on Run/1);
- invalid ``flow/run`` params are *not* fatal: they earn a ``-32602`` and end the Run.

Endpoint grants arrive both in ``flow/run`` params and in channel results, so one
checker (:func:`parse_grant`) serves both and raises a plain ``ValueError``; each
caller decides whether that means ``-32602`` or a fatal host violation. The channel
result parsers check shapes only; what depends on a receiver's history (contiguous
sequences, a consistent end) is checked in ``channels.py``.

Outbound calls are encoded once, at admission (:class:`PreparedRequest`): that both
snapshots the caller's values and proves the whole frame is JSON/1 before anything is
queued, so a bad argument fails in the caller and never reaches the wire.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Final, Literal, cast

from runner import json1
from runner.component.errors import CapabilityError, OperationError, protocol_error
from runner.component.model import (
    MAX_FRAME_BYTES,
    Attachment,
    AttachmentAccess,
    ChannelContractIdentity,
    Delivery,
    JSONObject,
    ReleaseStatus,
    RunResult,
)
from runner.json1 import MAX_SAFE_INTEGER, JSONValue
from runner.protocol.codes import (
    MAX_ERROR_MESSAGE_SCALARS,
    OPERATIONAL,
    WireCode,
    is_wire_code,
)
from runner.protocol.envelope import ErrorResponse
from runner.protocol.names import (
    JSONRPC_VERSION,
    MAX_ATTACHMENTS,
    REQUEST_CANCEL,
    RUN_PROTOCOL,
    is_local_name,
    is_wire_id,
)
from runner.protocol.shapes import is_integer_in

COMPONENT_ID_PREFIX: Final = "component:"

_ROOT_REQUIRED: Final = frozenset(
    {"protocol", "input", "settings", "attachments", "scratch", "deadlineUnixMs"}
)
_CONTRACT_ID: Final = re.compile(
    r"https://(?!(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])(?:/|$))"
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+"
    r"/(?!\.{1,2}(?:/|$))[a-z0-9._~-]+(?:/(?!\.{1,2}(?:/|$))[a-z0-9._~-]+)*"
)
_SEMVER: Final = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")


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
    """Validate ``flow/run`` params exactly (§4); raise :class:`InvalidParams`."""
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object")
    _require_members(params, _ROOT_REQUIRED, _ROOT_REQUIRED | {"channels"}, "params")
    if params["protocol"] != RUN_PROTOCOL:
        raise InvalidParams('protocol must be "run/1"')
    settings = params["settings"]
    if not isinstance(settings, dict):
        raise InvalidParams("settings must be an object")
    scratch = params["scratch"]
    if not isinstance(scratch, str) or not scratch:
        raise InvalidParams("scratch must be a nonempty string")
    deadline = params["deadlineUnixMs"]
    if not is_integer_in(deadline, 0, MAX_SAFE_INTEGER):
        raise InvalidParams("deadlineUnixMs must be an integer in 0…2^53−1")
    channels = _local_name_map(params.get("channels", {}), "channels")
    return Root(
        input=params["input"],
        settings=settings,
        attachments=_parse_attachments(params["attachments"]),
        scratch=scratch,
        deadline_unix_ms=int(cast(float, deadline)),
        channels=channels,
        grants=_parse_grants(channels),
    )


def _parse_attachments(value: JSONValue) -> dict[str, Attachment]:
    entries = _local_name_map(value, "attachments")
    attachments: dict[str, Attachment] = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise InvalidParams(f"attachment {name!r} must be an object")
        _require_members(entry, {"path", "access"}, {"path", "access"}, f"attachment {name!r}")
        path, access = entry["path"], entry["access"]
        if not isinstance(path, str) or not path:
            raise InvalidParams(f"attachment {name!r} path must be a nonempty string")
        if access not in ("read", "read-write"):
            raise InvalidParams(f'attachment {name!r} access must be "read" or "read-write"')
        attachments[name] = Attachment(path, cast(AttachmentAccess, access))
    return attachments


def _parse_grants(channels: JSONObject) -> dict[str, Grant]:
    try:
        grants = {
            name: parse_grant(grant, f"channel grant {name!r}") for name, grant in channels.items()
        }
    except ValueError as error:
        raise InvalidParams(str(error)) from None
    if len({grant.endpoint for grant in grants.values()}) != len(grants):
        raise InvalidParams("two channel grants share one endpoint reference")
    return grants


def parse_grant(value: JSONValue, where: str) -> Grant:
    """Check one endpoint grant (§7.1); ``ValueError`` says what is wrong with it."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    direction = value.get("direction")
    if direction != "send" and direction != "receive":
        raise ValueError(f'{where} direction must be "send" or "receive"')
    required = {"endpoint", "direction", "delivery"}
    if direction == "receive":
        required.add("startSequence")
    _require_members(value, required, required | {"contract"}, where)
    endpoint, delivery = value["endpoint"], value["delivery"]
    if not is_wire_id(endpoint):
        raise ValueError(f"{where} endpoint is not a Run/1 reference")
    if delivery != "direct" and delivery != "broadcast":
        raise ValueError(f'{where} delivery must be "direct" or "broadcast"')
    start = value.get("startSequence")
    if direction == "receive" and (
        not is_integer_in(start, 1, MAX_SAFE_INTEGER) or (delivery == "direct" and start != 1)
    ):
        raise ValueError(f"{where} startSequence is out of range")
    contract = _contract_identity(value["contract"], where) if "contract" in value else None
    return Grant(
        endpoint,
        cast(Literal["send", "receive"], direction),
        cast(Delivery, delivery),
        contract,
        None if start is None else int(cast(float, start)),
    )


def _contract_identity(value: JSONValue, where: str) -> ChannelContractIdentity:
    if not isinstance(value, dict):
        raise ValueError(f"{where} contract must be an object")
    members = {"id", "version", "digest"}
    _require_members(value, members, members, f"{where} contract")
    checks = ((_CONTRACT_ID, "id"), (_SEMVER, "version"), (_DIGEST, "digest"))
    for pattern, member in checks:
        text = value[member]
        if not isinstance(text, str) or pattern.fullmatch(text) is None:
            raise ValueError(f"{where} contract {member} is malformed")
    return ChannelContractIdentity(*(cast(str, value[member]) for _, member in checks))


def _local_name_map(value: JSONValue, what: str) -> JSONObject:
    if not isinstance(value, dict) or len(value) > MAX_ATTACHMENTS:
        raise InvalidParams(f"{what} must be an object of at most {MAX_ATTACHMENTS} entries")
    for name in value:
        if not is_local_name(name):
            raise InvalidParams(f"{what} key {name!r} is not a LocalName")
    return value


def _require_members(
    value: Mapping[str, object],
    required: set[str] | frozenset[str],
    allowed: set[str] | frozenset[str],
    where: str,
) -> None:
    missing = required - value.keys()
    unknown = value.keys() - allowed
    if missing or unknown:
        raise InvalidParams(f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)}")


def operation_error(response: ErrorResponse) -> OperationError:
    """The ``-32000`` reply to one of our calls; a standard JSON-RPC error is fatal (§1, §9).

    The envelope step has checked the error object (its message, and for ``-32000`` a
    wire code in ``data``).
    """
    if response.code != OPERATIONAL:
        raise protocol_error(f"the host answered a call with JSON-RPC error {response.code}")
    data = cast(JSONObject, response.error["data"])
    return OperationError(cast(WireCode, data["code"]), response.message, data.get("details"))


def parse_run_result(result: JSONValue) -> RunResult:
    """A child Run's result: exactly ``{outcome, output}`` with a LocalName outcome."""
    if not isinstance(result, dict) or result.keys() != {"outcome", "output"}:
        raise protocol_error("a child result is not exactly {outcome, output}")
    outcome = result["outcome"]
    if not is_local_name(outcome):
        raise protocol_error("a child result outcome is not a LocalName")
    return RunResult(outcome, result["output"])


def parse_capability_result(result: JSONValue) -> JSONValue | CapabilityError:
    """``{value}`` → the value; ``{error: {name, data}}`` → a :class:`CapabilityError`."""
    if isinstance(result, dict) and result.keys() == {"value"}:
        return result["value"]
    if not isinstance(result, dict) or result.keys() != {"error"}:
        raise protocol_error("a capability result is not exactly {value} or {error}")
    error = result["error"]
    if not isinstance(error, dict) or error.keys() != {"name", "data"}:
        raise protocol_error("a capability error is not exactly {name, data}")
    name = error["name"]
    if not is_local_name(name):
        raise protocol_error("a capability error name is not a LocalName")
    return CapabilityError(name, error["data"])


def parse_null(result: JSONValue) -> None:
    """``channel/send`` and ``channel/close`` answer exactly ``null``."""
    if result is not None:
        raise protocol_error("a channel/send or channel/close result is not null")


def parse_pair(result: JSONValue) -> tuple[Grant, Grant]:
    """A direct ``channel/create`` result: a writer and its one reader, told apart (§7.2)."""
    members = _exact_members(result, {"send", "receive"}, "a direct channel/create result")
    send = _host_grant(members["send"], "the created writer", "send", "direct")
    receive = _host_grant(members["receive"], "the created reader", "receive", "direct")
    if send.endpoint == receive.endpoint:
        raise protocol_error("a created writer and reader share one endpoint reference")
    if send.contract != receive.contract:
        raise protocol_error("a created writer and reader carry different contracts")
    return send, receive


def parse_broadcast(result: JSONValue) -> tuple[Grant, str]:
    """A broadcast ``channel/create`` result: the writer and the opaque source reference."""
    members = _exact_members(result, {"send", "source"}, "a broadcast channel/create result")
    send = _host_grant(members["send"], "the created writer", "send", "broadcast")
    source = members["source"]
    if not is_wire_id(source):
        raise protocol_error("a created source reference is not a Run/1 reference")
    return send, source


def parse_subscription(result: JSONValue) -> Grant:
    """A ``channel/subscribe`` result: one broadcast receiver grant."""
    return _host_grant(result, "a subscription", "receive", "broadcast")


def parse_next(result: JSONValue) -> Item | End:
    """A ``channel/next`` result: exactly an ``item`` or an ``end`` (§7.2).

    Whether the sequence fits the receiver's history is the receiver's check.
    """
    if isinstance(result, dict) and result.keys() == {"item"}:
        item = _exact_members(result["item"], {"sequence", "value"}, "a channel item")
        return Item(_sequence(item["sequence"], 1), item["value"])
    end = _exact_members(result, {"end"}, "a channel/next result")
    last = _exact_members(end["end"], {"lastSequence"}, "a channel end")["lastSequence"]
    return End(_sequence(last, 0))


def parse_release(result: JSONValue) -> ReleaseStatus:
    """A ``channel/release`` result: ``released``, ``ended`` with a sequence, or ``failed``."""
    status = result.get("status") if isinstance(result, dict) else None
    if status == "released":
        _exact_members(result, {"status"}, "a released status")
        return ReleaseStatus("released")
    if status == "ended":
        ended = _exact_members(result, {"status", "lastSequence"}, "an ended status")
        return ReleaseStatus("ended", last_sequence=_sequence(ended["lastSequence"], 0))
    if status == "failed":
        failed = _exact_members(result, {"status", "code"}, "a failed status", {"details"})
        code = failed["code"]
        if not is_wire_code(code):
            raise protocol_error(f"a failed release carries the unknown code {code!r}")
        return ReleaseStatus("failed", code=cast(WireCode, code), details=failed.get("details"))
    raise protocol_error("a channel/release result has no known status")


def _host_grant(
    value: JSONValue, where: str, direction: Literal["send", "receive"], delivery: Delivery
) -> Grant:
    """A grant the host minted in a result; a malformed or unexpected one is fatal."""
    try:
        grant = parse_grant(value, where)
    except ValueError as error:
        raise protocol_error(str(error)) from None
    if grant.direction != direction or grant.delivery != delivery:
        raise protocol_error(f"{where} is not a {delivery} {direction} grant")
    return grant


def _exact_members(
    value: JSONValue, required: set[str], where: str, optional: Set[str] = frozenset()
) -> JSONObject:
    if not isinstance(value, dict) or not required <= value.keys() <= required | optional:
        raise protocol_error(f"{where} does not have exactly the members {sorted(required)}")
    return value


def _sequence(value: JSONValue, minimum: int) -> int:
    if not is_integer_in(value, minimum, MAX_SAFE_INTEGER):
        raise protocol_error(f"a channel sequence is not an integer in {minimum}…2^53−1")
    return int(cast(float, value))


# --- outbound --------------------------------------------------------------------------


class PreparedRequest:
    """One admitted call, encoded at admission; :meth:`frame` adds the wire id at send time.

    The frame is encoded once with a placeholder id that comes before ``params`` in the
    object, then split around it. The real id (``component:N``, N ≤ 65,536) is at most
    4 bytes longer than the placeholder, which the size check allows for.
    """

    __slots__ = ("_head", "_tail")

    _PLACEHOLDER: Final = f"{COMPONENT_ID_PREFIX}0"
    _ID_GROWTH: Final = len("65536") - len("0")

    def __init__(self, method: str, params: JSONObject) -> None:
        placeholder = self._PLACEHOLDER
        frame = json1.dumps(
            {"jsonrpc": JSONRPC_VERSION, "id": placeholder, "method": method, "params": params}
        )
        if len(frame) + self._ID_GROWTH > MAX_FRAME_BYTES:
            raise ValueError(f"the {method} request would exceed the 16 MiB frame limit")
        self._head, _, self._tail = frame.partition(f'"{self._PLACEHOLDER}"'.encode())

    def frame(self, wire_id: str) -> bytes:
        return b"".join((self._head, b'"', wire_id.encode("ascii"), b'"', self._tail))


def cancel_frame(request_id: str) -> bytes:
    return _encode(
        {"jsonrpc": JSONRPC_VERSION, "method": REQUEST_CANCEL, "params": {"requestId": request_id}}
    )


def standard_error_frame(request_id: str | None, code: int, message: str) -> bytes:
    error: JSONObject = {"code": code, "message": message[:MAX_ERROR_MESSAGE_SCALARS]}
    return _encode({"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": error})


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
    if len(frame) > MAX_FRAME_BYTES:
        raise ValueError("the frame would exceed the 16 MiB limit")
    return frame
