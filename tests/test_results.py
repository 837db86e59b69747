"""The result step: Run, capability and channel results by the method they answer."""

from __future__ import annotations

from typing import Any

import pytest

from messagekit import make_grant, schema_verdict
from runner.json1 import MAX_SAFE_INTEGER
from runner.protocol.results import (
    validate_capability_result,
    validate_channel_result,
    validate_run_result,
)


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


PAIR = {"send": make_grant("w"), "receive": make_grant("r", "receive")}
BROADCAST = {"send": make_grant("w", "send", "broadcast"), "source": "src"}
SUBSCRIPTION = make_grant("r", "receive", "broadcast") | {"startSequence": 9}


@pytest.mark.parametrize(
    ("method", "result", "ok"),
    [
        ("channel/create", PAIR, True),
        ("channel/create", BROADCAST, True),
        ("channel/create", {**PAIR, "send": make_grant("w", "send", "broadcast")}, False),
        ("channel/create", {**PAIR, "receive": SUBSCRIPTION}, False),
        ("channel/create", {**PAIR, "receive": make_grant("r")}, False),
        ("channel/create", {**BROADCAST, "send": make_grant("w")}, False),
        ("channel/create", {**BROADCAST, "source": 1}, False),
        ("channel/create", {"send": make_grant("w")}, False),
        ("channel/create", None, False),
        ("channel/subscribe", SUBSCRIPTION, True),
        ("channel/subscribe", make_grant("r", "receive"), False),
        ("channel/subscribe", make_grant("r", "send", "broadcast"), False),
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
