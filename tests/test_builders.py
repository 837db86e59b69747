"""Frame builders: what they build passes the checks and the schema; they refuse the rest."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from messagekit import root_params, schema_verdict
from runner.protocol import builders
from runner.protocol.builders import (
    cancel_notification,
    error_response,
    operation_error_response,
    operational_error,
    result_response,
)
from runner.protocol.codes import WIRE_CODES, LocalProtocolError, OperationError
from runner.protocol.envelope import ErrorResponse, Request, Success, classify


def test_builders_round_trip() -> None:
    root = builders.request("host:1", "flow/run", root_params())
    assert classify(root) == Request("host:1", "flow/run", root_params())
    assert schema_verdict(root)
    assert classify(builders.request("host:2", "x/custom", [1])) == Request(
        "host:2", "x/custom", [1]
    )
    assert classify(result_response("c:1", None)) == Success("c:1", None)
    built = operational_error("c:1", "UNCERTAIN", "lost the provider")
    assert built["error"] == {
        "code": -32000,
        "message": "lost the provider",
        "data": {"code": "UNCERTAIN"},
    }
    assert schema_verdict(built)
    for code in WIRE_CODES:
        assert schema_verdict(operational_error("c:1", code, "m", [code]))
    parse = error_response(None, -32700, "Parse error")
    assert schema_verdict(parse) and "data" not in parse["error"]  # type: ignore[operator]
    error = OperationError("DISCONNECTED", "reader gone", {"endpoint": "r"})
    reported = operation_error_response("c:2", error)
    assert classify(reported) == ErrorResponse("c:2", error.to_error_object())
    assert schema_verdict(cancel_notification("host:1"))


@pytest.mark.parametrize(
    "build",
    [
        lambda: builders.request("bad id", "x/y", {}),
        lambda: builders.request("host:1", "flow/run", root_params(protocol="run/2")),
        lambda: builders.request("host:1", "x/y", None),  # type: ignore[arg-type]
        lambda: result_response("", None),
        lambda: error_response("a", -32700, "Parse error"),
        lambda: error_response(None, -32601, "Method not found"),
        lambda: error_response("a", -32601, ""),
        lambda: error_response("a", -32601, "x" * 1025),
        lambda: error_response("a", -32099, "custom"),
        lambda: error_response("a", -32000, "missing data"),
        lambda: operational_error("a", "PROTOCOL_ERROR", "local only"),  # type: ignore[arg-type]
        lambda: operational_error(None, "CANCELLED", "no id"),  # type: ignore[arg-type]
        lambda: operation_error_response("a", OperationError("CHANNEL_LOST", "x")),
        lambda: cancel_notification("no spaces"),
    ],
)
def test_builders_refuse_invalid_frames(build: Callable[[], object]) -> None:
    with pytest.raises(LocalProtocolError):
        build()
