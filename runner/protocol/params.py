"""The params step: each Run/1 method's params, checked after the envelope (§1.3).

Failures are ``-32602`` replies and the channel stays open (a malformed ``request/cancel``
is fatal: :mod:`.envelope`). Beyond the schema, ``flow/run`` grants must name distinct
endpoints (§4). As the schema's ``integer`` and JSON/1's values have it, an integral
float passes an integer check; a bool never does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, cast

from runner.json1 import MAX_SAFE_INTEGER, JSONValue
from runner.protocol.codes import LocalProtocolError
from runner.protocol.names import (
    CAPABILITY_CALL,
    CHANNEL_CLOSE,
    CHANNEL_CREATE,
    CHANNEL_NEXT,
    CHANNEL_RELEASE,
    CHANNEL_SEND,
    CHANNEL_SUBSCRIBE,
    FLOW_RUN,
    FLOW_RUN_CHILD,
    MAX_ATTACHMENTS,
    MAX_CHANNEL_ENTRIES,
    MAX_CONTRACT_PATH_CHARS,
    MAX_INTENT_SCALARS,
    REQUEST_CANCEL,
    RUN_PROTOCOL,
    is_local_name,
    is_wire_id,
)
from runner.protocol.shapes import JSONObject, exactly, is_integer_in, members, nested, show

# Matched through ``re``'s cache: compiled when a channel first names a contract.
_CONTRACT_PATH: Final = r"\A\./[^\\]+\Z"
_CONTRACT_ID: Final = (
    r"\Ahttps://(?!(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])(?:/|\Z))"
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+"
    r"/(?!\.{1,2}(?:/|\Z))[a-z0-9._~-]+(?:/(?!\.{1,2}(?:/|\Z))[a-z0-9._~-]+)*\Z"
)
_CONTRACT_VERSION: Final = r"\A(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\Z"
_CONTRACT_DIGEST: Final = r"\Asha256:[0-9a-f]{64}\Z"

_DELIVERIES: Final = ("direct", "broadcast")
_ACCESS_MODES: Final = ("read", "read-write")


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
_NOT_CONTRACT: Final = "contract must be an object {id, version, digest}"


def _check_attachments(attachments: JSONValue) -> str | None:
    if not isinstance(attachments, dict):
        return "attachments must be an object"
    if len(attachments) > MAX_ATTACHMENTS:
        return "attachments has more than 256 entries"
    for name, attachment in attachments.items():
        if not is_local_name(name):
            return f"attachment name {show(name)} is not a LocalName"
        if not isinstance(attachment, dict):
            return f"attachment {name!r} must be an object"
        reason = members(attachment, _ATTACHMENT_MEMBERS, _ATTACHMENT_MEMBERS)
        if reason is not None:
            return f"attachment {name!r}: {reason}"
        path = attachment["path"]
        if not isinstance(path, str) or not path:
            return f"attachment {name!r}: path must be a nonempty string"
        if attachment["access"] not in _ACCESS_MODES:
            return f'attachment {name!r}: access must be "read" or "read-write"'
    return None


def _check_contract_identity(value: JSONValue) -> str | None:
    reason = nested(value, "contract", _CONTRACT_MEMBERS, _CONTRACT_MEMBERS, _NOT_CONTRACT)
    if reason is not None:
        return reason
    contract = cast(JSONObject, value)
    contract_id = contract["id"]
    if not isinstance(contract_id, str) or re.match(_CONTRACT_ID, contract_id) is None:
        return "contract.id is not a canonical https contract id"
    version = contract["version"]
    if not isinstance(version, str) or re.match(_CONTRACT_VERSION, version) is None:
        return "contract.version must be X.Y.Z"
    digest = contract["digest"]
    if not isinstance(digest, str) or re.match(_CONTRACT_DIGEST, digest) is None:
        return "contract.digest must be sha256:<64 lowercase hex>"
    return None


def check_grant(
    grant: JSONValue, direction: str | None = None, delivery: str | None = None
) -> str | None:
    """An endpoint grant (§7.1); ``direction``/``delivery`` pin what a result requires."""
    if not isinstance(grant, dict):
        return "a grant must be an object"
    actual = grant.get("direction")
    if actual == "send":
        reason = members(grant, _SENDER_REQUIRED, _SENDER_MEMBERS)
    elif actual == "receive":
        reason = members(grant, _RECEIVER_REQUIRED, _RECEIVER_MEMBERS)
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
        if not is_integer_in(start, 1, MAX_SAFE_INTEGER):
            return "grant startSequence must be an integer 1..2^53-1"
        if actual_delivery == "direct" and start != 1:
            return "a direct receiver grant must have startSequence 1"
    return None


def _check_channels(channels: JSONValue, *, grants: bool) -> str | None:
    """A ``channels`` map of at most 256 LocalNames to grants (``flow/run``, distinct
    endpoints) or to endpoint references (the calls)."""
    if not isinstance(channels, dict):
        return "channels must be an object"
    if len(channels) > MAX_CHANNEL_ENTRIES:
        return "channels has more than 256 entries"
    for name, value in channels.items():
        if not is_local_name(name):
            return f"channel name {show(name)} is not a LocalName"
        if not grants:
            if not is_wire_id(value):
                return f"channels[{name!r}] must be an endpoint reference string"
        elif (reason := check_grant(value)) is not None:
            return f"channels[{name!r}]: {reason}"
    if grants and len({cast(JSONObject, g)["endpoint"] for g in channels.values()}) < len(channels):
        return "channels grants must have distinct endpoint references"
    return None


def _check_flow_run(params: JSONObject) -> str | None:
    reason = members(params, _FLOW_RUN_REQUIRED, _FLOW_RUN_MEMBERS)
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
    if not is_integer_in(params["deadlineUnixMs"], 0, MAX_SAFE_INTEGER):
        return "deadlineUnixMs must be an integer 0..2^53-1"
    if "channels" in params:
        return _check_channels(params["channels"], grants=True)
    return None


def _check_operation(
    params: JSONObject, required: frozenset[str], allowed: frozenset[str]
) -> str | None:
    """The members of a child run or capability call, its operationId, slot and channels."""
    reason = members(params, required, allowed)
    if reason is not None:
        return reason
    if not is_wire_id(params["operationId"]):
        return "operationId must be a string of 1-128 ASCII bytes (request-id grammar)"
    if not is_local_name(params["slot"]):
        return "slot must be a LocalName"
    if "channels" in params:
        return _check_channels(params["channels"], grants=False)
    return None


def _check_flow_run_child(params: JSONObject) -> str | None:
    reason = _check_operation(params, _CHILD_REQUIRED, _CHILD_MEMBERS)
    if reason is None and "intent" in params:
        intent = params["intent"]
        if not isinstance(intent, str) or not 1 <= len(intent) <= MAX_INTENT_SCALARS:
            return "intent must be a string of 1-16,384 Unicode scalars"
    return reason


def _check_capability_call(params: JSONObject) -> str | None:
    reason = _check_operation(params, _CALL_REQUIRED, _CALL_MEMBERS)
    if reason is None and not is_local_name(params["method"]):
        return "method must be a LocalName"
    return reason


def _check_channel_create(params: JSONObject) -> str | None:
    reason = members(params, _NOTHING, _CREATE_MEMBERS)
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
            or re.match(_CONTRACT_PATH, contract) is None
        ):
            return "contract must be a package-local path ./… of at most 4,096 characters"
    return None


_check_channel_endpoint = exactly(
    _ENDPOINT_MEMBERS, "endpoint", is_wire_id, "endpoint must be an endpoint reference"
)


_PARAMS_CHECKS: Final[dict[str, _ParamsCheck]] = {
    FLOW_RUN: _check_flow_run,
    FLOW_RUN_CHILD: _check_flow_run_child,
    CAPABILITY_CALL: _check_capability_call,
    REQUEST_CANCEL: exactly(
        _CANCEL_MEMBERS, "requestId", is_wire_id, "requestId must be a request id"
    ),
    CHANNEL_CREATE: _check_channel_create,
    CHANNEL_SUBSCRIBE: exactly(
        _SUBSCRIBE_MEMBERS, "source", is_wire_id, "source must be a source reference"
    ),
    CHANNEL_SEND: exactly(
        _SEND_MEMBERS, "endpoint", is_wire_id, "endpoint must be an endpoint reference"
    ),
    CHANNEL_NEXT: _check_channel_endpoint,
    CHANNEL_CLOSE: _check_channel_endpoint,
    CHANNEL_RELEASE: _check_channel_endpoint,
}


def validate_params(method: str, params: JSONValue) -> str | None:
    """Check the params of a Run/1 method: ``None`` if valid, else the reason: the text of a
    ``-32602`` (or a cancel's fatal violation), with at most a short prefix of peer data.
    ``method`` must be a request method or ``request/cancel`` (:class:`LocalProtocolError`);
    ``params`` is ``None`` when absent, always invalid."""
    check = _PARAMS_CHECKS.get(method)
    if check is None:
        raise LocalProtocolError(f"{method!r} is not a Run/1 method with params")
    if params is None:
        return "params is required"
    if not isinstance(params, dict):
        return "params must be an object"
    return check(params)


PARAMS_METHODS: Final = frozenset(_PARAMS_CHECKS)
"""The methods whose params Run/1 defines: the nine request methods and ``request/cancel``."""
