"""Message shapes: the shared message vectors, boundaries, and agreement with the schema.

The hand-written validator in ``runner.protocol.messages`` is checked against
``run-1.schema.json`` (jsonschema, Draft 2020-12) on generated and mutated frames. The
verdict compared is "valid as some Run/1 frame": the schema is one ``oneOf`` over all
frame kinds and cannot know direction or correlation, so our side is classify + params
of any Run/1 request method + the result shape of *any* method. Two documented
differences are taken out of the comparison:

- the schema's ``pattern`` regexes are ECMA-262, where ``$`` is the end of the input;
  Python's ``re.search`` (used by jsonschema) also lets ``$`` match before a final
  ``"\\n"``, so the reference validator here gets ``\\Z`` instead of ``$``;
- the seed requires the endpoint references of ``flow/run`` ``channels`` grants to be
  distinct (PROTOCOL.md §4), which the schema cannot express.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from runner.protocol import messages
from runner.protocol.codes import WIRE_CODES, LocalProtocolError, OperationError, ProtocolViolation
from runner.protocol.messages import (
    CHANNEL_METHODS,
    COMPONENT_TO_HOST_METHODS,
    HOST_TO_COMPONENT_METHODS,
    MAX_SAFE_INTEGER,
    ErrorResponse,
    Notification,
    Request,
    Success,
    classify,
    validate_capability_result,
    validate_channel_result,
    validate_params,
    validate_result,
    validate_run_result,
)
from speckit import load_spec

_load = load_spec


SCHEMA = _load("run-1.schema.json")
FIXTURES = _load("conformance/messages.json")
REQUEST_METHODS = HOST_TO_COMPONENT_METHODS | COMPONENT_TO_HOST_METHODS
RESULT_METHODS = ("flow/run", "capability/call", *sorted(CHANNEL_METHODS))


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


def _definition_validator(definition: str) -> Draft202012Validator:
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


def test_stock_jsonschema_lets_dollar_match_before_a_final_newline() -> None:
    # Why the reference validator gets \Z: ECMA-262 (the schema's regex dialect) and the
    # spec reject "host:1<LF>" as an id; Python's re.search with "$" accepts it.
    frame = {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "host:1\n"}}
    assert Draft202012Validator(SCHEMA).is_valid(frame)
    assert not FRAME_VALIDATOR.is_valid(frame)
    assert not frame_verdict(frame)


# --- the shared vectors --------------------------------------------------------------

# The stage each known invalid vector must fail at; new corpus vectors need only fail.
EXPECTED_STAGE = {
    "numeric-request-id": "envelope",
    "unknown-root-param": "params",
    "cancel-is-not-a-request": "kind",  # a request-form request/cancel gets -32601
    "effect-result-has-two-arms": "result",
    "effect-error-missing-data": "result",
    "intent-is-an-object": "params",
    "channel-create-exclusive-contract": "params",
    "channel-unsupported-delivery": "params",
    "channel-send-rejects-missing-value": "params",
    "channel-negative-sequence": "result",
    "channel-result-no-wrapper": "result",
    "channel-reader-needs-start": "result",
    "channel-call-requires-reference": "params",
}


@pytest.mark.parametrize("vector", FIXTURES["valid"], ids=lambda v: v["name"])
def test_valid_message_vector(vector: dict[str, Any]) -> None:
    assert _definition_validator(vector["definition"]).is_valid(vector["value"])
    assert verdict_as(vector["definition"], vector["value"]) == "valid"
    assert frame_verdict(vector["value"])


@pytest.mark.parametrize("vector", FIXTURES["invalid"], ids=lambda v: v["name"])
def test_invalid_message_vector(vector: dict[str, Any]) -> None:
    assert not _definition_validator(vector["definition"]).is_valid(vector["value"])
    stage = verdict_as(vector["definition"], vector["value"])
    assert stage != "valid"
    assert stage == EXPECTED_STAGE.get(vector["name"], stage)


def test_method_sets_match_schema() -> None:
    defined = {
        SCHEMA["$defs"][definition]["properties"]["method"]["const"]
        for definition in REQUEST_DEFINITIONS
    }
    assert defined == REQUEST_METHODS
    assert {"flow/run"} == HOST_TO_COMPONENT_METHODS
    assert len(COMPONENT_TO_HOST_METHODS) == 8


# --- envelope ------------------------------------------------------------------------


def _request(method: str, params: Any = None, **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": "component:1", "method": method}
    if params is not None:
        obj["params"] = params
    obj.update(extra)
    return obj


def _violation(obj: Any) -> ProtocolViolation:
    with pytest.raises(ProtocolViolation) as caught:
        classify(obj)
    reply = caught.value.reply
    assert reply is not None
    assert isinstance(classify(reply), ErrorResponse)
    assert reply["error"]["code"] == -32600  # type: ignore[index,call-overload]
    return caught.value


def test_request_without_params_is_an_envelope() -> None:
    message = classify(_request("tools/list"))
    assert message == Request("component:1", "tools/list", None)
    assert validate_params("channel/next", None) == "params is required"
    assert not frame_verdict(_request("channel/next"))


@pytest.mark.parametrize("params", [None, 1, "x", True])
def test_request_params_must_be_object_or_array(params: Any) -> None:
    obj = {"jsonrpc": "2.0", "id": "component:1", "method": "channel/next", "params": params}
    assert _violation(obj).reply["id"] == "component:1"  # type: ignore[index]
    note = {"jsonrpc": "2.0", "method": "x/y", "params": params}
    assert _violation(note).reply["id"] is None  # type: ignore[index]


def test_array_params_are_an_envelope_but_not_run1_params() -> None:
    message = classify(_request("channel/next", ["source:read"]))
    assert isinstance(message, Request)
    assert validate_params("channel/next", message.params) == "params must be an object"


@pytest.mark.parametrize(
    ("obj", "reply_id"),
    [
        ([], None),
        ([{"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "a"}}], None),
        ("text", None),
        ({}, None),
        ({"jsonrpc": "2.0"}, None),
        (_request("channel/next", {"endpoint": "e"}, extra=1), "component:1"),
        (_request("channel/next", {"endpoint": "e"}, jsonrpc="1.0"), "component:1"),
        (_request("channel/next", {"endpoint": "e"}, id=1), None),
        (_request("channel/next", {"endpoint": "e"}, id=None), None),
        (_request("channel/next", {"endpoint": "e"}, id="-bad"), None),
        (_request("channel/next", {"endpoint": "e"}, id="ok\n"), None),
        (_request("channel/next", {"endpoint": "e"}, result=None), None),
        (_request(7, {"endpoint": "e"}), "component:1"),  # type: ignore[arg-type]
        ({"jsonrpc": "2.0", "id": "a", "result": 1, "error": {}}, None),
        ({"jsonrpc": "2.0", "id": "a", "result": 1, "extra": 1}, None),
        ({"jsonrpc": "2.0", "id": 1, "result": 1}, None),
        ({"jsonrpc": "2.0", "id": None, "result": 1}, None),
        ({"id": "a", "result": 1}, None),
        ({"jsonrpc": "2.0", "method": "request/cancel"}, None),
        ({"jsonrpc": "2.0", "method": "request/cancel", "params": {}}, None),
        ({"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": 2}}, None),
        (
            {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "a", "x": 1}},
            None,
        ),
        ({"jsonrpc": "2.0", "method": "request/cancel", "params": ["a"]}, None),
        ({"jsonrpc": "2.0", "method": "x", "extra": 1}, None),
    ],
)
def test_invalid_envelopes(obj: Any, reply_id: str | None) -> None:
    assert _violation(obj).reply["id"] == reply_id  # type: ignore[index]


def test_notifications() -> None:
    cancel = classify(messages.cancel_notification("component:2"))
    assert cancel == Notification("request/cancel", {"requestId": "component:2"})
    assert classify({"jsonrpc": "2.0", "method": "x/progress"}) == Notification("x/progress", None)
    # A request method sent without id is a notification, ignored by the receiver.
    assert isinstance(
        classify({"jsonrpc": "2.0", "method": "channel/next", "params": {}}), Notification
    )


@pytest.mark.parametrize(
    ("response_id", "error", "ok"),
    [
        ("a", {"code": -32000, "message": "m", "data": {"code": "UNAVAILABLE"}}, True),
        (
            "a",
            {"code": -32000.0, "message": "m", "data": {"code": "LAGGED", "details": None}},
            True,
        ),
        ("a", {"code": -32000, "message": "m"}, False),
        ("a", {"code": -32000, "message": "m", "data": None}, False),
        ("a", {"code": -32000, "message": "m", "data": {"code": "PROTOCOL_ERROR"}}, False),
        ("a", {"code": -32000, "message": "m", "data": {"code": "LAGGED", "x": 1}}, False),
        (None, {"code": -32000, "message": "m", "data": {"code": "UNAVAILABLE"}}, False),
        (None, {"code": -32700, "message": "Parse error"}, True),
        (None, {"code": -32700, "message": "Parse error", "data": [1]}, True),
        ("a", {"code": -32700, "message": "Parse error"}, False),
        (None, {"code": -32600, "message": "Invalid Request"}, True),
        ("a", {"code": -32600, "message": "Invalid Request", "data": "x"}, True),
        (1, {"code": -32600, "message": "Invalid Request"}, False),
        ("a", {"code": -32601, "message": "Method not found"}, True),
        ("a", {"code": -32602, "message": "Invalid params"}, True),
        ("a", {"code": -32603, "message": "Internal error"}, True),
        (None, {"code": -32601, "message": "Method not found"}, False),
        (None, {"code": -32603, "message": "Internal error"}, False),
        ("a", {"code": -32001, "message": "m"}, False),
        ("a", {"code": -32601.5, "message": "m"}, False),
        ("a", {"code": True, "message": "m"}, False),
        ("a", {"code": "-32601", "message": "m"}, False),
        ("a", {"code": -32601, "message": ""}, False),
        ("a", {"code": -32601, "message": 5}, False),
        ("a", {"code": -32601}, False),
        ("a", {"message": "m"}, False),
        ("a", {"code": -32601, "message": "m", "extra": 1}, False),
        ("a", [], False),
    ],
)
def test_error_object_variants(response_id: Any, error: Any, ok: bool) -> None:
    obj = {"jsonrpc": "2.0", "id": response_id, "error": error}
    assert schema_verdict(obj) == ok
    if ok:
        message = classify(obj)
        assert isinstance(message, ErrorResponse)
        assert message.code == int(error["code"])
        assert message.message == error["message"]
    else:
        assert _violation(obj).reply["id"] is None  # type: ignore[index]


def test_operation_error_from_response() -> None:
    response = classify(messages.operational_error("component:1", "LAGGED", "behind", {"n": 3}))
    assert isinstance(response, ErrorResponse)
    error = response.operation_error()
    assert isinstance(error, OperationError)
    assert (error.code, error.message, error.details) == ("LAGGED", "behind", {"n": 3})
    standard = classify(messages.error_response("component:1", -32602, "Invalid params"))
    assert isinstance(standard, ErrorResponse)
    assert standard.operation_error() is None


# --- boundaries ----------------------------------------------------------------------


def _root_params(**changes: Any) -> dict[str, Any]:
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


def _child_params(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"operationId": "research:1", "slot": "research", "input": None}
    params.update(changes)
    return params


def _grant(endpoint: str, direction: str = "send", delivery: str = "direct") -> dict[str, Any]:
    grant: dict[str, Any] = {"endpoint": endpoint, "direction": direction, "delivery": delivery}
    if direction == "receive":
        grant["startSequence"] = 1
    return grant


def _ok(method: str, params: dict[str, Any]) -> bool:
    ours = validate_params(method, params) is None
    frame = {"jsonrpc": "2.0", "id": "x", "method": method, "params": params}
    assert schema_verdict(frame) == ours, (method, params)
    return ours


def test_id_bytes_128_and_129() -> None:
    for size, ok in ((1, True), (128, True), (129, False)):
        request_id = "a" * size
        assert messages.is_wire_id(request_id) == ok
        assert frame_verdict(_request("channel/next", {"endpoint": "e"}, id=request_id)) == ok
        assert _ok("channel/next", {"endpoint": request_id}) == ok
        assert _ok("flow/run-child", _child_params(operationId=request_id)) == ok
    assert not messages.is_wire_id("")
    assert not messages.is_wire_id("é")
    assert messages.is_wire_id("Component.1:a/b-c_d".replace("_", "."))


def test_local_name_64_and_65() -> None:
    assert _ok("flow/run-child", _child_params(slot="a" * 64))
    assert not _ok("flow/run-child", _child_params(slot="a" * 65))
    for bad in ("", "A", "a--b", "-a", "a-", "a_b", "a b"):
        assert not _ok("flow/run-child", _child_params(slot=bad))
    assert _ok("flow/run-child", _child_params(slot="a-1-b2"))


def test_intent_16384_and_16385_scalars() -> None:
    assert _ok("flow/run-child", _child_params(intent="𝄞" * 16_384))  # 4 UTF-8 bytes each
    assert not _ok("flow/run-child", _child_params(intent="𝄞" * 16_385))
    assert not _ok("flow/run-child", _child_params(intent=""))


def test_error_message_1024_and_1025_scalars() -> None:
    for size, ok in ((1024, True), (1025, False)):
        obj = {"jsonrpc": "2.0", "id": "a", "error": {"code": -32601, "message": "ü" * size}}
        assert frame_verdict(obj) == schema_verdict(obj) == ok


def test_deadline_bounds() -> None:
    assert _ok("flow/run", _root_params(deadlineUnixMs=0))
    assert _ok("flow/run", _root_params(deadlineUnixMs=MAX_SAFE_INTEGER))
    assert _ok("flow/run", _root_params(deadlineUnixMs=5.0))  # JSON/1: 5.0 is the value 5
    for bad in (MAX_SAFE_INTEGER + 1, -1, 5.5, True, False, "5", None):
        assert not _ok("flow/run", _root_params(deadlineUnixMs=bad))


def test_attachments_256_and_257() -> None:
    def attachments(count: int) -> dict[str, Any]:
        return {f"a{i}": {"path": f"/mnt/{i}", "access": "read-write"} for i in range(count)}

    assert _ok("flow/run", _root_params(attachments=attachments(256)))
    assert not _ok("flow/run", _root_params(attachments=attachments(257)))


def test_channel_maps_256_and_257() -> None:
    def grants(count: int) -> dict[str, Any]:
        return {f"c{i}": _grant(f"e{i}") for i in range(count)}

    def references(count: int) -> dict[str, Any]:
        return {f"c{i}": f"e{i}" for i in range(count)}

    assert _ok("flow/run", _root_params(channels=grants(256)))
    assert not _ok("flow/run", _root_params(channels=grants(257)))
    assert _ok("flow/run-child", _child_params(channels=references(256)))
    assert not _ok("flow/run-child", _child_params(channels=references(257)))


def test_root_grants_need_distinct_endpoints() -> None:
    # The seed rule (PROTOCOL.md §4) that the schema cannot express.
    params = _root_params(channels={"a": _grant("e1"), "b": _grant("e1", "receive")})
    assert validate_params("flow/run", params) == (
        "channels grants must have distinct endpoint references"
    )


@pytest.mark.parametrize(
    ("changes", "ok"),
    [
        ({}, True),
        ({"protocol": "run/2"}, False),
        ({"settings": []}, False),
        ({"scratch": ""}, False),
        ({"attachments": {"src": {"path": "", "access": "read"}}}, False),
        ({"attachments": {"src": {"path": "/a", "access": "write"}}}, False),
        ({"attachments": {"src": {"path": "/a", "access": "read", "x": 1}}}, False),
        ({"attachments": {"Src": {"path": "/a", "access": "read"}}}, False),
        ({"attachments": []}, False),
        ({"channels": {}}, True),
        ({"channels": {"in": _grant("r1", "receive", "broadcast") | {"startSequence": 7}}}, True),
        ({"channels": {"in": _grant("r1", "receive") | {"startSequence": 2}}}, False),
        ({"channels": {"in": _grant("r1", "receive") | {"startSequence": 1.0}}}, True),
        ({"channels": {"in": _grant("r1", "send") | {"startSequence": 1}}}, False),
        (
            {"channels": {"in": {"endpoint": "r1", "direction": "receive", "delivery": "direct"}}},
            False,
        ),
        ({"channels": {"in": _grant("r1", "both")}}, False),
        ({"channels": {"in": _grant("r1", "send", "replay")}}, False),
        ({"channels": {"in": "r1"}}, False),
        ({"runId": "forbidden"}, False),
    ],
)
def test_flow_run_params(changes: dict[str, Any], ok: bool) -> None:
    assert _ok("flow/run", _root_params(**changes)) == ok


CONTRACT = {
    "id": "https://example.com/contracts/updates",
    "version": "1.2.3",
    "digest": "sha256:" + "ab" * 32,
}


@pytest.mark.parametrize(
    ("changes", "ok"),
    [
        ({}, True),
        ({"id": "https://a.b/c"}, True),
        ({"id": "http://example.com/c"}, False),
        ({"id": "https://Example.com/c"}, False),
        ({"id": "https://10.0.0.1/c"}, False),
        ({"id": "https://example.com:8443/c"}, False),
        ({"id": "https://example.com/"}, False),
        ({"id": "https://example.com/a/../b"}, False),
        ({"id": "https://localhost/c"}, False),
        ({"version": "01.2.3"}, False),
        ({"version": "1.2"}, False),
        ({"version": "v1.2.3"}, False),
        ({"digest": "sha256:" + "AB" * 32}, False),
        ({"digest": "sha256:" + "ab" * 31}, False),
        ({"extra": 1}, False),
    ],
)
def test_contract_identity(changes: dict[str, Any], ok: bool) -> None:
    grant = _grant("w", "send") | {"contract": {**CONTRACT, **changes}}
    assert _ok("flow/run", _root_params(channels={"out": grant})) == ok


@pytest.mark.parametrize(
    ("method", "params", "ok"),
    [
        ("flow/run-child", _child_params(channels={"events": "source:write"}), True),
        ("flow/run-child", _child_params(extra=1), False),
        ("flow/run-child", {"slot": "a", "input": 1}, False),
        ("flow/run-child", _child_params(input=None), True),
        ("capability/call", _child_params(method="write"), True),
        ("capability/call", _child_params(method="Write"), False),
        ("capability/call", _child_params(method="write", intent="x"), False),
        ("capability/call", _child_params(), False),
        ("request/cancel", {"requestId": "host:1"}, True),
        ("channel/create", {}, True),
        ("channel/create", {"delivery": "broadcast", "schema": {"type": "string"}}, True),
        ("channel/create", {"schema": False}, True),
        ("channel/create", {"schema": None}, False),
        ("channel/create", {"schema": "x"}, False),
        ("channel/create", {"contract": "./c.json"}, True),
        ("channel/create", {"contract": "c.json"}, False),
        ("channel/create", {"contract": "./a\\b"}, False),
        ("channel/create", {"contract": "./"}, False),
        ("channel/create", {"contract": "./" + "a" * 4094}, True),
        ("channel/create", {"contract": "./" + "a" * 4095}, False),
        ("channel/create", {"delivery": None}, False),
        ("channel/subscribe", {"source": "src:1"}, True),
        ("channel/subscribe", {"endpoint": "src:1"}, False),
        ("channel/send", {"endpoint": "w", "value": None}, True),
        ("channel/next", {"endpoint": "r", "value": None}, False),
        ("channel/close", {"endpoint": "w"}, True),
        ("channel/release", {"endpoint": ""}, False),
    ],
)
def test_method_params(method: str, params: dict[str, Any], ok: bool) -> None:
    if method == "request/cancel":
        assert (validate_params(method, params) is None) == ok
    else:
        assert _ok(method, params) == ok


def test_unknown_method_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        validate_params("tools/list", {})
    with pytest.raises(LocalProtocolError):
        validate_result("request/cancel", None)
    with pytest.raises(LocalProtocolError):
        validate_channel_result("flow/run", None)


# --- results -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "ok"),
    [
        ({"outcome": "done", "output": None}, True),
        ({"outcome": "too-hot", "output": [1]}, True),
        ({"outcome": "done"}, False),
        ({"outcome": "Done", "output": 1}, False),
        ({"outcome": "done", "output": 1, "x": 1}, False),
        (None, False),
    ],
)
def test_run_result(result: Any, ok: bool) -> None:
    assert (validate_run_result(result) is None) == ok


@pytest.mark.parametrize(
    ("result", "ok"),
    [
        ({"value": None}, True),
        ({"error": {"name": "not-found", "data": None}}, True),
        ({"error": {"name": "not-found"}}, False),
        ({"error": {"name": "NotFound", "data": 1}}, False),
        ({"error": {"name": "x", "data": 1, "y": 2}}, False),
        ({"error": "x"}, False),
        ({"value": 1, "error": {"name": "x", "data": 1}}, False),
        ({"value": 1, "x": 1}, False),
        ({}, False),
        ([], False),
    ],
)
def test_capability_result(result: Any, ok: bool) -> None:
    assert (validate_capability_result(result) is None) == ok


PAIR = {"send": _grant("w"), "receive": _grant("r", "receive")}
BROADCAST = {"send": _grant("w", "send", "broadcast"), "source": "src"}
SUBSCRIPTION = _grant("r", "receive", "broadcast") | {"startSequence": 9}


@pytest.mark.parametrize(
    ("method", "result", "ok"),
    [
        ("channel/create", PAIR, True),
        ("channel/create", BROADCAST, True),
        ("channel/create", {**PAIR, "send": _grant("w", "send", "broadcast")}, False),
        ("channel/create", {**PAIR, "receive": SUBSCRIPTION}, False),
        ("channel/create", {**PAIR, "receive": _grant("r")}, False),
        ("channel/create", {**BROADCAST, "send": _grant("w")}, False),
        ("channel/create", {**BROADCAST, "source": 1}, False),
        ("channel/create", {"send": _grant("w")}, False),
        ("channel/create", None, False),
        ("channel/subscribe", SUBSCRIPTION, True),
        ("channel/subscribe", _grant("r", "receive"), False),
        ("channel/subscribe", _grant("r", "send", "broadcast"), False),
        ("channel/send", None, True),
        ("channel/send", {}, False),
        ("channel/close", None, True),
        ("channel/next", {"item": {"sequence": 1, "value": None}}, True),
        ("channel/next", {"item": {"sequence": MAX_SAFE_INTEGER, "value": 1}}, True),
        ("channel/next", {"item": {"sequence": MAX_SAFE_INTEGER + 1, "value": 1}}, False),
        ("channel/next", {"item": {"sequence": 0, "value": 1}}, False),
        ("channel/next", {"item": {"sequence": 1}}, False),
        ("channel/next", {"end": {"lastSequence": 0}}, True),
        ("channel/next", {"end": {"lastSequence": -1}}, False),
        ("channel/next", {"end": {}}, False),
        ("channel/next", {"end": {"lastSequence": 0}, "item": None}, False),
        ("channel/release", {"status": "released"}, True),
        ("channel/release", {"status": "released", "lastSequence": 0}, False),
        ("channel/release", {"status": "ended", "lastSequence": 4}, True),
        ("channel/release", {"status": "ended"}, False),
        ("channel/release", {"status": "failed", "code": "DISCONNECTED", "details": {}}, True),
        ("channel/release", {"status": "failed", "code": "CHANNEL_LOST"}, False),
        ("channel/release", {"status": "gone"}, False),
    ],
)
def test_channel_results(method: str, result: Any, ok: bool) -> None:
    assert (validate_channel_result(method, result) is None) == ok
    frame = {"jsonrpc": "2.0", "id": "x", "result": result}
    if ok:
        assert schema_verdict(frame)


# --- builders ------------------------------------------------------------------------


def test_builders_round_trip() -> None:
    root = messages.request("host:1", "flow/run", _root_params())
    assert classify(root) == Request("host:1", "flow/run", _root_params())
    assert schema_verdict(root)
    assert classify(messages.request("host:2", "x/custom", [1])) == Request(
        "host:2", "x/custom", [1]
    )
    assert classify(messages.result_response("c:1", None)) == Success("c:1", None)
    built = messages.operational_error("c:1", "UNCERTAIN", "lost the provider")
    assert built["error"] == {
        "code": -32000,
        "message": "lost the provider",
        "data": {"code": "UNCERTAIN"},
    }
    assert schema_verdict(built)
    for code in WIRE_CODES:
        assert schema_verdict(messages.operational_error("c:1", code, "m", [code]))
    parse = messages.error_response(None, -32700, "Parse error")
    assert schema_verdict(parse) and "data" not in parse["error"]  # type: ignore[operator]
    error = OperationError("DISCONNECTED", "reader gone", {"endpoint": "r"})
    reported = messages.operation_error_response("c:2", error)
    assert classify(reported) == ErrorResponse("c:2", error.to_error_object())
    assert schema_verdict(messages.cancel_notification("host:1"))


@pytest.mark.parametrize(
    "build",
    [
        lambda: messages.request("bad id", "x/y", {}),
        lambda: messages.request("host:1", "flow/run", _root_params(protocol="run/2")),
        lambda: messages.request("host:1", "x/y", None),  # type: ignore[arg-type]
        lambda: messages.result_response("", None),
        lambda: messages.error_response("a", -32700, "Parse error"),
        lambda: messages.error_response(None, -32601, "Method not found"),
        lambda: messages.error_response("a", -32601, ""),
        lambda: messages.error_response("a", -32601, "x" * 1025),
        lambda: messages.error_response("a", -32099, "custom"),
        lambda: messages.error_response("a", -32000, "missing data"),
        lambda: messages.operational_error("a", "PROTOCOL_ERROR", "local only"),  # type: ignore[arg-type]
        lambda: messages.operational_error(None, "CANCELLED", "no id"),  # type: ignore[arg-type]
        lambda: messages.operation_error_response("a", OperationError("CHANNEL_LOST", "x")),
        lambda: messages.cancel_notification("no spaces"),
    ],
)
def test_builders_refuse_invalid_frames(build: Callable[[], object]) -> None:
    with pytest.raises(LocalProtocolError):
        build()


# --- agreement with run-1.schema.json on generated frames ------------------------------

wire_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,10}", fullmatch=True) | st.sampled_from(
    ["host:1", "component:7", "a" * 128]
)
local_names = st.from_regex(r"[a-z0-9]{1,5}(-[a-z0-9]{1,3}){0,2}", fullmatch=True) | st.just(
    "a" * 64
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(-1e6, 1e6, allow_nan=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
deliveries = st.sampled_from(["direct", "broadcast"])
contracts = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["https://example.com/contracts/updates", "https://a.b/c"]),
        "version": st.sampled_from(["1.0.0", "0.12.3"]),
        "digest": st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True),
    }
)


def grants(direction: str | None = None, delivery: str | None = None) -> st.SearchStrategy[Any]:
    fixed_delivery = st.just(delivery) if delivery else deliveries
    sender = st.fixed_dictionaries(
        {"endpoint": wire_ids, "direction": st.just("send"), "delivery": fixed_delivery},
        optional={"contract": contracts},
    )
    receiver = fixed_delivery.flatmap(
        lambda chosen: st.fixed_dictionaries(
            {
                "endpoint": wire_ids,
                "direction": st.just("receive"),
                "delivery": st.just(chosen),
                "startSequence": st.just(1)
                if chosen == "direct"
                else st.integers(1, MAX_SAFE_INTEGER),
            },
            optional={"contract": contracts},
        )
    )
    if direction == "send":
        return sender
    if direction == "receive":
        return receiver
    return sender | receiver


references = st.dictionaries(local_names, wire_ids, max_size=3)
PARAMS: dict[str, st.SearchStrategy[Any]] = {
    "flow/run": st.fixed_dictionaries(
        {
            "protocol": st.just("run/1"),
            "input": json_values,
            "settings": st.dictionaries(st.text(max_size=4), json_values, max_size=2),
            "attachments": st.dictionaries(
                local_names,
                st.fixed_dictionaries(
                    {
                        "path": st.text(min_size=1, max_size=8),
                        "access": st.sampled_from(["read", "read-write"]),
                    }
                ),
                max_size=3,
            ),
            "scratch": st.text(min_size=1, max_size=8),
            "deadlineUnixMs": st.integers(0, MAX_SAFE_INTEGER),
        },
        optional={"channels": st.dictionaries(local_names, grants(), max_size=3)},
    ),
    "flow/run-child": st.fixed_dictionaries(
        {"operationId": wire_ids, "slot": local_names, "input": json_values},
        optional={"intent": st.text(min_size=1, max_size=10), "channels": references},
    ),
    "capability/call": st.fixed_dictionaries(
        {"operationId": wire_ids, "slot": local_names, "method": local_names, "input": json_values},
        optional={"channels": references},
    ),
    "channel/create": st.fixed_dictionaries(
        {},
        optional={
            "delivery": deliveries,
            "schema": st.booleans() | st.dictionaries(st.text(max_size=4), json_values, max_size=2),
            "contract": st.from_regex(r"\./[a-z./]{1,10}", fullmatch=True),
        },
    ),
    "channel/subscribe": st.fixed_dictionaries({"source": wire_ids}),
    "channel/send": st.fixed_dictionaries({"endpoint": wire_ids, "value": json_values}),
    "channel/next": st.fixed_dictionaries({"endpoint": wire_ids}),
    "channel/close": st.fixed_dictionaries({"endpoint": wire_ids}),
    "channel/release": st.fixed_dictionaries({"endpoint": wire_ids}),
}
sequences = st.integers(0, MAX_SAFE_INTEGER)
results = st.one_of(
    st.fixed_dictionaries({"outcome": local_names, "output": json_values}),
    st.fixed_dictionaries({"value": json_values}),
    st.fixed_dictionaries(
        {"error": st.fixed_dictionaries({"name": local_names, "data": json_values})}
    ),
    st.none(),
    st.fixed_dictionaries(
        {"send": grants("send", "direct"), "receive": grants("receive", "direct")}
    ),
    st.fixed_dictionaries({"send": grants("send", "broadcast"), "source": wire_ids}),
    grants("receive", "broadcast"),
    st.fixed_dictionaries(
        {"item": st.fixed_dictionaries({"sequence": st.integers(1, 99), "value": json_values})}
    ),
    st.fixed_dictionaries({"end": st.fixed_dictionaries({"lastSequence": sequences})}),
    st.just({"status": "released"}),
    st.fixed_dictionaries({"status": st.just("ended"), "lastSequence": sequences}),
    st.fixed_dictionaries(
        {"status": st.just("failed"), "code": st.sampled_from(WIRE_CODES)},
        optional={"details": json_values},
    ),
)
error_objects = st.one_of(
    st.tuples(
        wire_ids,
        st.fixed_dictionaries(
            {
                "code": st.just(-32000),
                "message": st.text(min_size=1, max_size=8),
                "data": st.fixed_dictionaries(
                    {"code": st.sampled_from(WIRE_CODES)}, optional={"details": json_values}
                ),
            }
        ),
    ),
    st.sampled_from([-32700, -32600, -32601, -32602, -32603]).flatmap(
        lambda code: st.tuples(
            st.none() if code == -32700 else (wire_ids | st.none()),
            st.fixed_dictionaries(
                {"code": st.just(code), "message": st.text(min_size=1, max_size=8)},
                optional={"data": json_values},
            ),
        )
    ),
)


@st.composite
def valid_frames(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["request", "cancel", "success", "error"]))
    if kind == "request":
        method = draw(st.sampled_from(sorted(PARAMS)))
        return {
            "jsonrpc": "2.0",
            "id": draw(wire_ids),
            "method": method,
            "params": draw(PARAMS[method]),
        }
    if kind == "cancel":
        return {
            "jsonrpc": "2.0",
            "method": "request/cancel",
            "params": {"requestId": draw(wire_ids)},
        }
    if kind == "success":
        return {"jsonrpc": "2.0", "id": draw(wire_ids), "result": draw(results)}
    response_id, error = draw(error_objects)
    return {"jsonrpc": "2.0", "id": response_id, "error": error}


def _property_names(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        yield from node.get("properties", {})
        for value in node.values():
            yield from _property_names(value)
    elif isinstance(node, list):
        for item in node:
            yield from _property_names(item)


MEMBER_NAMES = sorted(set(_property_names(SCHEMA)))
INTERESTING: list[Any] = [
    None, True, False, 0, 1, -1, 1.0, 1.5, 2, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1,
    -32000, -32000.0, -32700, -32600, -32601, -32602, -32603, -32099,
    "", "2.0", "run/1", "a" * 128, "a" * 129, "a" * 64, "a" * 65, "ok\n", "Host:1", "-bad",
    "x y", "direct", "broadcast", "replay", "send", "receive", "read", "read-write",
    "released", "ended", "failed", "LAGGED", "PROTOCOL_ERROR", "./c.json", "./a\\b",
    "flow/run", "request/cancel", "channel/next", "capability/call", "tools/list",
    {}, [], {"code": "UNAVAILABLE"}, {"requestId": "a"}, CONTRACT,
]  # fmt: skip
mutation_values = st.sampled_from(INTERESTING) | json_values | wire_ids | local_names


# Drawn values are deep-copied before a frame takes them: the sampled ones are shared
# objects, and a later mutation of the frame must not change what the next draw sees.


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nodes(item, (*path, index))


def _at(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        root = root[step]
    return root


@st.composite
def mutated_frames(draw: st.DrawFn) -> Any:
    frame: Any = copy.deepcopy(draw(valid_frames()))
    for _ in range(draw(st.integers(0, 3))):
        nodes = list(_nodes(frame))
        op = draw(st.sampled_from(["drop", "add", "replace"]))
        if op == "add":
            objects = [path for path, value in nodes if isinstance(value, dict)]
            if objects:
                target = _at(frame, draw(st.sampled_from(objects)))
                name = draw(st.sampled_from(MEMBER_NAMES) | st.text(max_size=3))
                target[name] = copy.deepcopy(draw(mutation_values))
            continue
        inner = [path for path, _ in nodes if path]
        if not inner:
            frame = copy.deepcopy(draw(mutation_values))
            continue
        path = draw(st.sampled_from(inner))
        parent = _at(frame, path[:-1])
        if op == "drop":
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(draw(mutation_values))
    return frame


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_frames())
def test_generated_frames_are_valid_for_both(frame: Any) -> None:
    assert frame_verdict(frame) == schema_verdict(frame), frame


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_frames())
def test_mutated_frames_agree_with_schema(frame: Any) -> None:
    assert frame_verdict(frame) == schema_verdict(frame), frame
