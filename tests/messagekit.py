"""What the Run/1 message tests share: the schema as the reference, our verdicts, frames.

The hand-written checks (``runner.protocol.envelope``, ``.params``, ``.results``) are
compared with ``run-1.schema.json`` (jsonschema, Draft 2020-12). The verdict compared is
"valid as some Run/1 frame": the schema is one ``oneOf`` over all frame kinds and cannot
know direction or correlation, so our side is classify + params of any Run/1 request
method + the result shape of *any* method. Two documented differences are taken out of
the comparison:

- the schema's ``pattern`` regexes are ECMA-262, where ``$`` is the end of the input;
  Python's ``re.search`` (used by jsonschema) also lets ``$`` match before a final
  ``"\\n"``, so the reference validator here gets ``\\Z`` instead of ``$``;
- the seed requires the endpoint references of ``flow/run`` ``channels`` grants to be
  distinct (PROTOCOL.md §4), which the schema cannot express.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from runner.protocol.codes import ProtocolViolation
from runner.protocol.envelope import ErrorResponse, Notification, Request, Success, classify
from runner.protocol.names import (
    CHANNEL_METHODS,
    COMPONENT_TO_HOST_METHODS,
)
from runner.protocol.params import validate_params
from runner.protocol.results import (
    validate_capability_result,
    validate_channel_result,
    validate_run_result,
)
from speckit import load_spec

SCHEMA = load_spec("run-1.schema.json")
FIXTURES = load_spec("conformance/messages.json")
REQUEST_METHODS = {"flow/run"} | COMPONENT_TO_HOST_METHODS  # the host sends only flow/run
RESULT_METHODS = ("flow/run", "capability/call", *sorted(CHANNEL_METHODS))


def validate_result(method: str, result: Any) -> str | None:
    """The success ``result`` of a Run/1 request method, by the method it answers."""
    if method in ("flow/run", "flow/run-child"):
        return validate_run_result(result)
    if method == "capability/call":
        return validate_capability_result(result)
    return validate_channel_result(method, result)


def _ecma_patterns(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: value.replace("$", r"\Z")
            if key == "pattern" and isinstance(value, str)
            else _ecma_patterns(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_ecma_patterns(item) for item in node]
    return node


REFERENCE = _ecma_patterns(SCHEMA)
Draft202012Validator.check_schema(SCHEMA)
FRAME_VALIDATOR = Draft202012Validator(REFERENCE)


def definition_validator(definition: str) -> Draft202012Validator:
    return Draft202012Validator({**REFERENCE, "oneOf": [{"$ref": f"#/$defs/{definition}"}]})


# --- our verdicts --------------------------------------------------------------------

REQUEST_DEFINITIONS = {
    "flowRunRequest": "flow/run",
    "childFlowRequest": "flow/run-child",
    "capabilityCallRequest": "capability/call",
    "channelCreateRequest": "channel/create",
    "channelSubscribeRequest": "channel/subscribe",
    "channelSendRequest": "channel/send",
    "channelNextRequest": "channel/next",
    "channelCloseRequest": "channel/close",
    "channelReleaseRequest": "channel/release",
}
RESULT_DEFINITIONS: dict[str, tuple[str, ...]] = {
    "runSuccessResponse": ("flow/run",),
    "capabilitySuccessResponse": ("capability/call",),
    "channelSuccessResponse": tuple(sorted(CHANNEL_METHODS)),
}
ERROR_DEFINITIONS: dict[str, Callable[[int], bool]] = {
    "errorResponse": lambda code: True,
    "flowErrorResponse": lambda code: code == -32000,
    "standardErrorResponse": lambda code: code != -32000,
    "parseErrorResponse": lambda code: code == -32700,
    "invalidRequestResponse": lambda code: code == -32600,
    "correlatedStandardErrorResponse": lambda code: code in (-32601, -32602, -32603),
}


def verdict_as(definition: str, obj: Any) -> str:
    """``"valid"``, or the stage at which we reject ``obj`` as a ``definition`` frame."""
    try:
        message = classify(obj)
    except ProtocolViolation:
        return "envelope"
    if definition in REQUEST_DEFINITIONS:
        if not isinstance(message, Request):
            return "kind"
        if message.method != REQUEST_DEFINITIONS[definition]:
            return "method"
        return "valid" if validate_params(message.method, message.params) is None else "params"
    if definition == "requestCancelNotification":
        if not isinstance(message, Notification):
            return "kind"
        return "valid" if message.method == "request/cancel" else "method"
    if definition in RESULT_DEFINITIONS:
        if not isinstance(message, Success):
            return "kind"
        methods = RESULT_DEFINITIONS[definition]
        ok = any(validate_result(method, message.result) is None for method in methods)
        return "valid" if ok else "result"
    if not isinstance(message, ErrorResponse):
        return "kind"
    return "valid" if ERROR_DEFINITIONS[definition](message.code) else "code"


def frame_verdict(obj: Any) -> bool:
    """Whether ``obj`` is valid as some Run/1 frame, direction and correlation aside."""
    try:
        message = classify(obj)
    except ProtocolViolation:
        return False
    if isinstance(message, Request):
        return (
            message.method in REQUEST_METHODS
            and validate_params(message.method, message.params) is None
        )
    if isinstance(message, Notification):
        return message.method == "request/cancel"
    if isinstance(message, Success):
        return any(validate_result(method, message.result) is None for method in RESULT_METHODS)
    return True


def _duplicate_grant_endpoints(obj: Any) -> bool:
    try:
        grants = obj["params"]["channels"].values() if obj["method"] == "flow/run" else []
        endpoints = [grant["endpoint"] for grant in grants]
        return len(set(endpoints)) < len(endpoints)
    except (KeyError, TypeError, AttributeError):
        return False


def schema_verdict(obj: Any) -> bool:
    return FRAME_VALIDATOR.is_valid(obj) and not _duplicate_grant_endpoints(obj)


# --- frames the tests build --------------------------------------------------------


def request_frame(method: str, params: Any = None, **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": "component:1", "method": method}
    if params is not None:
        obj["params"] = params
    obj.update(extra)
    return obj


def violation_of(obj: Any) -> ProtocolViolation:
    with pytest.raises(ProtocolViolation) as caught:
        classify(obj)
    reply = caught.value.reply
    assert reply is not None
    assert isinstance(classify(reply), ErrorResponse)
    assert reply["error"]["code"] == -32600  # type: ignore[index,call-overload]
    return caught.value


def root_params(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "protocol": "run/1",
        "input": {"subject": "football"},
        "settings": {},
        "attachments": {"source": {"path": "/workspace/source", "access": "read"}},
        "scratch": "/workspace/scratch",
        "deadlineUnixMs": 1_787_558_400_000,
    }
    params.update(changes)
    return params


def child_params(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"operationId": "research:1", "slot": "research", "input": None}
    params.update(changes)
    return params


def make_grant(endpoint: str, direction: str = "send", delivery: str = "direct") -> dict[str, Any]:
    grant: dict[str, Any] = {"endpoint": endpoint, "direction": direction, "delivery": delivery}
    if direction == "receive":
        grant["startSequence"] = 1
    return grant


def params_ok(method: str, params: dict[str, Any]) -> bool:
    ours = validate_params(method, params) is None
    frame = {"jsonrpc": "2.0", "id": "x", "method": method, "params": params}
    assert schema_verdict(frame) == ours, (method, params)
    return ours


CONTRACT = {
    "id": "https://example.com/contracts/updates",
    "version": "1.2.3",
    "digest": "sha256:" + "ab" * 32,
}
