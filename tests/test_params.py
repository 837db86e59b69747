"""The params step: each method's params and the Run/1 bounds at their edges."""

from __future__ import annotations

from typing import Any

import pytest

from messagekit import (
    CONTRACT,
    child_params,
    frame_verdict,
    make_grant,
    params_ok,
    request_frame,
    root_params,
    schema_verdict,
)
from runner.json1 import MAX_SAFE_INTEGER
from runner.protocol.codes import LocalProtocolError
from runner.protocol.names import is_wire_id
from runner.protocol.params import validate_params
from runner.protocol.results import validate_channel_result


def test_id_bytes_128_and_129() -> None:
    for size, ok in ((1, True), (128, True), (129, False)):
        request_id = "a" * size
        assert is_wire_id(request_id) == ok
        assert frame_verdict(request_frame("channel/next", {"endpoint": "e"}, id=request_id)) == ok
        assert params_ok("channel/next", {"endpoint": request_id}) == ok
        assert params_ok("flow/run-child", child_params(operationId=request_id)) == ok
    assert not is_wire_id("")
    assert not is_wire_id("é")
    assert is_wire_id("Component.1:a/b-c_d".replace("_", "."))


def test_local_name_64_and_65() -> None:
    assert params_ok("flow/run-child", child_params(slot="a" * 64))
    assert not params_ok("flow/run-child", child_params(slot="a" * 65))
    for bad in ("", "A", "a--b", "-a", "a-", "a_b", "a b"):
        assert not params_ok("flow/run-child", child_params(slot=bad))
    assert params_ok("flow/run-child", child_params(slot="a-1-b2"))


def test_intent_16384_and_16385_scalars() -> None:
    assert params_ok("flow/run-child", child_params(intent="𝄞" * 16_384))  # 4 UTF-8 bytes each
    assert not params_ok("flow/run-child", child_params(intent="𝄞" * 16_385))
    assert not params_ok("flow/run-child", child_params(intent=""))


def test_error_message_1024_and_1025_scalars() -> None:
    for size, ok in ((1024, True), (1025, False)):
        obj = {"jsonrpc": "2.0", "id": "a", "error": {"code": -32601, "message": "ü" * size}}
        assert frame_verdict(obj) == schema_verdict(obj) == ok


def test_deadline_bounds() -> None:
    assert params_ok("flow/run", root_params(deadlineUnixMs=0))
    assert params_ok("flow/run", root_params(deadlineUnixMs=MAX_SAFE_INTEGER))
    assert params_ok("flow/run", root_params(deadlineUnixMs=5.0))  # JSON/1: 5.0 is the value 5
    for bad in (MAX_SAFE_INTEGER + 1, -1, 5.5, True, False, "5", None):
        assert not params_ok("flow/run", root_params(deadlineUnixMs=bad))


def test_attachments_256_and_257() -> None:
    def attachments(count: int) -> dict[str, Any]:
        return {f"a{i}": {"path": f"/mnt/{i}", "access": "read-write"} for i in range(count)}

    assert params_ok("flow/run", root_params(attachments=attachments(256)))
    assert not params_ok("flow/run", root_params(attachments=attachments(257)))


def test_channel_maps_256_and_257() -> None:
    def grants(count: int) -> dict[str, Any]:
        return {f"c{i}": make_grant(f"e{i}") for i in range(count)}

    def references(count: int) -> dict[str, Any]:
        return {f"c{i}": f"e{i}" for i in range(count)}

    assert params_ok("flow/run", root_params(channels=grants(256)))
    assert not params_ok("flow/run", root_params(channels=grants(257)))
    assert params_ok("flow/run-child", child_params(channels=references(256)))
    assert not params_ok("flow/run-child", child_params(channels=references(257)))


def test_root_grants_need_distinct_endpoints() -> None:
    # The seed rule (PROTOCOL.md §4) that the schema cannot express.
    params = root_params(channels={"a": make_grant("e1"), "b": make_grant("e1", "receive")})
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
        (
            {"channels": {"in": make_grant("r1", "receive", "broadcast") | {"startSequence": 7}}},
            True,
        ),
        ({"channels": {"in": make_grant("r1", "receive") | {"startSequence": 2}}}, False),
        ({"channels": {"in": make_grant("r1", "receive") | {"startSequence": 1.0}}}, True),
        ({"channels": {"in": make_grant("r1", "send") | {"startSequence": 1}}}, False),
        (
            {"channels": {"in": {"endpoint": "r1", "direction": "receive", "delivery": "direct"}}},
            False,
        ),
        ({"channels": {"in": make_grant("r1", "both")}}, False),
        ({"channels": {"in": make_grant("r1", "send", "replay")}}, False),
        ({"channels": {"in": "r1"}}, False),
        ({"runId": "forbidden"}, False),
    ],
)
def test_flow_run_params(changes: dict[str, Any], ok: bool) -> None:
    assert params_ok("flow/run", root_params(**changes)) == ok


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
    grant = make_grant("w", "send") | {"contract": {**CONTRACT, **changes}}
    assert params_ok("flow/run", root_params(channels={"out": grant})) == ok


@pytest.mark.parametrize(
    ("method", "params", "ok"),
    [
        ("flow/run-child", child_params(channels={"events": "source:write"}), True),
        ("flow/run-child", child_params(extra=1), False),
        ("flow/run-child", {"slot": "a", "input": 1}, False),
        ("flow/run-child", child_params(input=None), True),
        ("capability/call", child_params(method="write"), True),
        ("capability/call", child_params(method="Write"), False),
        ("capability/call", child_params(method="write", intent="x"), False),
        ("capability/call", child_params(), False),
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
        assert params_ok(method, params) == ok


def test_unknown_method_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        validate_params("tools/list", {})
    with pytest.raises(LocalProtocolError):
        validate_channel_result("flow/run", None)
