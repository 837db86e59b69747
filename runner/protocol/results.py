"""The result step: a success ``result`` checked once the caller knows what it answers.

The schema alone cannot know which request a response answers, so these run after
correlation: :func:`validate_run_result`, :func:`validate_capability_result` and
:func:`validate_channel_result`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, cast

from runner.json1 import MAX_SAFE_INTEGER, JSONValue
from runner.protocol.codes import LocalProtocolError, is_wire_code
from runner.protocol.names import (
    CHANNEL_CLOSE,
    CHANNEL_CREATE,
    CHANNEL_NEXT,
    CHANNEL_RELEASE,
    CHANNEL_SEND,
    CHANNEL_SUBSCRIBE,
    is_local_name,
    is_wire_id,
)
from runner.protocol.params import check_grant
from runner.protocol.shapes import JSONObject, exactly, is_integer_in, members, nested

_RUN_RESULT_MEMBERS: Final = frozenset({"outcome", "output"})
_VALUE_MEMBERS: Final = frozenset({"value"})
_ERROR_ARM_MEMBERS: Final = frozenset({"error"})
_CAPABILITY_ERROR: Final = frozenset({"name", "data"})
_PAIR_MEMBERS: Final = frozenset({"send", "receive"})
_BROADCAST_MEMBERS: Final = frozenset({"send", "source"})
_RELEASED_MEMBERS: Final = frozenset({"status"})
_ENDED_MEMBERS: Final = frozenset({"status", "lastSequence"})
_FAILED_REQUIRED: Final = frozenset({"status", "code"})
_FAILED_MEMBERS: Final = frozenset({"status", "code", "details"})


_run_result = exactly(_RUN_RESULT_MEMBERS, "outcome", is_local_name, "outcome must be a LocalName")


def validate_run_result(result: JSONValue) -> str | None:
    """A ``flow/run`` / ``flow/run-child`` result: exactly ``{outcome, output}`` (whether the
    outcome is declared is package knowledge, the caller's ``INVALID_RESULT``)."""
    if not isinstance(result, dict):
        return "a Run result must be an object {outcome, output}"
    return _run_result(result)


def validate_capability_result(result: JSONValue) -> str | None:
    """A ``capability/call`` result: exactly one of ``{value}`` or ``{error: {name, data}}``."""
    if not isinstance(result, dict):
        return "a capability result must be an object"
    if "value" in result:
        return members(result, _VALUE_MEMBERS, _VALUE_MEMBERS)
    if "error" not in result:
        return "a capability result needs exactly one of value and error"
    error = result["error"]
    reason = members(result, _ERROR_ARM_MEMBERS, _ERROR_ARM_MEMBERS) or nested(
        error, "error", _CAPABILITY_ERROR, _CAPABILITY_ERROR, "error must be an object {name, data}"
    )
    if reason is not None:
        return reason
    if not is_local_name(cast(JSONObject, error)["name"]):
        return "error.name must be a LocalName"
    return None


def _check_created(result: JSONValue) -> str | None:
    if not isinstance(result, dict):
        return "a channel/create result must be an object"
    direct = "receive" in result
    allowed = _PAIR_MEMBERS if direct else _BROADCAST_MEMBERS
    reason = members(result, allowed, allowed) or _granted(
        result, "send", "direct" if direct else "broadcast"
    )
    if reason is not None:
        return reason
    if direct:
        return _granted(result, "receive", "direct")
    return None if is_wire_id(result["source"]) else "source must be a source reference"


def _granted(result: JSONObject, direction: str, delivery: str) -> str | None:
    reason = check_grant(result[direction], direction, delivery)
    return None if reason is None else f"{direction}: {reason}"


def _check_subscribed(result: JSONValue) -> str | None:
    return check_grant(result, "receive", "broadcast")


def _check_accepted(result: JSONValue) -> str | None:
    return None if result is None else "the result must be null"


_ARMS: Final = {  # a channel/next arm: its one member, its members, counter, least count
    "item": (frozenset({"item"}), frozenset({"sequence", "value"}), "sequence", 1),
    "end": (frozenset({"end"}), frozenset({"lastSequence"}), "lastSequence", 0),
}
_NOT_ARM_OBJECT: Final = {
    "item": "item must be an object {sequence, value}",
    "end": "end must be an object {lastSequence}",
}


def _check_read(result: JSONValue) -> str | None:
    if not isinstance(result, dict):
        return "a channel/next result must be an object {item} or {end}"
    arm = "item" if "item" in result else "end"
    only, inner, counter, least = _ARMS[arm]
    reason = members(result, only, only) or nested(
        result[arm], arm, inner, inner, _NOT_ARM_OBJECT[arm]
    )
    if reason is not None:
        return reason
    if not is_integer_in(cast(JSONObject, result[arm])[counter], least, MAX_SAFE_INTEGER):
        return f"{arm}.{counter} must be an integer {least}..2^53-1"
    return None


def _check_released(result: JSONValue) -> str | None:
    if not isinstance(result, dict):
        return "a channel/release result must be an object {status, …}"
    status = result.get("status")
    if status == "released":
        return members(result, _RELEASED_MEMBERS, _RELEASED_MEMBERS)
    if status == "ended":
        reason = members(result, _ENDED_MEMBERS, _ENDED_MEMBERS)
        if reason is not None:
            return reason
        if not is_integer_in(result["lastSequence"], 0, MAX_SAFE_INTEGER):
            return "lastSequence must be an integer 0..2^53-1"
        return None
    if status == "failed":
        reason = members(result, _FAILED_REQUIRED, _FAILED_MEMBERS)
        if reason is not None:
            return reason
        return None if is_wire_code(result["code"]) else "code is not one of the 13 wire codes"
    return 'status must be "released", "ended" or "failed"'


_CHANNEL_RESULT_CHECKS: Final[dict[str, Callable[[JSONValue], str | None]]] = {
    CHANNEL_CREATE: _check_created,
    CHANNEL_SUBSCRIBE: _check_subscribed,
    CHANNEL_SEND: _check_accepted,
    CHANNEL_NEXT: _check_read,
    CHANNEL_CLOSE: _check_accepted,
    CHANNEL_RELEASE: _check_released,
}


def validate_channel_result(method: str, result: JSONValue) -> str | None:
    """The result of one of the six ``channel/*`` methods (§7.2): ``None`` if valid. Matching
    a ``channel/create`` result's shape to the requested delivery is the caller's business."""
    check = _CHANNEL_RESULT_CHECKS.get(method)
    if check is None:
        raise LocalProtocolError(f"{method!r} is not a channel method")
    return check(result)
