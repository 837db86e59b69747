"""The envelope step: classify, its -32600 replies, the error-object variants."""

from __future__ import annotations

from typing import Any

import pytest

from messagekit import frame_verdict, request_frame, schema_verdict, violation_of
from runner.protocol.builders import cancel_notification, error_response, operational_error
from runner.protocol.codes import OperationError
from runner.protocol.envelope import ErrorResponse, Notification, Request, classify
from runner.protocol.params import validate_params


def test_request_without_params_is_an_envelope() -> None:
    message = classify(request_frame("tools/list"))
    assert message == Request("component:1", "tools/list", None)
    assert validate_params("channel/next", None) == "params is required"
    assert not frame_verdict(request_frame("channel/next"))


@pytest.mark.parametrize("params", [None, 1, "x", True])
def test_request_params_must_be_object_or_array(params: Any) -> None:
    obj = {"jsonrpc": "2.0", "id": "component:1", "method": "channel/next", "params": params}
    assert violation_of(obj).reply["id"] == "component:1"  # type: ignore[index]
    note = {"jsonrpc": "2.0", "method": "x/y", "params": params}
    assert violation_of(note).reply["id"] is None  # type: ignore[index]


def test_array_params_are_an_envelope_but_not_run1_params() -> None:
    message = classify(request_frame("channel/next", ["source:read"]))
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
        (request_frame("channel/next", {"endpoint": "e"}, extra=1), "component:1"),
        (request_frame("channel/next", {"endpoint": "e"}, jsonrpc="1.0"), "component:1"),
        (request_frame("channel/next", {"endpoint": "e"}, id=1), None),
        (request_frame("channel/next", {"endpoint": "e"}, id=None), None),
        (request_frame("channel/next", {"endpoint": "e"}, id="-bad"), None),
        (request_frame("channel/next", {"endpoint": "e"}, id="ok\n"), None),
        (request_frame("channel/next", {"endpoint": "e"}, result=None), None),
        (request_frame(7, {"endpoint": "e"}), "component:1"),  # type: ignore[arg-type]
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
    assert violation_of(obj).reply["id"] == reply_id  # type: ignore[index]


def test_notifications() -> None:
    cancel = classify(cancel_notification("component:2"))
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
        assert violation_of(obj).reply["id"] is None  # type: ignore[index]


def test_operation_error_from_response() -> None:
    response = classify(operational_error("component:1", "LAGGED", "behind", {"n": 3}))
    assert isinstance(response, ErrorResponse)
    error = response.operation_error()
    assert isinstance(error, OperationError)
    assert (error.code, error.message, error.details) == ("LAGGED", "behind", {"n": 3})
    standard = classify(error_response("component:1", -32602, "Invalid params"))
    assert isinstance(standard, ErrorResponse)
    assert standard.operation_error() is None
