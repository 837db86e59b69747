"""Whole Run/1 frames: the shared message vectors, and agreement with the schema.

The vectors of the conformance corpus, and Hypothesis-generated and mutated frames, get
the same verdict from the hand-written checks as from ``run-1.schema.json`` (see
``messagekit`` for the two documented differences).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from messagekit import (
    CONTRACT,
    FIXTURES,
    FRAME_VALIDATOR,
    REQUEST_DEFINITIONS,
    REQUEST_METHODS,
    SCHEMA,
    definition_validator,
    frame_verdict,
    schema_verdict,
    verdict_as,
)
from runner.json1 import MAX_SAFE_INTEGER
from runner.protocol.codes import WIRE_CODES
from runner.protocol.names import COMPONENT_TO_HOST_METHODS


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
    assert definition_validator(vector["definition"]).is_valid(vector["value"])
    assert verdict_as(vector["definition"], vector["value"]) == "valid"
    assert frame_verdict(vector["value"])


@pytest.mark.parametrize("vector", FIXTURES["invalid"], ids=lambda v: v["name"])
def test_invalid_message_vector(vector: dict[str, Any]) -> None:
    assert not definition_validator(vector["definition"]).is_valid(vector["value"])
    stage = verdict_as(vector["definition"], vector["value"])
    assert stage != "valid"
    assert stage == EXPECTED_STAGE.get(vector["name"], stage)


def test_method_sets_match_schema() -> None:
    defined = {
        SCHEMA["$defs"][definition]["properties"]["method"]["const"]
        for definition in REQUEST_DEFINITIONS
    }
    assert defined == REQUEST_METHODS
    assert len(COMPONENT_TO_HOST_METHODS) == 8


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
