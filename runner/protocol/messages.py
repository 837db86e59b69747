"""Run/1 message shapes: envelope classification, params and result validation, builders.

Every frame the host reads passes through here, so the checks are hand-written (no
jsonschema or pydantic at run time); ``bench/messages_validate.py`` measures them
against ``jsonschema`` on ``run-1.schema.json``, and the tests check that the two agree
(Hypothesis-generated and mutated frames).

The checks are split the way the host must answer (PROTOCOL.md §1.1-§1.3):

- :func:`classify` is the *envelope* step. Its failures are fatal for the channel and
  raise :class:`~runner.protocol.codes.ProtocolViolation` carrying a best-effort
  ``-32600`` reply.
- :func:`validate_params` is the per-method step behind it. Its failures are ordinary
  ``-32602`` replies and the channel stays open.
- :func:`validate_run_result`, :func:`validate_capability_result` and
  :func:`validate_channel_result` check a success ``result`` once the caller knows
  which request it answers (the schema alone cannot know that).

Reading of the envelope grammar (§1.2 vs §1.3, documented because the schema alone
would say otherwise): the *envelope* is generic JSON-RPC 2.0, so a request-form message
(``method`` and ``id``) may omit ``params``. A well-formed request for an unknown method
or the wrong direction is answered ``-32601`` whether or not it has ``params``; for the
nine Run/1 request methods a missing ``params`` is a params failure (``-32602``), since
§1.3 checks params after the method and ``params`` is not among the envelope checks it
lists. ``params`` that is present but neither object nor array is an envelope failure
(§1). A ``request/cancel`` notification with malformed params is fatal (§10), so
:func:`classify` checks its params as part of the envelope; other notifications are
classified with their params unchecked (the receiver ignores them).

Beyond the schema: ``flow/run`` channel grants must name distinct endpoint references
(a seed rule, §4). As in the schema's Draft 2020-12 ``integer``, and because JSON/1
numbers are values (``1.0`` is ``1``), an integral float passes an integer check; a
bool never does. Regexes are anchored with ``\\A``/``\\Z``: ECMA-262 ``$`` (the schema's
dialect) never matches before a final newline, Python's ``$`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeGuard, cast

from runner.json1 import JSONValue
from runner.protocol.codes import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_ERROR_MESSAGE_SCALARS,
    METHOD_NOT_FOUND,
    OPERATIONAL,
    PARSE_ERROR,
    LocalProtocolError,
    OperationError,
    ProtocolViolation,
    WireCode,
    is_wire_code,
)

JSONObject = dict[str, JSONValue]
JSONArray = list[JSONValue]

JSONRPC_VERSION: Final = "2.0"
RUN_PROTOCOL: Final = "run/1"

FLOW_RUN: Final = "flow/run"
FLOW_RUN_CHILD: Final = "flow/run-child"
CAPABILITY_CALL: Final = "capability/call"
REQUEST_CANCEL: Final = "request/cancel"
CHANNEL_CREATE: Final = "channel/create"
CHANNEL_SUBSCRIBE: Final = "channel/subscribe"
CHANNEL_SEND: Final = "channel/send"
CHANNEL_NEXT: Final = "channel/next"
CHANNEL_CLOSE: Final = "channel/close"
CHANNEL_RELEASE: Final = "channel/release"

CHANNEL_METHODS: Final[frozenset[str]] = frozenset(
    {
        CHANNEL_CREATE,
        CHANNEL_SUBSCRIBE,
        CHANNEL_SEND,
        CHANNEL_NEXT,
        CHANNEL_CLOSE,
        CHANNEL_RELEASE,
    }
)
HOST_TO_COMPONENT_METHODS: Final[frozenset[str]] = frozenset({FLOW_RUN})
"""Request methods the host may send (``request/cancel`` is a notification, both ways)."""
COMPONENT_TO_HOST_METHODS: Final[frozenset[str]] = (
    frozenset({FLOW_RUN_CHILD, CAPABILITY_CALL}) | CHANNEL_METHODS
)
"""Request methods a component may send; anything else from it is answered ``-32601``."""

WIRE_ID_PATTERN: Final = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:/-]*\Z")
"""Request ids, ``operationId``, endpoint and source references (plus ≤128 bytes)."""
LOCAL_NAME_PATTERN: Final = re.compile(r"\A[a-z0-9]+(?:-[a-z0-9]+)*\Z")
"""Package/1 LocalName: slots, capability methods, error names, outcomes (plus ≤64)."""

MAX_WIRE_ID_BYTES: Final = 128
MAX_LOCAL_NAME_CHARS: Final = 64
MAX_ATTACHMENTS: Final = 256
MAX_CHANNEL_ENTRIES: Final = 256
MAX_INTENT_SCALARS: Final = 16_384
MAX_CONTRACT_PATH_CHARS: Final = 4_096
MAX_SAFE_INTEGER: Final = 9_007_199_254_740_991

_CONTRACT_PATH = re.compile(r"\A\./[^\\]+\Z")
_CONTRACT_ID = re.compile(
    r"\Ahttps://(?!(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])(?:/|\Z))"
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+"
    r"/(?!\.{1,2}(?:/|\Z))[a-z0-9._~-]+(?:/(?!\.{1,2}(?:/|\Z))[a-z0-9._~-]+)*\Z"
)
_CONTRACT_VERSION = re.compile(r"\A(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\Z")
_CONTRACT_DIGEST = re.compile(r"\Asha256:[0-9a-f]{64}\Z")

_DELIVERIES: Final = ("direct", "broadcast")
_ACCESS_MODES: Final = ("read", "read-write")


def is_wire_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a request id / operationId / endpoint reference."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_WIRE_ID_BYTES
        and WIRE_ID_PATTERN.match(value) is not None
    )


def is_local_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a Package/1 LocalName."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_LOCAL_NAME_CHARS
        and LOCAL_NAME_PATTERN.match(value) is not None
    )


def _is_integer_in(value: object, low: int, high: int) -> bool:
    # JSON/1 numbers are values, so 1.0 is the integer 1 (as for the schema's
    # "integer"); bool is a JSON literal, never a number.
    if isinstance(value, int):
        return not isinstance(value, bool) and low <= value <= high
    return isinstance(value, float) and value.is_integer() and low <= value <= high


def _show(name: str) -> str:
    """A member name for a reason string, bounded (names come from the peer)."""
    return repr(name) if len(name) <= 40 else repr(name[:40]) + "…"


def _members(obj: JSONObject, required: frozenset[str], allowed: frozenset[str]) -> str | None:
    keys = obj.keys()
    if not keys <= allowed:
        return f"unknown member {_show(min(keys - allowed))}"
    if not required <= keys:
        return f"missing member {min(required - keys)!r}"
    return None


# --- envelope -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """A request-form message. ``params`` is ``None`` when the member is absent."""

    id: str
    method: str
    params: JSONObject | JSONArray | None


@dataclass(frozen=True, slots=True)
class Notification:
    """A message with ``method`` and no ``id``; only ``request/cancel`` has a meaning.

    For ``request/cancel`` the params are already checked: ``params["requestId"]`` is a
    wire id.
    """

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
        """The reported failure for a ``-32000`` error; ``None`` for a standard code.

        A standard JSON-RPC error in reply to a well-formed Run/1 request is fatal
        ``PROTOCOL_ERROR`` (§1), never an ordinary failure: the caller decides that.
        """
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
_FLOW_ERROR_DATA_MEMBERS: Final = frozenset({"code", "details"})
_CODE_REQUIRED: Final = frozenset({"code"})
_CORRELATED_STANDARD_CODES: Final = (METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR)


def _invalid_envelope(reply_id: str | None, reason: str) -> ProtocolViolation:
    message = f"Invalid Request: {reason}"[:MAX_ERROR_MESSAGE_SCALARS]
    reply = error_response(reply_id, INVALID_REQUEST, message)
    return ProtocolViolation(f"invalid envelope: {reason}", reply)


def classify(obj: JSONValue) -> Message:
    """Classify one decoded frame as a request, notification, success or error response.

    Raises :class:`ProtocolViolation` (fatal, ``PROTOCOL_ERROR``) for anything that is
    not a valid Run/1 envelope: a non-object or batch, a wrong or missing ``jsonrpc``,
    extra members, an invalid id, ``params`` that is not an object or array, a response
    with both or neither of ``result``/``error``, an error object outside the §1.2
    variants, or a malformed ``request/cancel``. Its ``reply`` is a ``-32600`` error
    naming the request's id when the message is request-shaped (``method``, no
    ``result``/``error``) with a valid id, else ``id: null``. The caller, which knows
    which ids were already used, should send ``id: null`` instead when that id is not
    fresh: a second response to a used id would be a correlation error of its own.

    Direction, method knowledge, params of request methods and response correlation are
    protocol state and are left to the caller (§1.3 steps 5-7).
    """
    if not isinstance(obj, dict):
        if isinstance(obj, list):
            raise _invalid_envelope(None, "a JSON-RPC batch is not allowed in Run/1")
        raise _invalid_envelope(None, "a frame must be a JSON object")
    if "method" in obj:
        if "id" in obj:
            return _classify_request(obj)
        return _classify_notification(obj)
    if "id" in obj:
        return _classify_response(obj)
    raise _invalid_envelope(None, "a message needs a method or an id")


def _classify_request(obj: JSONObject) -> Request:
    request_id = obj["id"]
    if not is_wire_id(request_id):
        raise _invalid_envelope(
            None,
            "a request id must be a string of 1-128 ASCII bytes "
            "matching ^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
        )
    # With result/error as well it is not clear that this is a request: answer id null.
    reply_id = None if "result" in obj or "error" in obj else request_id
    if not obj.keys() <= _REQUEST_MEMBERS:
        raise _invalid_envelope(
            reply_id, f"unknown member {_show(min(obj.keys() - _REQUEST_MEMBERS))}"
        )
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise _invalid_envelope(reply_id, 'jsonrpc must be "2.0"')
    method = obj["method"]
    if not isinstance(method, str):
        raise _invalid_envelope(reply_id, "method must be a string")
    params = obj.get("params")
    if params is None:
        if "params" in obj:
            raise _invalid_envelope(request_id, "params must be an object or an array")
        return Request(request_id, method, None)
    if not isinstance(params, dict | list):
        raise _invalid_envelope(request_id, "params must be an object or an array")
    return Request(request_id, method, params)


def _classify_notification(obj: JSONObject) -> Notification:
    if not obj.keys() <= _NOTIFICATION_MEMBERS:
        raise _invalid_envelope(
            None, f"unknown member {_show(min(obj.keys() - _NOTIFICATION_MEMBERS))}"
        )
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise _invalid_envelope(None, 'jsonrpc must be "2.0"')
    method = obj["method"]
    if not isinstance(method, str):
        raise _invalid_envelope(None, "method must be a string")
    params = obj.get("params")
    if params is None:
        if "params" in obj:
            raise _invalid_envelope(None, "params must be an object or an array")
    elif not isinstance(params, dict | list):
        raise _invalid_envelope(None, "params must be an object or an array")
    if method == REQUEST_CANCEL:
        reason = validate_params(REQUEST_CANCEL, params)
        if reason is not None:
            raise _invalid_envelope(None, f"malformed request/cancel: {reason}")
    return Notification(method, params)


def _classify_response(obj: JSONObject) -> Success | ErrorResponse:
    has_result = "result" in obj
    if has_result == ("error" in obj):
        raise _invalid_envelope(None, "a response needs exactly one of result and error")
    members = _SUCCESS_MEMBERS if has_result else _ERROR_RESPONSE_MEMBERS
    if not obj.keys() <= members:
        raise _invalid_envelope(None, f"unknown member {_show(min(obj.keys() - members))}")
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise _invalid_envelope(None, 'jsonrpc must be "2.0"')
    response_id = obj["id"]
    if has_result:
        if not is_wire_id(response_id):
            raise _invalid_envelope(None, "a success response needs a valid request id")
        return Success(response_id, obj["result"])
    error = obj["error"]
    reason = _check_error(response_id, error)
    if reason is not None:
        raise _invalid_envelope(None, reason)
    # _check_error accepted the id: a request id, or null where the code allows it.
    return ErrorResponse(cast("str | None", response_id), cast(JSONObject, error))


def _check_error(response_id: JSONValue, error: JSONValue) -> str | None:
    """The §1.2 error-object variants, with the id rule that goes with each code."""
    if not isinstance(error, dict):
        return "error must be an object"
    reason = _members(error, _ERROR_REQUIRED, _ERROR_MEMBERS)
    if reason is not None:
        return f"error: {reason}"
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
        if not isinstance(data, dict):
            return "a -32000 error needs data {code, details?}"
        reason = _members(data, _CODE_REQUIRED, _FLOW_ERROR_DATA_MEMBERS)
        if reason is not None:
            return f"error.data: {reason}"
        if not is_wire_code(data["code"]):
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


# --- params -------------------------------------------------------------------------

_ParamsCheck = Callable[[JSONObject], str | None]

_FLOW_RUN_REQUIRED: Final = frozenset(
    {"protocol", "input", "settings", "attachments", "scratch", "deadlineUnixMs"}
)
_FLOW_RUN_MEMBERS: Final = _FLOW_RUN_REQUIRED | {"channels"}
_ATTACHMENT_MEMBERS: Final = frozenset({"path", "access"})
_CHILD_REQUIRED: Final = frozenset({"operationId", "slot", "input"})
_CHILD_MEMBERS: Final = _CHILD_REQUIRED | {"intent", "channels"}
_CALL_REQUIRED: Final = frozenset({"operationId", "slot", "method", "input"})
_CALL_MEMBERS: Final = _CALL_REQUIRED | {"channels"}
_CANCEL_MEMBERS: Final = frozenset({"requestId"})
_CREATE_MEMBERS: Final = frozenset({"delivery", "schema", "contract"})
_NOTHING: Final[frozenset[str]] = frozenset()
_SUBSCRIBE_MEMBERS: Final = frozenset({"source"})
_SEND_MEMBERS: Final = frozenset({"endpoint", "value"})
_ENDPOINT_MEMBERS: Final = frozenset({"endpoint"})
_SENDER_MEMBERS: Final = frozenset({"endpoint", "direction", "delivery", "contract"})
_SENDER_REQUIRED: Final = frozenset({"endpoint", "direction", "delivery"})
_RECEIVER_MEMBERS: Final = _SENDER_MEMBERS | {"startSequence"}
_RECEIVER_REQUIRED: Final = _SENDER_REQUIRED | {"startSequence"}
_CONTRACT_MEMBERS: Final = frozenset({"id", "version", "digest"})


def _check_attachments(attachments: JSONValue) -> str | None:
    if not isinstance(attachments, dict):
        return "attachments must be an object"
    if len(attachments) > MAX_ATTACHMENTS:
        return "attachments has more than 256 entries"
    for name, attachment in attachments.items():
        if not is_local_name(name):
            return f"attachment name {_show(name)} is not a LocalName"
        if not isinstance(attachment, dict):
            return f"attachment {name!r} must be an object"
        reason = _members(attachment, _ATTACHMENT_MEMBERS, _ATTACHMENT_MEMBERS)
        if reason is not None:
            return f"attachment {name!r}: {reason}"
        path = attachment["path"]
        if not isinstance(path, str) or not path:
            return f"attachment {name!r}: path must be a nonempty string"
        if attachment["access"] not in _ACCESS_MODES:
            return f'attachment {name!r}: access must be "read" or "read-write"'
    return None


def _check_contract_identity(contract: JSONValue) -> str | None:
    if not isinstance(contract, dict):
        return "contract must be an object {id, version, digest}"
    reason = _members(contract, _CONTRACT_MEMBERS, _CONTRACT_MEMBERS)
    if reason is not None:
        return f"contract: {reason}"
    contract_id = contract["id"]
    if not isinstance(contract_id, str) or _CONTRACT_ID.match(contract_id) is None:
        return "contract.id is not a canonical https contract id"
    version = contract["version"]
    if not isinstance(version, str) or _CONTRACT_VERSION.match(version) is None:
        return "contract.version must be X.Y.Z"
    digest = contract["digest"]
    if not isinstance(digest, str) or _CONTRACT_DIGEST.match(digest) is None:
        return "contract.digest must be sha256:<64 lowercase hex>"
    return None


def _check_grant(
    grant: JSONValue, direction: str | None = None, delivery: str | None = None
) -> str | None:
    """An endpoint grant (§7.1); ``direction``/``delivery`` pin what a result requires."""
    if not isinstance(grant, dict):
        return "a grant must be an object"
    actual = grant.get("direction")
    if actual == "send":
        reason = _members(grant, _SENDER_REQUIRED, _SENDER_MEMBERS)
    elif actual == "receive":
        reason = _members(grant, _RECEIVER_REQUIRED, _RECEIVER_MEMBERS)
    else:
        return 'grant direction must be "send" or "receive"'
    if reason is not None:
        return f"grant: {reason}"
    if direction is not None and actual != direction:
        return f'grant direction must be "{direction}"'
    if not is_wire_id(grant["endpoint"]):
        return "grant endpoint is not a valid reference"
    actual_delivery = grant["delivery"]
    if actual_delivery not in _DELIVERIES:
        return 'grant delivery must be "direct" or "broadcast"'
    if delivery is not None and actual_delivery != delivery:
        return f'grant delivery must be "{delivery}"'
    if "contract" in grant:
        reason = _check_contract_identity(grant["contract"])
        if reason is not None:
            return f"grant {reason}"
    if actual == "receive":
        start = grant["startSequence"]
        if not _is_integer_in(start, 1, MAX_SAFE_INTEGER):
            return "grant startSequence must be an integer 1..2^53-1"
        if actual_delivery == "direct" and start != 1:
            return "a direct receiver grant must have startSequence 1"
    return None


def _check_grants(channels: JSONValue) -> str | None:
    if not isinstance(channels, dict):
        return "channels must be an object"
    if len(channels) > MAX_CHANNEL_ENTRIES:
        return "channels has more than 256 entries"
    endpoints: set[str] = set()
    for name, grant in channels.items():
        if not is_local_name(name):
            return f"channel name {_show(name)} is not a LocalName"
        reason = _check_grant(grant)
        if reason is not None:
            return f"channels[{name!r}]: {reason}"
        endpoints.add(cast(str, cast(JSONObject, grant)["endpoint"]))
    if len(endpoints) != len(channels):
        return "channels grants must have distinct endpoint references"
    return None


def _check_references(channels: JSONValue) -> str | None:
    if not isinstance(channels, dict):
        return "channels must be an object"
    if len(channels) > MAX_CHANNEL_ENTRIES:
        return "channels has more than 256 entries"
    for name, reference in channels.items():
        if not is_local_name(name):
            return f"channel name {_show(name)} is not a LocalName"
        if not is_wire_id(reference):
            return f"channels[{name!r}] must be an endpoint reference string"
    return None


def _check_flow_run(params: JSONObject) -> str | None:
    reason = _members(params, _FLOW_RUN_REQUIRED, _FLOW_RUN_MEMBERS)
    if reason is not None:
        return reason
    if params["protocol"] != RUN_PROTOCOL:
        return 'protocol must be "run/1"'
    if not isinstance(params["settings"], dict):
        return "settings must be an object"
    reason = _check_attachments(params["attachments"])
    if reason is not None:
        return reason
    scratch = params["scratch"]
    if not isinstance(scratch, str) or not scratch:
        return "scratch must be a nonempty string"
    if not _is_integer_in(params["deadlineUnixMs"], 0, MAX_SAFE_INTEGER):
        return "deadlineUnixMs must be an integer 0..2^53-1"
    if "channels" in params:
        return _check_grants(params["channels"])
    return None


def _check_operation(params: JSONObject) -> str | None:
    if not is_wire_id(params["operationId"]):
        return "operationId must be a string of 1-128 ASCII bytes (request-id grammar)"
    if not is_local_name(params["slot"]):
        return "slot must be a LocalName"
    if "channels" in params:
        return _check_references(params["channels"])
    return None


def _check_flow_run_child(params: JSONObject) -> str | None:
    reason = _members(params, _CHILD_REQUIRED, _CHILD_MEMBERS) or _check_operation(params)
    if reason is not None:
        return reason
    if "intent" in params:
        intent = params["intent"]
        if not isinstance(intent, str) or not 1 <= len(intent) <= MAX_INTENT_SCALARS:
            return "intent must be a string of 1-16,384 Unicode scalars"
    return None


def _check_capability_call(params: JSONObject) -> str | None:
    reason = _members(params, _CALL_REQUIRED, _CALL_MEMBERS) or _check_operation(params)
    if reason is not None:
        return reason
    if not is_local_name(params["method"]):
        return "method must be a LocalName"
    return None


def _check_request_cancel(params: JSONObject) -> str | None:
    reason = _members(params, _CANCEL_MEMBERS, _CANCEL_MEMBERS)
    if reason is not None:
        return reason
    if not is_wire_id(params["requestId"]):
        return "requestId must be a request id"
    return None


def _check_channel_create(params: JSONObject) -> str | None:
    reason = _members(params, _NOTHING, _CREATE_MEMBERS)
    if reason is not None:
        return reason
    if "delivery" in params and params["delivery"] not in _DELIVERIES:
        return 'delivery must be "direct" or "broadcast"'
    if "schema" in params:
        if "contract" in params:
            return "schema and contract are mutually exclusive"
        if not isinstance(params["schema"], dict | bool):
            return "schema must be an object or a boolean"
    elif "contract" in params:
        contract = params["contract"]
        if (
            not isinstance(contract, str)
            or len(contract) > MAX_CONTRACT_PATH_CHARS
            or _CONTRACT_PATH.match(contract) is None
        ):
            return "contract must be a package-local path ./… of at most 4,096 characters"
    return None


def _check_channel_subscribe(params: JSONObject) -> str | None:
    reason = _members(params, _SUBSCRIBE_MEMBERS, _SUBSCRIBE_MEMBERS)
    if reason is not None:
        return reason
    if not is_wire_id(params["source"]):
        return "source must be a source reference"
    return None


def _check_channel_send(params: JSONObject) -> str | None:
    reason = _members(params, _SEND_MEMBERS, _SEND_MEMBERS)
    if reason is not None:
        return reason
    if not is_wire_id(params["endpoint"]):
        return "endpoint must be an endpoint reference"
    return None


def _check_channel_endpoint(params: JSONObject) -> str | None:
    reason = _members(params, _ENDPOINT_MEMBERS, _ENDPOINT_MEMBERS)
    if reason is not None:
        return reason
    if not is_wire_id(params["endpoint"]):
        return "endpoint must be an endpoint reference"
    return None


_PARAMS_CHECKS: Final[dict[str, _ParamsCheck]] = {
    FLOW_RUN: _check_flow_run,
    FLOW_RUN_CHILD: _check_flow_run_child,
    CAPABILITY_CALL: _check_capability_call,
    REQUEST_CANCEL: _check_request_cancel,
    CHANNEL_CREATE: _check_channel_create,
    CHANNEL_SUBSCRIBE: _check_channel_subscribe,
    CHANNEL_SEND: _check_channel_send,
    CHANNEL_NEXT: _check_channel_endpoint,
    CHANNEL_CLOSE: _check_channel_endpoint,
    CHANNEL_RELEASE: _check_channel_endpoint,
}


def validate_params(method: str, params: JSONValue) -> str | None:
    """Check the params of a Run/1 method: ``None`` if valid, else the reason.

    ``method`` is one of the nine request methods or ``request/cancel``; any other name
    raises :class:`LocalProtocolError` (an unknown method is ``-32601``, decided before
    params). ``params`` is ``None`` when the member is absent, which is invalid for
    every Run/1 method. A reason is the text of a ``-32602`` reply (or, for a cancel,
    of the fatal violation); it never embeds more than a short prefix of peer data.
    """
    check = _PARAMS_CHECKS.get(method)
    if check is None:
        raise LocalProtocolError(f"{method!r} is not a Run/1 method with params")
    if params is None:
        return "params is required"
    if not isinstance(params, dict):
        return "params must be an object"
    return check(params)


# --- results ------------------------------------------------------------------------

_RUN_RESULT_MEMBERS: Final = frozenset({"outcome", "output"})
_VALUE_MEMBERS: Final = frozenset({"value"})
_ERROR_ARM_MEMBERS: Final = frozenset({"error"})
_CAPABILITY_ERROR_MEMBERS: Final = frozenset({"name", "data"})
_PAIR_MEMBERS: Final = frozenset({"send", "receive"})
_BROADCAST_MEMBERS: Final = frozenset({"send", "source"})
_ITEM_ARM_MEMBERS: Final = frozenset({"item"})
_ITEM_MEMBERS: Final = frozenset({"sequence", "value"})
_END_ARM_MEMBERS: Final = frozenset({"end"})
_END_MEMBERS: Final = frozenset({"lastSequence"})
_RELEASED_MEMBERS: Final = frozenset({"status"})
_ENDED_MEMBERS: Final = frozenset({"status", "lastSequence"})
_FAILED_REQUIRED: Final = frozenset({"status", "code"})
_FAILED_MEMBERS: Final = frozenset({"status", "code", "details"})


def validate_run_result(result: JSONValue) -> str | None:
    """A ``flow/run`` / ``flow/run-child`` result: exactly ``{outcome, output}``.

    Whether ``outcome`` is ``done`` or a declared outcome is package knowledge, left to
    the caller (``INVALID_RESULT``).
    """
    if not isinstance(result, dict):
        return "a Run result must be an object {outcome, output}"
    reason = _members(result, _RUN_RESULT_MEMBERS, _RUN_RESULT_MEMBERS)
    if reason is not None:
        return reason
    if not is_local_name(result["outcome"]):
        return "outcome must be a LocalName"
    return None


def validate_capability_result(result: JSONValue) -> str | None:
    """A ``capability/call`` result: exactly one of ``{value}`` or ``{error: {name, data}}``."""
    if not isinstance(result, dict):
        return "a capability result must be an object"
    if "value" in result:
        return _members(result, _VALUE_MEMBERS, _VALUE_MEMBERS)
    if "error" not in result:
        return "a capability result needs exactly one of value and error"
    reason = _members(result, _ERROR_ARM_MEMBERS, _ERROR_ARM_MEMBERS)
    if reason is not None:
        return reason
    error = result["error"]
    if not isinstance(error, dict):
        return "error must be an object {name, data}"
    reason = _members(error, _CAPABILITY_ERROR_MEMBERS, _CAPABILITY_ERROR_MEMBERS)
    if reason is not None:
        return f"error: {reason}"
    if not is_local_name(error["name"]):
        return "error.name must be a LocalName"
    return None


def _check_created(result: JSONValue) -> str | None:
    if not isinstance(result, dict):
        return "a channel/create result must be an object"
    if "receive" in result:
        reason = _members(result, _PAIR_MEMBERS, _PAIR_MEMBERS)
        if reason is not None:
            return reason
        reason = _check_grant(result["send"], "send", "direct")
        if reason is not None:
            return f"send: {reason}"
        reason = _check_grant(result["receive"], "receive", "direct")
        return None if reason is None else f"receive: {reason}"
    reason = _members(result, _BROADCAST_MEMBERS, _BROADCAST_MEMBERS)
    if reason is not None:
        return reason
    reason = _check_grant(result["send"], "send", "broadcast")
    if reason is not None:
        return f"send: {reason}"
    return None if is_wire_id(result["source"]) else "source must be a source reference"


def _check_subscribed(result: JSONValue) -> str | None:
    return _check_grant(result, "receive", "broadcast")


def _check_accepted(result: JSONValue) -> str | None:
    return None if result is None else "the result must be null"


def _check_read(result: JSONValue) -> str | None:
    if not isinstance(result, dict):
        return "a channel/next result must be an object {item} or {end}"
    if "item" in result:
        reason = _members(result, _ITEM_ARM_MEMBERS, _ITEM_ARM_MEMBERS)
        if reason is not None:
            return reason
        item = result["item"]
        if not isinstance(item, dict):
            return "item must be an object {sequence, value}"
        reason = _members(item, _ITEM_MEMBERS, _ITEM_MEMBERS)
        if reason is not None:
            return f"item: {reason}"
        if not _is_integer_in(item["sequence"], 1, MAX_SAFE_INTEGER):
            return "item.sequence must be an integer 1..2^53-1"
        return None
    reason = _members(result, _END_ARM_MEMBERS, _END_ARM_MEMBERS)
    if reason is not None:
        return reason
    end = result["end"]
    if not isinstance(end, dict):
        return "end must be an object {lastSequence}"
    reason = _members(end, _END_MEMBERS, _END_MEMBERS)
    if reason is not None:
        return f"end: {reason}"
    if not _is_integer_in(end["lastSequence"], 0, MAX_SAFE_INTEGER):
        return "end.lastSequence must be an integer 0..2^53-1"
    return None


def _check_released(result: JSONValue) -> str | None:
    if not isinstance(result, dict):
        return "a channel/release result must be an object {status, …}"
    status = result.get("status")
    if status == "released":
        return _members(result, _RELEASED_MEMBERS, _RELEASED_MEMBERS)
    if status == "ended":
        reason = _members(result, _ENDED_MEMBERS, _ENDED_MEMBERS)
        if reason is not None:
            return reason
        if not _is_integer_in(result["lastSequence"], 0, MAX_SAFE_INTEGER):
            return "lastSequence must be an integer 0..2^53-1"
        return None
    if status == "failed":
        reason = _members(result, _FAILED_REQUIRED, _FAILED_MEMBERS)
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
    """The result of one of the six ``channel/*`` methods (§7.2): ``None`` if valid.

    ``channel/create`` accepts the direct pair or the broadcast shape; matching it to
    the requested delivery is the caller's business.
    """
    check = _CHANNEL_RESULT_CHECKS.get(method)
    if check is None:
        raise LocalProtocolError(f"{method!r} is not a channel method")
    return check(result)


def validate_result(method: str, result: JSONValue) -> str | None:
    """The success ``result`` of any Run/1 request method, by the method it answers."""
    if method in (FLOW_RUN, FLOW_RUN_CHILD):
        return validate_run_result(result)
    if method == CAPABILITY_CALL:
        return validate_capability_result(result)
    if method in CHANNEL_METHODS:
        return validate_channel_result(method, result)
    raise LocalProtocolError(f"{method!r} is not a Run/1 request method")


# --- builders -----------------------------------------------------------------------


def request(id: str, method: str, params: JSONObject | JSONArray) -> JSONObject:
    """A request frame object; Run/1 params are checked (the host's ``flow/run`` too)."""
    if not is_wire_id(id):
        raise LocalProtocolError(f"{id!r} is not a valid request id")
    if method in _PARAMS_CHECKS:
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
    """An error response frame object; ``data=None`` leaves ``data`` out.

    The §1.2 rules apply (raising :class:`LocalProtocolError`): ``-32700`` needs
    ``id=None``, ``-32600`` a request id or ``None``, ``-32601``/``-32602``/``-32603``
    and ``-32000`` a request id, and ``-32000`` a ``{code, details?}`` ``data`` (see
    :func:`operational_error`).
    """
    error: JSONObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    reason = _check_error(id, error)
    if reason is not None:
        raise LocalProtocolError(reason)
    return {"jsonrpc": JSONRPC_VERSION, "id": id, "error": error}


def operational_error(
    id: str, wire_code: WireCode, message: str, details: JSONValue = None
) -> JSONObject:
    """A ``-32000`` error response frame object reporting ``wire_code`` for request ``id``.

    ``details=None`` leaves ``data.details`` out.
    """
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
