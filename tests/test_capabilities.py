"""Host capabilities: plugin discovery, Capability Contract/1, Schema/1, artifacts, kv."""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator

from runner import json1
from runner.contracts import schema1
from runner.contracts.capability import DIGEST_DOMAIN, domain_digest, parse_contract
from runner.contracts.schema1 import (
    SchemaError,
    compile_schema1,
    compile_schema1_file,
)
from runner.host.capabilities import (
    ENTRY_POINT_GROUP,
    CapabilityBinding,
    CapabilityError,
    ContractError,
    InvalidInput,
    ProviderConfigError,
    ProviderLost,
    UnknownMethod,
    artifacts,
    available_providers,
    builtin_contract,
    load_contract,
    load_provider,
    provider,
)
from runner.host.capabilities.artifacts import ArtifactsProvider
from runner.host.capabilities.kv import KeyValueProvider, default_path
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

SHIPPED = Path(schema1.__file__).parent / "schemas"
CONTRACT_SCHEMA = "https://flow.jig.md/schemas/capability-contract-1.schema.json"


def run(function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return anyio.run(function, *args)


def call(binding: CapabilityBinding, method: str, input: JSONValue) -> Any:
    return run(binding.call, method, input)


def failure(binding: CapabilityBinding, method: str, input: JSONValue) -> OperationError:
    with pytest.raises(OperationError) as caught:
        call(binding, method, input)
    return caught.value


class Scripted:
    """A provider that answers (or raises) what the test scripted for each method."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, JSONValue]] = []
        self.closed = False

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        self.calls.append((method, input))
        if method not in self.answers:
            raise UnknownMethod(method, self.answers)
        answer = self.answers[method]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def close(self) -> None:
        self.closed = True


class AsyncClosing(Scripted):
    async def close(self) -> None:
        await anyio.sleep(0)
        self.closed = True


class EchoPlugin:
    """Registered through a fake entry point in the plugin tests."""

    def __init__(self, options: dict[str, JSONValue]) -> None:
        self.options = options

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        return {"method": method, "input": input, "options": self.options}


class Broken:
    def __init__(self, options: dict[str, JSONValue]) -> None:
        raise TypeError("options go in a table")


# --- plugin discovery ---------------------------------------------------------------


def test_builtin_providers_are_registered_entry_points(tmp_path: Path) -> None:
    assert {"artifacts", "kv"} <= set(available_providers())
    assert isinstance(load_provider("artifacts", {"root": str(tmp_path)}), ArtifactsProvider)
    kv = load_provider("kv", {"path": str(tmp_path / "kv.sqlite3")})
    assert isinstance(kv, KeyValueProvider)
    kv.close()


def test_unknown_provider_names_the_installed_ones() -> None:
    with pytest.raises(ProviderConfigError) as caught:
        load_provider("s3", {})
    message = str(caught.value)
    assert "'s3'" in message and "artifacts" in message and "kv" in message
    assert ENTRY_POINT_GROUP in message


def _fake_entry_points(monkeypatch: pytest.MonkeyPatch, *values: str) -> None:
    found = [EntryPoint(name="echo", value=value, group=ENTRY_POINT_GROUP) for value in values]

    def entry_points(*, group: str, name: str | None = None) -> list[EntryPoint]:
        assert group == ENTRY_POINT_GROUP
        return [entry for entry in found if name is None or entry.name == name]

    monkeypatch.setattr(provider, "entry_points", entry_points)


def test_third_party_plugin_is_constructed_with_its_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_entry_points(monkeypatch, "test_capabilities:EchoPlugin")
    plugin = load_provider("echo", {"greeting": "hi"})
    result = run(plugin.call, "say", [1])
    assert result == {"method": "say", "input": [1], "options": {"greeting": "hi"}}


@pytest.mark.parametrize(
    ("values", "options", "expected"),
    [
        (["no_such_module:Thing"], {}, "cannot be imported: ModuleNotFoundError"),
        (["test_capabilities:EchoPlugin", "test_capabilities:Broken"], {}, "more than once"),
        (["test_capabilities:Broken"], {}, "failed to start: TypeError: options go in a table"),
        (["test_capabilities:EchoPlugin"], {"when": datetime.date(2024, 1, 1)}, "no dates"),
    ],
)
def test_plugin_failures_are_config_errors(
    monkeypatch: pytest.MonkeyPatch, values: list[str], options: Any, expected: str
) -> None:
    _fake_entry_points(monkeypatch, *values)
    with pytest.raises(ProviderConfigError, match=expected):
        load_provider("echo", options)


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("artifacts", {}, "option 'root' is missing"),
        ("artifacts", {"root": ""}, "option 'root' is '', not a nonempty string"),
        ("artifacts", {"root": "x", "roots": "y"}, "unknown option 'roots' \\(options: max_bytes"),
        ("artifacts", {"root": "x", "max_files": -1}, "'max_files' is -1, not an integer from 0"),
        ("artifacts", {"root": "x", "max_file_bytes": 7 * 2**20}, "from 0 to 6,291,456"),
        ("kv", {"max_value_bytes": 1.5}, "'max_value_bytes' is 1.5, not an integer"),
        ("kv", {"max_keys": True}, "'max_keys' is True"),
        ("kv", {"path": 5}, "option 'path' is 5"),
        ("kv", {"namespace": "a", "file": "b"}, "unknown option 'file'"),
    ],
)
def test_provider_options_are_checked(name: str, options: Any, expected: str) -> None:
    with pytest.raises(ProviderConfigError, match=expected):
        load_provider(name, options)


# --- Capability Contract/1 ----------------------------------------------------------


def _contract(**changes: Any) -> dict[str, Any]:
    descriptor: dict[str, Any] = {
        "$schema": CONTRACT_SCHEMA,
        "flowCapabilityContract": 1,
        "id": "https://example.org/contracts/sessions",
        "version": "1.2.3",
        "methods": {
            "read": {
                "input": {"$ref": "#/$defs/ReadInput"},
                "output": {"$ref": "#/$defs/Session"},
                "errors": {"not-found": {"$ref": "#/$defs/NotFound"}},
            },
            "anything": {"input": True, "output": True, "errors": {"oops": True}},
        },
        "$defs": {
            "ReadInput": {
                "type": "object",
                "properties": {"sessionId": {"type": "string", "minLength": 1}},
                "required": ["sessionId"],
                "additionalProperties": False,
            },
            "Session": {
                "type": "object",
                "properties": {"sessionId": {"type": "string"}, "turns": {"type": "integer"}},
                "required": ["sessionId", "turns"],
            },
            "NotFound": {
                "type": "object",
                "properties": {"sessionId": {"type": "string"}},
                "required": ["sessionId"],
            },
        },
    }
    descriptor.update(changes)
    return descriptor


def _parse(descriptor: Any) -> Any:
    return parse_contract(json.dumps(descriptor).encode(), source="test.json")


def test_identity_digest_matches_a_hand_computation(tmp_path: Path) -> None:
    # RFC 8785 by hand: members sorted, no whitespace.
    canonical = (
        '{"$schema":"' + CONTRACT_SCHEMA + '","flowCapabilityContract":1,'
        '"id":"https://example.org/contracts/echo","methods":{"echo":{"errors":{},'
        '"input":true,"output":true}},"version":"1.0.0"}'
    )
    expected = hashlib.sha256(b"FLOW-Capability-Contract/1\x00" + canonical.encode()).hexdigest()
    path = tmp_path / "echo.json"
    path.write_text(
        textwrap.dedent(f"""\
        {{
          "version": "1.0.0",
          "methods": {{ "echo": {{ "output": true, "input": true, "errors": {{}} }} }},
          "id": "https://example.org/contracts/echo",
          "flowCapabilityContract": 1.0,
          "$schema": "{CONTRACT_SCHEMA}"
        }}
        """)
    )
    contract = load_contract(path)
    assert contract.identity == (
        "https://example.org/contracts/echo",
        "1.0.0",
        f"sha256:{expected}",
    )
    assert contract.source == str(path)


def test_digest_reproduces_the_published_session_store_vector() -> None:
    # The Capability Contract/1 document publishes this digest for its session-store
    # example, whose $schema was then https://flow.dev/schemas/... (so it is computed
    # here directly; today's loader requires the flow.jig.md $schema).
    session = {
        "type": "object",
        "properties": {"sessionId": {"type": "string", "minLength": 1, "maxLength": 128}},
        "required": ["sessionId"],
        "additionalProperties": False,
    }
    descriptor = {
        "$schema": "https://flow.dev/schemas/capability-contract-1.schema.json",
        "flowCapabilityContract": 1,
        "id": "https://example.org/contracts/session-store",
        "version": "1.0.0",
        "methods": {
            "read": {
                "input": {"$ref": "#/$defs/ReadInput"},
                "output": {"$ref": "#/$defs/Session"},
                "errors": {"not-found": {"$ref": "#/$defs/NotFound"}},
            }
        },
        "$defs": {"ReadInput": session, "Session": session, "NotFound": session},
    }
    assert domain_digest(DIGEST_DOMAIN, descriptor) == (
        "sha256:a8273fd117aa2f2aa8ee8805c0d598b3e1f3bad9036d368d8847bd41513158c5"
    )


def test_any_change_changes_the_identity() -> None:
    base = _parse(_contract())
    annotated = _contract()
    annotated["$defs"]["Session"]["description"] = "a session"
    assert _parse(annotated).identity.digest != base.identity.digest
    assert _parse(_contract()) == base  # equality is identity


def test_builtin_contracts_are_pinned() -> None:
    # Packages pin these triples: editing a descriptor means bumping its version.
    assert builtin_contract("artifacts").identity == (
        "https://flow-runner.dev/contracts/artifacts",
        "1.0.0",
        "sha256:993c97b0b30d35578140748612beb68bf1ef18b3fcbde4919614d531d7d1d848",
    )
    assert builtin_contract("kv").identity == (
        "https://flow-runner.dev/contracts/kv",
        "1.0.0",
        "sha256:99857da59d0042ab49017bd4d334ed3cc6a13515fb46caa7fee10afa2391921c",
    )
    with pytest.raises(ValueError, match="shipped: artifacts, kv"):
        builtin_contract("s3")


def _mutated(path: str, value: Any) -> dict[str, Any]:
    """The test contract with the member at a /-separated path replaced (or removed)."""
    descriptor = _contract()
    *parents, last = path.split("/")
    target = descriptor
    for name in parents:
        target = target[name]
    if value is _REMOVE:
        del target[last]
    else:
        target[last] = value
    return descriptor


_REMOVE = object()


@pytest.mark.parametrize(
    ("path", "value", "code", "pointer"),
    [
        ("id", "https://Example.org/contracts/x", "CONTRACT_INVALID", "/id"),
        ("id", "https://10.0.0.1/contracts/x", "CONTRACT_INVALID", "/id"),
        ("id", "https://example.org/a/../b", "CONTRACT_INVALID", "/id"),
        ("version", "1.0", "CONTRACT_INVALID", "/version"),
        ("version", "01.0.0", "CONTRACT_INVALID", "/version"),
        ("version", "1.0.0\n", "CONTRACT_INVALID", "/version"),
        ("$schema", "https://flow.dev/schemas/x.json", "CONTRACT_INVALID", "/$schema"),
        ("flowCapabilityContract", _REMOVE, "CONTRACT_INVALID", ""),
        ("extra", True, "CONTRACT_INVALID", ""),
        ("methods", {}, "CONTRACT_INVALID", "/methods"),
        (
            "methods/Read",
            {"input": True, "output": True, "errors": {}},
            "CONTRACT_INVALID",
            "/methods",
        ),
        (
            "methods/read\n",
            {"input": True, "output": True, "errors": {}},
            "CONTRACT_INVALID",
            "/methods",
        ),
        ("methods/read/errors", _REMOVE, "CONTRACT_INVALID", "/methods/read"),
        ("methods/read/timeout", 5, "CONTRACT_INVALID", "/methods/read"),
        ("methods/read/errors/Bad", True, "CONTRACT_INVALID", "/methods/read/errors"),
        (
            "$defs/Session/properties/sessionId/pattern",
            "^s-",
            "SCHEMA_KEYWORD_UNSUPPORTED",
            "/$defs/Session/properties/sessionId/pattern",
        ),
        (
            "methods/anything/input",
            {"$ref": "#/$defs/Missing"},
            "SCHEMA_REFERENCE_INVALID",
            "/methods/anything/input/$ref",
        ),
        (
            "methods/anything/output",
            {"$defs": {}},
            "SCHEMA_INVALID",
            "/methods/anything/output/$defs",
        ),
        ("$defs/bad-name", True, "SCHEMA_INVALID", "/$defs/bad-name"),
        (
            "methods/anything/channels",
            {"events": {"direction": "send", "schema": {"items": {"format": "uri"}}}},
            "SCHEMA_KEYWORD_UNSUPPORTED",
            "/methods/anything/channels/events/schema/items/format",
        ),
        (
            "methods/anything/channels",
            {"events": {"direction": "send", "start": "suffix"}},
            "CONTRACT_INVALID",
            "/methods/anything/channels/events/direction",
        ),
    ],
)
def test_invalid_descriptors(path: str, value: Any, code: str, pointer: str) -> None:
    with pytest.raises(ContractError) as caught:
        _parse(_mutated(path, value))
    assert (caught.value.code, caught.value.pointer) == (code, pointer)
    assert str(caught.value).startswith(f"test.json: {code} at ")


def test_descriptor_bytes_are_bounded_json1(tmp_path: Path) -> None:
    with pytest.raises(ContractError) as caught:
        parse_contract(b'{"id": 1, "id": 2}')
    assert caught.value.code == "CONTRACT_INVALID_JSON"
    padded = json.dumps(_contract(), indent=200_000).encode()
    with pytest.raises(ContractError) as caught:
        parse_contract(padded)
    assert caught.value.code == "CONTRACT_LIMIT_EXCEEDED"
    with pytest.raises(ContractError) as caught:
        load_contract(tmp_path / "missing.json")
    assert caught.value.code == "CONTRACT_UNREADABLE"
    assert "No such file" in str(caught.value)


def test_node_limit_spans_the_whole_contract_graph() -> None:
    many = {"allOf": [True] * 2_050}  # 2,051 nodes each: fine alone, not together
    descriptor = _contract()
    descriptor["methods"]["anything"] = {"input": many, "output": many, "errors": {}}
    with pytest.raises(ContractError) as caught:
        _parse(descriptor)
    assert caught.value.code == "SCHEMA_LIMIT_EXCEEDED"
    assert caught.value.pointer.startswith("/methods/anything/output/allOf/")


# --- holding calls to a contract ----------------------------------------------------


def _bound(answers: dict[str, Any], descriptor: Any = None) -> tuple[CapabilityBinding, Scripted]:
    fake = Scripted(answers)
    contract = _parse(descriptor or _contract())
    return CapabilityBinding("sessions", fake, contract, provider_name="fake"), fake


def test_valid_calls_pass_both_ways() -> None:
    binding, fake = _bound(
        {"read": {"sessionId": "s-1", "turns": 3}, "anything": CapabilityError("oops", [1])}
    )
    assert call(binding, "read", {"sessionId": "s-1"}) == {
        "value": {"sessionId": "s-1", "turns": 3}
    }
    assert call(binding, "anything", {"x": [None]}) == {"error": {"name": "oops", "data": [1]}}
    assert fake.calls == [("read", {"sessionId": "s-1"}), ("anything", {"x": [None]})]


def test_declared_error_passes() -> None:
    binding, _ = _bound({"read": CapabilityError("not-found", {"sessionId": "s-9"})})
    assert call(binding, "read", {"sessionId": "s-9"}) == {
        "error": {"name": "not-found", "data": {"sessionId": "s-9"}}
    }


@pytest.mark.parametrize(
    ("input", "instance_pointer", "schema_pointer", "keyword"),
    [
        ({}, "", "/$defs/ReadInput/required", "required"),
        (
            {"sessionId": ""},
            "/sessionId",
            "/$defs/ReadInput/properties/sessionId/minLength",
            "minLength",
        ),
        ({"sessionId": 7}, "/sessionId", "/$defs/ReadInput/properties/sessionId/type", "type"),
        (
            {"sessionId": "s", "x": 1},
            "/x",
            "/$defs/ReadInput/additionalProperties",
            "additionalProperties",
        ),
        ("s-1", "", "/$defs/ReadInput/type", "type"),
    ],
)
def test_input_failing_its_schema_is_invalid_input(
    input: JSONValue, instance_pointer: str, schema_pointer: str, keyword: str
) -> None:
    binding, fake = _bound({"read": {"sessionId": "s", "turns": 1}})
    error = failure(binding, "read", input)
    assert error.code == "INVALID_INPUT"
    assert error.details == {
        "instancePointer": instance_pointer,
        "schemaPointer": schema_pointer,
        "keyword": keyword,
    }
    assert "capability slot 'sessions' (provider fake)" in error.message
    assert "https://example.org/contracts/sessions@1.2.3" in error.message
    assert fake.calls == []  # refused before dispatch


@pytest.mark.parametrize(
    ("answer", "instance_pointer", "schema_pointer"),
    [
        ({"sessionId": "s"}, "/value", "/$defs/Session/required"),
        ({"sessionId": "s", "turns": 1.5}, "/value/turns", "/$defs/Session/properties/turns/type"),
        (CapabilityError("not-found", {}), "/error/data", "/$defs/NotFound/required"),
        (CapabilityError("gone", {"sessionId": "s"}), "/error/name", "/methods/read/errors"),
    ],
)
def test_outcome_failing_the_contract_is_invalid_result(
    answer: Any, instance_pointer: str, schema_pointer: str
) -> None:
    binding, _ = _bound({"read": answer})
    error = failure(binding, "read", {"sessionId": "s"})
    assert error.code == "INVALID_RESULT"
    assert isinstance(error.details, dict)
    assert (error.details["instancePointer"], error.details["schemaPointer"]) == (
        instance_pointer,
        schema_pointer,
    )


def test_undeclared_error_names_the_declared_ones() -> None:
    binding, _ = _bound({"anything": CapabilityError("other", None)})
    error = failure(binding, "anything", 1)
    assert error.code == "INVALID_RESULT"
    assert "'other'" in error.message and "declared: oops" in error.message


def test_method_outside_the_contract_is_unavailable_before_dispatch() -> None:
    binding, fake = _bound({"write": {}})
    error = failure(binding, "write", {})
    assert error.code == "UNAVAILABLE"
    assert "methods: read, anything" in error.message
    assert fake.calls == []


def test_provider_unknown_method_is_unavailable() -> None:
    binding = CapabilityBinding("slot", Scripted({"a": 1}), provider_name="fake")
    error = failure(binding, "b", None)
    assert error.code == "UNAVAILABLE"
    assert "no method 'b' (methods: a)" in error.message


@pytest.mark.parametrize(
    ("raised", "code", "fragment"),
    [
        (RuntimeError("disk on fire"), "EXECUTION_FAILED", "RuntimeError: disk on fire"),
        (KeyError("k"), "EXECUTION_FAILED", "KeyError"),
        (ProviderLost("connection reset"), "UNCERTAIN", "may or may not have taken effect"),
        (InvalidInput("key too long"), "INVALID_INPUT", "key too long"),
        (OperationError("PERMISSION_DENIED", "read-only"), "PERMISSION_DENIED", "read-only"),
        (OperationError("CHANNEL_LOST", "gone"), "EXECUTION_FAILED", "gone"),
    ],
)
def test_provider_exceptions_map_to_wire_codes(raised: Exception, code: str, fragment: str) -> None:
    binding = CapabilityBinding("slot", Scripted({"m": raised}), provider_name="fake")
    error = failure(binding, "m", None)
    assert error.code == code
    assert fragment in error.message
    assert "capability slot 'slot' (provider fake)" in error.message
    assert error.to_error_object()["code"] == -32000  # never -32603


def test_long_exception_messages_are_cut_to_the_wire_bound() -> None:
    binding = CapabilityBinding("slot", Scripted({"m": ValueError("x" * 5_000 + "\udcff")}))
    error = failure(binding, "m", None)
    assert len(error.message) == 1_024
    assert "Scripted" in error.message
    json1.dumps(error.to_error_object())  # sendable


def test_input_over_the_work_meter_is_resource_exhausted() -> None:
    descriptor = _contract()
    descriptor["methods"]["anything"]["input"] = {"type": "string", "maxLength": 10}
    binding, fake = _bound({"anything": None}, descriptor)
    error = failure(binding, "anything", "x" * 1_000_001)
    assert error.code == "RESOURCE_EXHAUSTED"
    assert error.details == {
        "reason": "SCHEMA_LIMIT_EXCEEDED",
        "schemaPointer": "/methods/anything/input",
    }
    assert fake.calls == []


def test_without_a_contract_errors_pass_through_but_must_be_well_formed() -> None:
    answers: dict[str, Any] = {
        "ok": CapabilityError("not-found", {"any": "data"}),
        "bad-name": CapabilityError("Not_Found", None),
        "bad-data": CapabilityError("nan", float("nan")),
        "bad-value": {1, 2},
    }
    binding = CapabilityBinding("local", Scripted(answers), provider_name="fake")
    assert call(binding, "ok", None) == {"error": {"name": "not-found", "data": {"any": "data"}}}
    for method, fragment in [
        ("bad-name", "not a LocalName"),
        ("bad-data", "error data outside FLOW JSON/1"),
        ("bad-value", "value outside FLOW JSON/1"),
    ]:
        error = failure(binding, method, None)
        assert error.code == "INVALID_RESULT", method
        assert fragment in error.message


@pytest.mark.parametrize("provider_type", [Scripted, AsyncClosing])
def test_aclose_closes_the_provider(provider_type: type[Scripted]) -> None:
    fake = provider_type({})
    run(CapabilityBinding("slot", fake).aclose)
    assert fake.closed
    run(CapabilityBinding("slot", EchoPlugin({})).aclose)  # no close(): nothing to do


# --- Schema/1 -----------------------------------------------------------------------

FORBIDDEN = [
    "$id", "$anchor", "$dynamicAnchor", "$dynamicRef", "$vocabulary", "default", "format",
    "pattern", "patternProperties", "contentEncoding", "contentMediaType", "contentSchema",
    "unevaluatedItems", "unevaluatedProperties", "multipleOf", "uniqueItems", "propertyNames",
]  # fmt: skip


@pytest.mark.parametrize("keyword", FORBIDDEN)
def test_keywords_outside_schema1_are_refused(keyword: str) -> None:
    with pytest.raises(SchemaError) as caught:
        compile_schema1({"type": "object", keyword: {}}, defs={})
    assert (caught.value.code, caught.value.pointer) == (
        "SCHEMA_KEYWORD_UNSUPPORTED",
        f"/{keyword}",
    )


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"pattern": "^a"}, "/pattern"),
        ({"items": {"format": "date"}}, "/items/format"),
        ({"properties": {"a": {"$id": "https://x.org/a"}}}, "/properties/a/$id"),
        (
            {"anyOf": [True, {"properties": {"a/b": {"not": {"patternProperties": {}}}}}]},
            "/anyOf/1/properties/a~1b/not/patternProperties",
        ),
        ({"properties": {"pattern": {"type": "string"}}}, None),  # a member named pattern
    ],
)
def test_unsupported_keywords_are_found_at_any_depth(schema: Any, pointer: str | None) -> None:
    if pointer is None:
        compile_schema1(schema, defs={})
        return
    with pytest.raises(SchemaError) as caught:
        compile_schema1(schema, defs={})
    assert caught.value.code == "SCHEMA_KEYWORD_UNSUPPORTED"
    assert caught.value.pointer == pointer


@pytest.mark.parametrize(
    "ref",
    ["#/definitions/A", "other.json#/$defs/A", "#/$defs/A/properties/x", "#/$defs/B", "#A", 5],
)
def test_bad_references_are_refused(ref: Any) -> None:
    with pytest.raises(SchemaError) as caught:
        compile_schema1({"properties": {"x": {"$ref": ref}}}, defs={"A": True})
    assert (caught.value.code, caught.value.pointer) == (
        "SCHEMA_REFERENCE_INVALID",
        "/properties/x/$ref",
    )


@pytest.mark.parametrize(
    ("defs", "cycle"),
    [
        ({"A": {"$ref": "#/$defs/A"}}, "A -> A"),
        (
            {"A": {"items": {"$ref": "#/$defs/B"}}, "B": {"not": {"$ref": "#/$defs/A"}}},
            "A -> B -> A",
        ),
        (
            {"Tree": {"properties": {"children": {"items": {"$ref": "#/$defs/Tree"}}}}},
            "Tree -> Tree",
        ),
    ],
)
def test_reference_cycles_are_refused(defs: Any, cycle: str) -> None:
    with pytest.raises(SchemaError) as caught:
        compile_schema1(True, defs=defs)  # unused definitions are checked too
    assert caught.value.code == "SCHEMA_REFERENCE_INVALID"
    assert f"cycle {cycle}" in caught.value.message
    assert caught.value.pointer.startswith("/$defs/") and caught.value.pointer.endswith("/$ref")


def _nested(depth: int) -> Any:
    schema: Any = True
    for _ in range(depth - 1):
        schema = {"items": schema}
    return schema


def test_depth_limit() -> None:
    compile_schema1(_nested(64), defs={})
    with pytest.raises(SchemaError) as caught:
        compile_schema1(_nested(65), defs={})
    assert caught.value.code == "SCHEMA_LIMIT_EXCEEDED"
    assert caught.value.pointer == "/items" * 64


def test_node_limit() -> None:
    compile_schema1({"allOf": [True] * 4_095}, defs={})
    with pytest.raises(SchemaError) as caught:
        compile_schema1({"allOf": [True] * 4_096}, defs={})
    assert (caught.value.code, caught.value.pointer) == ("SCHEMA_LIMIT_EXCEEDED", "/allOf/4095")


def test_reference_chains_are_bounded() -> None:
    chain = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(200)}
    chain["D200"] = True
    with pytest.raises(SchemaError) as caught:
        compile_schema1({"$ref": "#/$defs/D0"}, defs=chain)
    assert caught.value.code == "SCHEMA_LIMIT_EXCEEDED"


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"const": {"a": 1}}, "/const"),
        ({"enum": [1, [2]]}, "/enum/1"),
        ({"type": "float"}, "/type"),
        ({"minLength": -1}, "/minLength"),
        ({"required": ["a", "a"]}, "/required"),
        ({"allOf": []}, "/allOf"),
        ({"properties": {"a": 5}}, "/properties/a"),
        ({"items": {"$defs": {}}}, "/items/$defs"),
        ({"$schema": schema1.SCHEMA_1_URI}, "/$schema"),
    ],
)
def test_malformed_keyword_values_are_schema_invalid(schema: Any, pointer: str) -> None:
    with pytest.raises(SchemaError) as caught:
        compile_schema1(schema, defs={})
    assert (caught.value.code, caught.value.pointer) == ("SCHEMA_INVALID", pointer)


def test_schema_files() -> None:
    good = {
        "$schema": schema1.SCHEMA_1_URI,
        "$defs": {"Id": {"type": "string"}},
        "$ref": "#/$defs/Id",
    }
    validator = compile_schema1_file(json.dumps(good).encode())
    assert validator.first_error("x") is None
    assert validator.first_error(1) == (
        "",
        "/$defs/Id/type",
        "type",
        "expected string, found an integer",
    )
    for data, code, pointer in [
        (b'{"$schema": 1,', "SCHEMA_INVALID_JSON", ""),
        (b'{"type": "string"}', "SCHEMA_INVALID", "/$schema"),
        (b"[]", "SCHEMA_INVALID", ""),
        (b" " * 262_145, "SCHEMA_LIMIT_EXCEEDED", ""),
        (json.dumps({**good, "items": {"$defs": {}}}).encode(), "SCHEMA_INVALID", "/items/$defs"),
        (
            json.dumps({**good, "$defs": {"Id": {"format": "x"}}}).encode(),
            "SCHEMA_KEYWORD_UNSUPPORTED",
            "/$defs/Id/format",
        ),
    ]:
        with pytest.raises(SchemaError) as caught:
            compile_schema1_file(data)
        assert (caught.value.code, caught.value.pointer) == (code, pointer), data[:40]


# Each vector: schema, instance, valid. The same verdicts are checked against jsonschema.
VECTORS: list[tuple[Any, Any, bool]] = [
    ({"type": "integer"}, 1.0, True),
    ({"type": "integer"}, 1.5, False),
    ({"type": "integer"}, True, False),
    ({"type": ["null", "string"]}, None, True),
    ({"type": "number"}, False, False),
    ({"const": 1}, 1.0, True),
    ({"const": 1}, True, False),
    ({"const": False}, 0, False),
    ({"const": None}, None, True),
    ({"enum": ["a", 2, None]}, 2.0, True),
    ({"enum": ["a", 2, None]}, "b", False),
    ({"minLength": 2}, "😀", False),
    ({"maxLength": 1}, "😀", True),
    ({"minimum": 1, "exclusiveMaximum": 3}, 3, False),
    ({"exclusiveMinimum": 1}, 1, False),
    ({"maximum": 5}, "not a number", True),
    ({"properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x"}, True),
    (
        {"properties": {"a": True}, "additionalProperties": {"type": "integer"}},
        {"a": 1, "b": "x"},
        False,
    ),
    ({"required": ["a"], "minProperties": 2}, {"a": 1}, False),
    ({"maxProperties": 1}, {"a": 1, "b": 2}, False),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1}, False),
    ({"dependentRequired": {"a": ["b"]}}, {"c": 1}, True),
    ({"dependentSchemas": {"a": {"required": ["b"]}}}, {"a": 1, "b": 2}, True),
    ({"dependentSchemas": {"a": {"required": ["b"]}}}, {"a": 1}, False),
    ({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}, ["a", 1, 2], True),
    ({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}, ["a", "b"], False),
    ({"prefixItems": [{"type": "string"}], "items": False}, ["a"], True),
    ({"contains": {"type": "string"}}, [1, 2], False),
    ({"contains": {"type": "string"}, "minContains": 0}, [1], True),
    ({"contains": {"type": "string"}, "maxContains": 1}, ["a", "b"], False),
    ({"contains": {"type": "string"}, "minContains": 2}, ["a", 1, "b"], True),
    ({"minItems": 1, "maxItems": 2}, [], False),
    ({"allOf": [{"type": "integer"}, {"minimum": 2}]}, 1, False),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "x", True),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, None, False),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, 1, False),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, 0.5, True),
    ({"not": {"type": "null"}}, None, False),
    ({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}}, "a", False),
    ({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}}, 3, True),
    ({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}}, 3.5, False),
    ({"then": False}, 1, True),
    ({"$ref": "#/$defs/Name", "maxLength": 3}, "abcd", False),
    ({"$ref": "#/$defs/Name"}, "", False),
    ({"properties": {"n": {"$ref": "#/$defs/Name"}}}, {"n": "ok"}, True),
    (False, None, False),
    (True, {"deep": [[[]]]}, True),
]
DEFS = {"Name": {"type": "string", "minLength": 1}}


@pytest.mark.parametrize(("schema", "instance", "valid"), VECTORS)
def test_validation_semantics(schema: Any, instance: Any, valid: bool) -> None:
    violation = compile_schema1(schema, defs=DEFS).first_error(instance)
    assert (violation is None) == valid, violation
    reference = schema if isinstance(schema, bool) else {**schema, "$defs": DEFS}
    assert Draft202012Validator(reference).is_valid(instance) == valid


def test_violations_point_into_definitions() -> None:
    validator = compile_schema1({"items": {"$ref": "#/$defs/Name"}}, defs=DEFS)
    assert validator.first_error(["a", ""]) == (
        "/1",
        "/$defs/Name/minLength",
        "minLength",
        "has 0 characters; at least 1 allowed",
    )


def test_false_schema_violation_has_no_keyword() -> None:
    validator = compile_schema1({"properties": {"a": False}}, defs={})
    violation = validator.first_error({"a": 1})
    assert violation is not None
    assert (violation.instance_pointer, violation.schema_pointer, violation.keyword) == (
        "/a",
        "/properties/a",
        None,
    )


def test_work_meter() -> None:
    validator = compile_schema1({"maxLength": 2_000_000}, defs={})
    assert validator.first_error("x" * 999_990) is None
    with pytest.raises(SchemaError) as caught:
        validator.first_error("x" * 1_000_000)
    assert caught.value.code == "SCHEMA_LIMIT_EXCEEDED"
    # Exhaustion wins over an invalid verdict found earlier (the type).
    items = compile_schema1({"type": "object", "items": {"maxLength": 5}}, defs={})
    with pytest.raises(SchemaError):
        items.first_error(["x" * 600_000, "x" * 600_000])


def test_shared_definitions_are_evaluated_once_per_instance_location() -> None:
    # allOf of two references to the next definition, 40 deep: 2^40 evaluations
    # without memoisation, 122 work units with it.
    defs: dict[str, Any] = {
        f"D{i}": {"allOf": [{"$ref": f"#/$defs/D{i + 1}"}, {"$ref": f"#/$defs/D{i + 1}"}]}
        for i in range(40)
    }
    defs["D40"] = {"type": "string"}
    validator = compile_schema1({"$ref": "#/$defs/D0"}, defs=defs)
    assert validator.first_error("x") is None
    violation = validator.first_error(1)
    assert violation is not None and violation.schema_pointer == "/$defs/D40/type"


# --- artifacts ----------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture
def store(root: Path) -> Any:
    provider = ArtifactsProvider({"root": str(root)})
    yield provider
    provider.close()


def act(store: Any, method: str, input: JSONValue) -> Any:
    return run(store.call, method, input)


def refusal(store: Any, method: str, input: JSONValue) -> CapabilityError:
    with pytest.raises(CapabilityError) as caught:
        act(store, method, input)
    return caught.value


def test_artifacts_root_is_created(root: Path, store: ArtifactsProvider) -> None:
    assert root.is_dir()


def test_artifacts_round_trip(root: Path, store: ArtifactsProvider) -> None:
    written = act(store, "write", {"path": "reports/week 1/summary.md", "text": "# Hi ✓\n"})
    assert written == {"uri": "artifact://reports/week%201/summary.md", "bytes": 9}
    assert (root / "reports" / "week 1" / "summary.md").read_text() == "# Hi ✓\n"
    assert act(store, "read", {"path": "reports/week 1/summary.md"}) == {"text": "# Hi ✓\n"}
    blob = bytes(range(256))
    encoded = base64.b64encode(blob).decode()
    assert act(store, "write", {"path": "blob.bin", "base64": encoded})["bytes"] == 256
    assert act(store, "read", {"path": "blob.bin"}) == {"base64": encoded}
    act(store, "write", {"path": "blob.bin", "text": "replaced"})
    assert act(store, "read", {"path": "blob.bin"}) == {"text": "replaced"}
    assert not [p for p in root.rglob("*") if p.name.startswith(artifacts.TEMPORARY_PREFIX)]


def test_artifact_uri_is_stable_across_roots(tmp_path: Path) -> None:
    first = ArtifactsProvider({"root": str(tmp_path / "a")})
    second = ArtifactsProvider({"root": str(tmp_path / "b")})
    input: JSONValue = {"path": "x/y.txt", "text": ""}
    assert act(first, "write", input)["uri"] == act(second, "write", input)["uri"]


def test_artifacts_list(root: Path, store: ArtifactsProvider) -> None:
    for path in ["b.txt", "a/2.txt", "a/1.txt", "a-c.txt", "ab/x.txt", "z/deep/er/f"]:
        act(store, "write", {"path": path, "text": path})
    (root / "z" / "empty").mkdir()
    (root / f"{artifacts.TEMPORARY_PREFIX}0123").write_text("half written")
    os.symlink(root / "b.txt", root / "link.txt")
    everything = ["a-c.txt", "a/1.txt", "a/2.txt", "ab/x.txt", "b.txt", "z/deep/er/f"]
    assert act(store, "list", {}) == {"paths": everything, "truncated": False}
    assert act(store, "list", {"prefix": "a/"}) == {
        "paths": ["a/1.txt", "a/2.txt"],
        "truncated": False,
    }
    assert act(store, "list", {"prefix": "a"})["paths"] == everything[:4]
    assert act(store, "list", {"prefix": "z/deep/e"})["paths"] == ["z/deep/er/f"]
    assert act(store, "list", {"limit": 2}) == {"paths": everything[:2], "truncated": True}
    assert act(store, "list", {"prefix": "nothing"}) == {"paths": [], "truncated": False}


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../x", "'..' segment"),
        ("/etc/passwd", "absolute"),
        ("a/../../x", "'..' segment"),
        ("a//b", "empty segment"),
        ("a/", "empty segment"),
        ("./a", "'.' segment"),
        ("a\\b", "backslash"),
        ("a\0b", "NUL"),
        ("", "empty"),
        ("x" * 256, "longer than 255 bytes"),
        ("/".join(["a"] * 65), "more than 64 segments"),
        (f"{artifacts.TEMPORARY_PREFIX}x", "reserved"),
    ],
)
def test_artifact_paths_are_confined(
    tmp_path: Path, store: ArtifactsProvider, path: str, reason: str
) -> None:
    before = sorted(tmp_path.rglob("*"))
    for method, input in [("write", {"path": path, "text": "x"}), ("read", {"path": path})]:
        error = refusal(store, method, input)
        assert error.name == "invalid-path"
        assert isinstance(error.data, dict) and error.data["path"] == path
        assert reason in error.data["reason"]
    assert sorted(tmp_path.rglob("*")) == before


def test_symlinks_out_of_the_root_are_refused(
    tmp_path: Path, root: Path, store: ArtifactsProvider
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret")
    os.symlink(outside, root / "escape")
    os.symlink(outside / "secret", root / "secret-link")
    for method, input in [
        ("write", {"path": "escape/new", "text": "x"}),
        ("read", {"path": "escape/secret"}),
        ("write", {"path": "escape/deeper/new", "text": "x"}),
        ("read", {"path": "secret-link"}),
    ]:
        error = refusal(store, method, input)
        assert error.name == "invalid-path"
        assert isinstance(error.data, dict) and "symbolic link" in error.data["reason"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    # Writing over a link replaces the link itself; its target is never touched.
    act(store, "write", {"path": "secret-link", "text": "mine"})
    assert (outside / "secret").read_text() == "secret"
    assert not (root / "secret-link").is_symlink()


def test_symlinked_directories_inside_the_root_are_refused(
    root: Path, store: ArtifactsProvider
) -> None:
    act(store, "write", {"path": "real/a.txt", "text": "a"})
    os.symlink(root / "real", root / "alias")
    error = refusal(store, "read", {"path": "alias/a.txt"})
    assert error.name == "invalid-path"
    assert isinstance(error.data, dict) and error.data["reason"].startswith("'alias' is a symbolic")
    assert refusal(store, "write", {"path": "alias/b.txt", "text": "b"}).name == "invalid-path"
    assert not (root / "real" / "b.txt").exists()


def test_artifact_read_and_write_refusals(root: Path, store: ArtifactsProvider) -> None:
    act(store, "write", {"path": "file", "text": "f"})
    (root / "dir").mkdir()
    assert refusal(store, "read", {"path": "missing"}).data == {"path": "missing"}
    assert refusal(store, "read", {"path": "no/such/dir/x"}).name == "not-found"
    for method, input, reason in [
        ("read", {"path": "dir"}, "'dir' is a directory"),
        ("write", {"path": "dir", "text": "x"}, "'dir' is a directory"),
        ("write", {"path": "file/x", "text": "x"}, "'file' is not a directory"),
        ("read", {"path": "file/x"}, "'file' is not a directory"),
    ]:
        error = refusal(store, method, input)
        assert error.data == {"path": input["path"], "reason": reason}
    assert (root / "file").read_text() == "f"


def test_artifact_size_limit(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    store = ArtifactsProvider({"root": str(root), "max_file_bytes": 4})
    error = refusal(store, "write", {"path": "big", "text": "12345"})
    assert (error.name, error.data) == ("too-large", {"path": "big", "bytes": 5, "limit": 4})
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_BYTES", 4)  # what a read can return
    (root / "big").write_text("123456")
    assert refusal(store, "read", {"path": "big"}).data == {"path": "big", "bytes": 6, "limit": 4}


@pytest.mark.parametrize(
    ("method", "input", "fragment"),
    [
        ("write", {"path": "a", "text": "x", "base64": ""}, "exactly one of"),
        ("write", {"path": "a"}, "exactly one of"),
        ("write", {"path": "a", "base64": "not base64!"}, "standard base64"),
        ("write", {"path": "a", "text": 5}, "must be a string"),
        ("write", {"path": 5, "text": "x"}, "'path' must be a string"),
        ("read", {"path": "a", "mode": "r"}, "unknown member 'mode'"),
        ("read", ["a"], "the input is an object"),
        ("read", {}, "'path' is required"),
        ("list", {"limit": 0}, "'limit' must be an integer from 1 to 10,000"),
        ("list", {"limit": True}, "'limit' must be an integer"),
        ("list", {"prefix": 3}, "'prefix' must be a string"),
    ],
)
def test_artifacts_check_input_without_a_contract(
    store: ArtifactsProvider, method: str, input: JSONValue, fragment: str
) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        act(store, method, input)


def test_artifacts_unknown_method_and_bad_root(tmp_path: Path, store: ArtifactsProvider) -> None:
    with pytest.raises(UnknownMethod, match="methods: list, read, write"):
        act(store, "delete", {})
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ProviderConfigError, match=r"option 'root' = .* cannot be used"):
        ArtifactsProvider({"root": str(tmp_path / "a-file" / "sub")})


def test_artifacts_under_their_contract(store: ArtifactsProvider) -> None:
    binding = CapabilityBinding(
        "out", store, builtin_contract("artifacts"), provider_name="artifacts"
    )
    assert call(binding, "write", {"path": "r.md", "text": "hi"}) == {
        "value": {"uri": "artifact://r.md", "bytes": 2}
    }
    assert call(binding, "read", {"path": "r.md"}) == {"value": {"text": "hi"}}
    assert call(binding, "read", {"path": "nope"}) == {
        "error": {"name": "not-found", "data": {"path": "nope"}}
    }
    outcome = call(binding, "write", {"path": "../x", "text": ""})
    assert outcome["error"]["name"] == "invalid-path"
    assert call(binding, "list", {}) == {"value": {"paths": ["r.md"], "truncated": False}}
    large = "x" * 100_000  # checked in a worker thread both ways
    assert call(binding, "write", {"path": "big.txt", "text": large})["value"]["bytes"] == 100_000
    assert call(binding, "read", {"path": "big.txt"}) == {"value": {"text": large}}
    error = failure(binding, "write", {"path": "a", "text": "x", "base64": ""})
    assert (error.code, error.details) == (
        "INVALID_INPUT",
        {"instancePointer": "", "schemaPointer": "/methods/write/input/oneOf", "keyword": "oneOf"},
    )
    assert failure(binding, "delete", {"path": "r.md"}).code == "UNAVAILABLE"


# --- kv -----------------------------------------------------------------------------


@pytest.fixture
def kv_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "kv.sqlite3"


@pytest.fixture
def kv(kv_path: Path) -> Any:
    provider = KeyValueProvider({"path": str(kv_path)})
    yield provider
    provider.close()


def test_kv_round_trip(kv: KeyValueProvider) -> None:
    value = {"b": [1, 2.5, None, True], "a": "✓"}
    assert act(kv, "put", {"key": "k", "value": value}) == {"version": 1}
    assert act(kv, "get", {"key": "k"}) == {"value": value}
    assert act(kv, "put", {"key": "k", "value": 1.0}) == {"version": 2}
    assert act(kv, "get", {"key": "k"}) == {"value": 1}
    assert act(kv, "put", {"key": "n", "value": None}) == {"version": 1}
    assert act(kv, "get", {"key": "n"}) == {"value": None}
    error = refusal(kv, "get", {"key": "missing"})
    assert (error.name, error.data) == ("not-found", {"key": "missing"})


def test_kv_delete(kv: KeyValueProvider) -> None:
    act(kv, "put", {"key": "k", "value": 1})
    assert act(kv, "delete", {"key": "k"}) == {"deleted": True}
    assert act(kv, "delete", {"key": "k"}) == {"deleted": False}
    assert refusal(kv, "get", {"key": "k"}).name == "not-found"
    assert act(kv, "put", {"key": "k", "value": 2}) == {"version": 1}


def test_kv_list(kv: KeyValueProvider) -> None:
    for key in ["user/2", "user/10", "user/1", "users", "admin", "user/é", "user0"]:
        act(kv, "put", {"key": key, "value": key})
    assert act(kv, "list", {"prefix": "user/"}) == {
        "keys": ["user/1", "user/10", "user/2", "user/é"],
        "truncated": False,
    }
    assert act(kv, "list", {}) == {
        "keys": ["admin", "user/1", "user/10", "user/2", "user/é", "user0", "users"],
        "truncated": False,
    }
    assert act(kv, "list", {"prefix": "user", "limit": 2}) == {
        "keys": ["user/1", "user/10"],
        "truncated": True,
    }
    assert act(kv, "list", {"prefix": "user/é"})["keys"] == ["user/é"]
    assert act(kv, "list", {"prefix": "zzz"}) == {"keys": [], "truncated": False}


def test_kv_namespaces_share_a_file(kv_path: Path, kv: KeyValueProvider) -> None:
    other = KeyValueProvider({"path": str(kv_path), "namespace": "other"})
    act(kv, "put", {"key": "k", "value": "default"})
    act(other, "put", {"key": "k", "value": "other"})
    assert act(kv, "get", {"key": "k"}) == {"value": "default"}
    assert act(other, "list", {}) == {"keys": ["k"], "truncated": False}
    other.close()


def test_kv_survives_a_new_instance(kv_path: Path) -> None:
    first = KeyValueProvider({"path": str(kv_path)})
    act(first, "put", {"key": "cursor", "value": {"page": 3}})
    first.close()
    second = KeyValueProvider({"path": str(kv_path)})
    assert act(second, "get", {"key": "cursor"}) == {"value": {"page": 3}}
    (mode,) = second._db.execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"
    second.close()


def test_kv_survives_a_separate_process(kv_path: Path) -> None:
    script = textwrap.dedent("""
        import sys, anyio
        from runner.host.capabilities.kv import KeyValueProvider
        store = KeyValueProvider({"path": sys.argv[1]})
        print(anyio.run(store.call, "put", {"key": "from-child", "value": [1, "two"]}))
        store.close()
    """)
    done = subprocess.run(
        [sys.executable, "-c", script, str(kv_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'version': 1}"
    store = KeyValueProvider({"path": str(kv_path)})
    assert act(store, "get", {"key": "from-child"}) == {"value": [1, "two"]}
    store.close()


def test_kv_concurrent_calls_share_one_connection(kv: KeyValueProvider) -> None:
    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            for index in range(50):
                tasks.start_soon(kv.call, "put", {"key": f"k{index:02}", "value": index})
        assert (await kv.call("list", {"limit": 100}))["keys"] == [f"k{i:02}" for i in range(50)]

    run(main)


def test_kv_default_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "flow-runner" / "kv.sqlite3"
    store = KeyValueProvider({})
    assert store.path.is_file()
    store.close()
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # the spec says: ignore it
    assert default_path() == Path.home() / ".local" / "state" / "flow-runner" / "kv.sqlite3"


def test_kv_unusable_path(tmp_path: Path) -> None:
    (tmp_path / "dir.sqlite3").mkdir()
    (tmp_path / "text.sqlite3").write_text("not a database, just text " * 100)
    for name in ["dir.sqlite3", "text.sqlite3"]:
        with pytest.raises(ProviderConfigError, match=r"option 'path' = .* cannot be used"):
            KeyValueProvider({"path": str(tmp_path / name)})


@pytest.mark.parametrize(
    ("method", "input", "fragment"),
    [
        ("get", {"key": ""}, "1 to 1,024 UTF-8 bytes"),
        ("get", {"key": "é" * 513}, "1 to 1,024 UTF-8 bytes"),
        ("put", {"key": "a\0b", "value": 1}, "without NUL"),
        ("put", {"key": "k"}, "'value' is required"),
        ("list", {"limit": 10_001}, "from 1 to 10,000"),
    ],
)
def test_kv_checks_input_without_a_contract(
    kv: KeyValueProvider, method: str, input: JSONValue, fragment: str
) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        act(kv, method, input)


def test_kv_under_its_contract(kv: KeyValueProvider) -> None:
    binding = CapabilityBinding("state", kv, builtin_contract("kv"), provider_name="kv")
    assert call(binding, "put", {"key": "k", "value": {"x": [1]}}) == {"value": {"version": 1}}
    assert call(binding, "get", {"key": "k"}) == {"value": {"value": {"x": [1]}}}
    assert call(binding, "get", {"key": "x"}) == {
        "error": {"name": "not-found", "data": {"key": "x"}}
    }
    assert failure(binding, "put", {"key": "", "value": 1}).details == {
        "instancePointer": "/key",
        "schemaPointer": "/$defs/Key/minLength",
        "keyword": "minLength",
    }
    error = failure(binding, "get", {"key": "é" * 600})  # within the schema, over the bytes
    assert error.code == "INVALID_INPUT" and "UTF-8 bytes" in error.message
    assert failure(binding, "increment", {"key": "k"}).code == "UNAVAILABLE"
    run(binding.aclose)
    assert failure(binding, "get", {"key": "k"}).code == "EXECUTION_FAILED"  # closed


def test_contract_copies_load_with_the_same_identity(tmp_path: Path) -> None:
    # A package carries a copy of the built-in descriptor; the host matches identities.
    for name in ["artifacts", "kv"]:
        shipped = Path(artifacts.__file__).parent / "contracts" / f"{name}.json"
        copied = tmp_path / f"{name}.json"
        descriptor = json.loads(shipped.read_text())
        copied.write_text(json.dumps(copy.deepcopy(descriptor), indent=1, sort_keys=True))
        assert load_contract(copied).identity == builtin_contract(name).identity
