"""The envelope step: classify one decoded frame as a request, notification or response.

Its failures are fatal for the channel (PROTOCOL.md §1.1-§1.3): a
:class:`~runner.protocol.codes.ProtocolViolation` with a best-effort ``-32600`` reply.
The envelope is generic JSON-RPC 2.0, so a request may omit ``params``: an unknown method
is ``-32601`` either way, and for the nine Run/1 request methods a missing ``params`` is
a params failure (``-32602``, §1.3 checks params after the method); ``params`` neither
object nor array is an envelope failure (§1). A malformed ``request/cancel`` is fatal
(§10), so its params are checked here; other notifications' params are not looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, cast

from runner.json1 import JSONValue
from runner.protocol.codes import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_ERROR_MESSAGE_SCALARS,
    METHOD_NOT_FOUND,
    OPERATIONAL,
    PARSE_ERROR,
    OperationError,
    ProtocolViolation,
    WireCode,
    is_wire_code,
)
from runner.protocol.names import JSONRPC_VERSION, REQUEST_CANCEL, is_wire_id
from runner.protocol.params import validate_params
from runner.protocol.shapes import JSONArray, JSONObject, nested, show


@dataclass(frozen=True, slots=True)
class Request:
    """A request-form message. ``params`` is ``None`` when the member is absent."""

    id: str
    method: str
    params: JSONObject | JSONArray | None


@dataclass(frozen=True, slots=True)
class Notification:
    """A message with ``method`` and no ``id``; only ``request/cancel`` has a meaning, and
    its params are already checked."""

    method: str
    params: JSONObject | JSONArray | None


@dataclass(frozen=True, slots=True)
class Success:
    """A success response; check ``result`` against the request it answers."""

    id: str
    result: JSONValue


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """An error response with a fully checked ``error`` object (§1.2 variants)."""

    id: str | None
    error: JSONObject

    @property
    def code(self) -> int:
        """The JSON-RPC error code (``-32000`` or one of the standard codes)."""
        return int(cast(float, self.error["code"]))

    @property
    def message(self) -> str:
        return cast(str, self.error["message"])

    def operation_error(self) -> OperationError | None:
        """The reported failure for a ``-32000`` error; ``None`` for a standard code, which
        in reply to a well-formed Run/1 request is the caller's ``PROTOCOL_ERROR`` (§1)."""
        if self.code != OPERATIONAL:
            return None
        data = cast(JSONObject, self.error["data"])
        return OperationError(cast(WireCode, data["code"]), self.message, data.get("details"))


Message = Request | Notification | Success | ErrorResponse

_REQUEST_MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params"})
_NOTIFICATION_MEMBERS: Final = frozenset({"jsonrpc", "method", "params"})
_SUCCESS_MEMBERS: Final = frozenset({"jsonrpc", "id", "result"})
_ERROR_RESPONSE_MEMBERS: Final = frozenset({"jsonrpc", "id", "error"})
_ERROR_MEMBERS: Final = frozenset({"code", "message", "data"})
_ERROR_REQUIRED: Final = frozenset({"code", "message"})
_FLOW_ERROR_DATA: Final = frozenset({"code", "details"})
_NEEDS_DATA: Final = "a -32000 error needs data {code, details?}"
_CODE_REQUIRED: Final = frozenset({"code"})
_CORRELATED_STANDARD_CODES: Final = (METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR)


def _invalid_envelope(reply_id: str | None, reason: str) -> ProtocolViolation:
    # Not by builders.error_response: the id and message are valid by construction.
    message = f"Invalid Request: {reason}"[:MAX_ERROR_MESSAGE_SCALARS]
    error: JSONObject = {"code": INVALID_REQUEST, "message": message}
    reply: JSONObject = {"jsonrpc": JSONRPC_VERSION, "id": reply_id, "error": error}
    return ProtocolViolation(f"invalid envelope: {reason}", reply)


def classify(obj: JSONValue) -> Message:
    """Classify one decoded frame as a request, notification, success or error response.

    Raises :class:`ProtocolViolation` for anything not a valid Run/1 envelope, its ``reply``
    a ``-32600`` naming the id of a request-shaped message with a valid id, else ``id:
    null`` (the caller nulls an id already used: a second response is a correlation error).
    Direction, methods, request params and correlation are left to the caller (§1.3 5-7).
    """
    if not isinstance(obj, dict):
        if isinstance(obj, list):
            raise _invalid_envelope(None, "a JSON-RPC batch is not allowed in Run/1")
        raise _invalid_envelope(None, "a frame must be a JSON object")
    if "method" in obj:
        return _classify_call(obj)
    if "id" in obj:
        return _classify_response(obj)
    raise _invalid_envelope(None, "a message needs a method or an id")


