"""Frame builders: the frame objects the host sends, checked as the peer would check them
(a frame we build that breaks Run/1 is our bug: :class:`LocalProtocolError`)."""

from __future__ import annotations

from runner.json1 import JSONValue
from runner.protocol.codes import OPERATIONAL, LocalProtocolError, OperationError, WireCode
from runner.protocol.envelope import check_error
from runner.protocol.names import JSONRPC_VERSION, REQUEST_CANCEL, is_wire_id
from runner.protocol.params import PARAMS_METHODS, validate_params
from runner.protocol.shapes import JSONArray, JSONObject


def request(id: str, method: str, params: JSONObject | JSONArray) -> JSONObject:
    """A request frame object; Run/1 params are checked (the host's ``flow/run`` too)."""
    if not is_wire_id(id):
        raise LocalProtocolError(f"{id!r} is not a valid request id")
    if method in PARAMS_METHODS:
        reason = validate_params(method, params)
        if reason is not None:
            raise LocalProtocolError(f"invalid {method} params: {reason}")
    elif not isinstance(params, dict | list):
        raise LocalProtocolError("params must be an object or an array")
    return {"jsonrpc": JSONRPC_VERSION, "id": id, "method": method, "params": params}


def result_response(id: str, result: JSONValue) -> JSONObject:
    """A success response frame object answering request ``id``."""
    if not is_wire_id(id):
        raise LocalProtocolError(f"{id!r} is not a valid request id")
    return {"jsonrpc": JSONRPC_VERSION, "id": id, "result": result}


def error_response(id: str | None, code: int, message: str, data: JSONValue = None) -> JSONObject:
    """An error response frame object (``data=None`` leaves ``data`` out), held to the
    §1.2 id and data rules by :class:`LocalProtocolError`."""
    error: JSONObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    reason = check_error(id, error)
    if reason is not None:
        raise LocalProtocolError(reason)
    return {"jsonrpc": JSONRPC_VERSION, "id": id, "error": error}


def operational_error(
    id: str, wire_code: WireCode, message: str, details: JSONValue = None
) -> JSONObject:
    """A ``-32000`` error response reporting ``wire_code`` (``details=None``: none)."""
    data: JSONObject = {"code": wire_code}
    if details is not None:
        data["details"] = details
    return error_response(id, OPERATIONAL, message, data)


def operation_error_response(id: str, error: OperationError) -> JSONObject:
    """The error response frame object reporting ``error`` (a wire code) for ``id``."""
    if not is_wire_id(id):
        raise LocalProtocolError(f"{id!r} is not a valid request id")
    return {"jsonrpc": JSONRPC_VERSION, "id": id, "error": error.to_error_object()}


def cancel_notification(request_id: str) -> JSONObject:
    """The ``request/cancel`` notification frame object for our pending ``request_id``."""
    if not is_wire_id(request_id):
        raise LocalProtocolError(f"{request_id!r} is not a valid request id")
    return {
        "jsonrpc": JSONRPC_VERSION,
        "method": REQUEST_CANCEL,
        "params": {"requestId": request_id},
    }
