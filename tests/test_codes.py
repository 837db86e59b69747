"""The error registry matches shared/spec, and the exception types behave as documented."""

from __future__ import annotations

from typing import get_args

import pytest

from runner.component import errors
from runner.json1 import JSONValue
from runner.protocol import codes
from runner.protocol.codes import (
    LOCAL_CODES,
    WIRE_CODES,
    LocalProtocolError,
    OperationError,
    ProtocolViolation,
)
from speckit import load_spec

_load = load_spec


def test_registry_matches_shared_spec() -> None:
    registry = _load("run-1-errors.json")
    assert registry["protocol"] == "run/1"
    assert registry["jsonRpcCode"] == codes.OPERATIONAL
    assert list(WIRE_CODES) == registry["wire"]
    assert list(LOCAL_CODES) == registry["local"]
    assert len(WIRE_CODES) == 13
    assert (codes.PROTOCOL_ERROR, codes.CHANNEL_LOST) == LOCAL_CODES


def test_wire_codes_match_schema_enum() -> None:
    schema = _load("run-1.schema.json")
    assert list(WIRE_CODES) == schema["$defs"]["flowErrorCode"]["enum"]


def test_json_rpc_codes() -> None:
    assert (
        codes.PARSE_ERROR,
        codes.INVALID_REQUEST,
        codes.METHOD_NOT_FOUND,
        codes.INVALID_PARAMS,
        codes.INTERNAL_ERROR,
        codes.OPERATIONAL,
    ) == (-32700, -32600, -32601, -32602, -32603, -32000)


@pytest.mark.parametrize("code", WIRE_CODES)
def test_is_wire_code(code: str) -> None:
    assert codes.is_wire_code(code)


@pytest.mark.parametrize("value", ["PROTOCOL_ERROR", "CHANNEL_LOST", "cancelled", None, 1, []])
def test_is_not_wire_code(value: object) -> None:
    assert not codes.is_wire_code(value)


def test_operation_error_object() -> None:
    error = OperationError("UNAVAILABLE", "no provider for slot 'search'")
    assert error.code == "UNAVAILABLE"
    assert error.details is None
    assert not error.is_local
    assert error.to_error_object() == {
        "code": -32000,
        "message": "no provider for slot 'search'",
        "data": {"code": "UNAVAILABLE"},
    }
    detailed = OperationError("LAGGED", "reader fell behind", {"capacity": 64})
    assert detailed.to_error_object()["data"] == {"code": "LAGGED", "details": {"capacity": 64}}
    assert str(detailed) == "LAGGED: reader fell behind"


@pytest.mark.parametrize("code", LOCAL_CODES)
def test_local_codes_are_never_sent(code: codes.LocalCode) -> None:
    error = OperationError(code, "the channel ended")
    assert error.is_local
    with pytest.raises(LocalProtocolError):
        error.to_error_object()


def test_operation_error_refuses_unknown_code() -> None:
    with pytest.raises(LocalProtocolError):
        OperationError("TEAPOT", "no")  # type: ignore[arg-type]


@pytest.mark.parametrize(("length", "ok"), [(0, False), (1, True), (1024, True), (1025, False)])
def test_operation_error_message_bounds(length: int, ok: bool) -> None:
    message = "é" * length  # scalars, not bytes
    if ok:
        assert OperationError("CANCELLED", message).message == message
    else:
        with pytest.raises(LocalProtocolError):
            OperationError("CANCELLED", message)


def test_protocol_violation_is_a_protocol_error() -> None:
    violation = ProtocolViolation("incomplete frame")
    assert violation.code == "PROTOCOL_ERROR"
    assert violation.reason == str(violation) == "incomplete frame"
    assert violation.reply is None
    reply: dict[str, JSONValue] = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }
    assert ProtocolViolation("bad JSON", reply).reply == reply


def test_the_sdk_knows_the_same_codes() -> None:
    """The SDK takes its codes from runner.protocol (component images carry both): its
    operation error codes are the registry's wire and local codes, not a copy."""
    assert get_args(errors.OperationErrorCode) == (errors.WireCode, errors.LocalCode)
    assert errors.WireCode is codes.WireCode and errors.LocalCode is codes.LocalCode
    assert get_args(errors.WireCode) == WIRE_CODES
    assert get_args(errors.LocalCode) == LOCAL_CODES