def _classify_call(obj: JSONObject) -> Request | Notification:
    request_id: str | None = None
    params_reply_id = reply_id = request_id
    allowed = _NOTIFICATION_MEMBERS
    if "id" in obj:
        wire_id = obj["id"]
        if not is_wire_id(wire_id):
            raise _invalid_envelope(
                None,
                "a request id must be a string of 1-128 ASCII bytes "
                "matching ^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
            )
        allowed = _REQUEST_MEMBERS
        request_id = params_reply_id = wire_id
        # With result/error as well it is not clear that this is a request: answer id null.
        reply_id = None if "result" in obj or "error" in obj else request_id
    if not obj.keys() <= allowed:
        raise _invalid_envelope(reply_id, f"unknown member {show(min(obj.keys() - allowed))}")
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise _invalid_envelope(reply_id, 'jsonrpc must be "2.0"')
    method = obj["method"]
    if not isinstance(method, str):
        raise _invalid_envelope(reply_id, "method must be a string")
    params = obj.get("params")
    if params is None:
        if "params" in obj:
            raise _invalid_envelope(params_reply_id, "params must be an object or an array")
    elif not isinstance(params, dict | list):
        raise _invalid_envelope(params_reply_id, "params must be an object or an array")
    if request_id is not None:
        return Request(request_id, method, params)
    if method == REQUEST_CANCEL:
        reason = validate_params(REQUEST_CANCEL, params)
        if reason is not None:
            raise _invalid_envelope(None, f"malformed request/cancel: {reason}")
    return Notification(method, params)


def _classify_response(obj: JSONObject) -> Success | ErrorResponse:
    has_result = "result" in obj
    if has_result == ("error" in obj):
        raise _invalid_envelope(None, "a response needs exactly one of result and error")
    allowed = _SUCCESS_MEMBERS if has_result else _ERROR_RESPONSE_MEMBERS
    if not obj.keys() <= allowed:
        raise _invalid_envelope(None, f"unknown member {show(min(obj.keys() - allowed))}")
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise _invalid_envelope(None, 'jsonrpc must be "2.0"')
    response_id = obj["id"]
    if has_result:
        if not is_wire_id(response_id):
            raise _invalid_envelope(None, "a success response needs a valid request id")
        return Success(response_id, obj["result"])
    error = obj["error"]
    reason = check_error(response_id, error)
    if reason is not None:
        raise _invalid_envelope(None, reason)
    # _check_error accepted the id: a request id, or null where the code allows it.
    return ErrorResponse(cast("str | None", response_id), cast(JSONObject, error))


def check_error(response_id: JSONValue, value: JSONValue) -> str | None:
    """The §1.2 error-object variants, with the id rule that goes with each code."""
    reason = nested(value, "error", _ERROR_REQUIRED, _ERROR_MEMBERS, "error must be an object")
    if reason is not None:
        return reason
    error = cast(JSONObject, value)
    message = error["message"]
    if not isinstance(message, str) or not 1 <= len(message) <= MAX_ERROR_MESSAGE_SCALARS:
        return "error.message must be a string of 1-1,024 Unicode scalars"
    code = error["code"]
    if isinstance(code, bool) or not isinstance(code, int | float):
        return "error.code must be an integer"
    if code == OPERATIONAL:
        if not is_wire_id(response_id):
            return "a -32000 error needs a valid request id"
        data = error.get("data")
        reason = nested(data, "error.data", _CODE_REQUIRED, _FLOW_ERROR_DATA, _NEEDS_DATA)
        if reason is not None:
            return reason
        if not is_wire_code(cast(JSONObject, data)["code"]):
            return "error.data.code is not one of the 13 wire codes"
        return None
    if code == PARSE_ERROR:
        return None if response_id is None else "a -32700 error must have id null"
    if code == INVALID_REQUEST:
        if response_id is None or is_wire_id(response_id):
            return None
        return "a -32600 error needs a valid request id or null"
    if code in _CORRELATED_STANDARD_CODES:
        return None if is_wire_id(response_id) else f"a {int(code)} error needs a valid request id"
    return "error.code is not allowed in Run/1"
