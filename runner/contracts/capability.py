"""Capability Contract/1 (PROTOCOL.md §15.1): descriptors, their identity, and holding
calls to them.

A provider is matched on the exact identity (id, version, digest); the digest covers the
whole descriptor, so two descriptors that differ in any byte are never confused.
:class:`ContractBinding` checks each call both ways and raises the Run/1 error the
component receives: ``INVALID_INPUT`` before dispatch, ``INVALID_RESULT`` after,
``UNAVAILABLE`` for an undeclared method.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from runner import json1
from runner.contracts.schema1 import (
    Schema1Graph,
    Schema1Validator,
    SchemaError,
    SchemaErrorCode,
    meta_violation,
)
from runner.json1 import JSONValue, pointer_segment
from runner.protocol.codes import MAX_ERROR_MESSAGE_SCALARS, FlowCode, OperationError, WireCode
from runner.protocol.results import validate_capability_result

CAPABILITY_CONTRACT_1_URI: Final = "https://flow.jig.md/schemas/capability-contract-1.schema.json"
"""The ``$schema`` of every Capability Contract/1 descriptor."""

MAX_CONTRACT_BYTES: Final = 262_144
DIGEST_DOMAIN: Final = b"FLOW-Capability-Contract/1\0"

ContractErrorCode = (
    Literal[
        "CONTRACT_UNREADABLE",
        "CONTRACT_INVALID_JSON",
        "CONTRACT_INVALID",
        "CONTRACT_LIMIT_EXCEEDED",
    ]
    | SchemaErrorCode
)


class ContractError(ValueError):
    """A descriptor the host refuses: where it came from, a stable code (an embedded
    schema's keeps its Schema/1 code), a JSON pointer into the descriptor."""

    def __init__(self, source: str, code: ContractErrorCode, pointer: str, message: str):
        super().__init__(source, code, pointer, message)
        self.source = source
        self.code: ContractErrorCode = code
        self.pointer = pointer
        self.message = message

    def __str__(self) -> str:
        return f"{self.source}: {self.code} at {self.pointer or 'the root'}: {self.message}"


class ContractIdentity(NamedTuple):
    """What a provider is matched on: exact id, exact version, descriptor digest."""

    id: str
    version: str
    digest: str


@dataclass(frozen=True)
class CapabilityContract:
    """A validated Capability Contract/1 descriptor. Equal when the identities are equal."""

    identity: ContractIdentity
    descriptor: dict[str, JSONValue] = field(compare=False, repr=False)
    source: str = field(compare=False)
    """Where the descriptor came from, for messages (a path or ``built-in contract kv``)."""
    graph: Schema1Graph = field(compare=False, repr=False)
    """The descriptor's embedded schemas, compiled."""

    @property
    def label(self) -> str:
        """``id@version``, the way messages name the contract."""
        return f"{self.identity.id}@{self.identity.version}"

    @property
    def methods(self) -> dict[str, JSONValue]:
        """The descriptor's ``methods`` member."""
        methods = self.descriptor["methods"]
        assert isinstance(methods, dict)
        return methods


def load_contract(path: str | os.PathLike[str]) -> CapabilityContract:
    """Read and validate the descriptor at ``path``; raise :class:`ContractError`."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONTRACT_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ContractError(
            str(path), "CONTRACT_UNREADABLE", "", f"cannot read the descriptor: {reason}"
        ) from exc
    return parse_contract(data, source=str(path))


def parse_contract(data: bytes, *, source: str = "<descriptor>") -> CapabilityContract:
    """Validate descriptor bytes (≤262,144, JSON/1, Capability Contract/1, Schema/1)."""
    descriptor, graph, identity = read_contract(
        data, source, _embedded_schemas, CAPABILITY_CONTRACT_1_URI, DIGEST_DOMAIN
    )
    return CapabilityContract(identity, descriptor, source, graph)


def read_contract(
    data: bytes,
    source: str,
    roots: Callable[[dict[str, JSONValue]], dict[str, JSONValue]],
    schema_uri: str,
    domain: bytes,
) -> tuple[dict[str, JSONValue], Schema1Graph, ContractIdentity]:
    """Contract descriptor bytes (either kind) as a JSON/1 object, its embedded schemas
    (pointer -> schema, from ``roots``) compiled, and its identity; or ContractError. The
    schemas are compiled before the descriptor is checked against ``schema_uri``, so a
    keyword outside Schema/1 is reported as such, not as a shape error."""
    if len(data) > MAX_CONTRACT_BYTES:
        too_large = f"the descriptor is over {MAX_CONTRACT_BYTES:,} bytes; split the interface"
        raise ContractError(source, "CONTRACT_LIMIT_EXCEEDED", "", too_large)
    try:
        descriptor = json1.loads(data)
    except json1.JSON1Error as exc:
        raise ContractError(source, "CONTRACT_INVALID_JSON", exc.pointer or "", str(exc)) from None
    if not isinstance(descriptor, dict):
        raise ContractError(source, "CONTRACT_INVALID", "", "a descriptor is a JSON object")
    defs = descriptor.get("$defs")
    try:
        graph = Schema1Graph(roots(descriptor), defs if isinstance(defs, dict) else {})
    except SchemaError as exc:
        raise ContractError(source, exc.code, exc.pointer, exc.message) from None
    found = meta_violation(descriptor, schema_uri)
    if found is not None:
        pointer, message = found
        raise ContractError(
            source, "CONTRACT_INVALID", pointer, f"{message} (see the schema {schema_uri})"
        )
    digest = domain_digest(domain, descriptor)
    identity = ContractIdentity(str(descriptor["id"]), str(descriptor["version"]), digest)
    return descriptor, graph, identity


def domain_digest(domain: bytes, descriptor: JSONValue) -> str:
    """``sha256:<hex>`` of a domain separator and the RFC 8785 bytes of a descriptor."""
    return "sha256:" + hashlib.sha256(domain + json1.canonical(descriptor)).hexdigest()


def _embedded_schemas(descriptor: dict[str, JSONValue]) -> dict[str, JSONValue]:
    """Pointer -> schema for every method, error and inline channel schema; a misplaced
    one is left to the descriptor schema to report."""
    roots: dict[str, JSONValue] = {}
    methods = descriptor.get("methods")
    if not isinstance(methods, dict):
        return roots
    for name, method in methods.items():
        if not isinstance(method, dict):
            continue
        at = f"/methods/{pointer_segment(name)}"
        for part in ("input", "output"):
            if part in method:
                roots[f"{at}/{part}"] = method[part]
        errors = method.get("errors")
        if isinstance(errors, dict):
            for error, schema in errors.items():
                roots[f"{at}/errors/{pointer_segment(error)}"] = schema
        channels = method.get("channels")
        if isinstance(channels, dict):
            for port, declaration in channels.items():
                if isinstance(declaration, dict) and "schema" in declaration:
                    roots[f"{at}/channels/{pointer_segment(port)}/schema"] = declaration["schema"]
    return roots


@dataclass(frozen=True)
class _MethodSchemas:
    pointer: str
    input: Schema1Validator
    output: Schema1Validator
    errors: dict[str, Schema1Validator]


class ContractBinding:
    """Holds the calls to one capability to its contract, in both directions."""

    def __init__(self, contract: CapabilityContract) -> None:
        self.contract = contract
        self._methods: dict[str, _MethodSchemas] = {}
        for name, method in contract.methods.items():
            assert isinstance(method, dict) and isinstance(method["errors"], dict)
            at = f"/methods/{pointer_segment(name)}"
            self._methods[name] = _MethodSchemas(
                at,
                contract.graph.validator(f"{at}/input"),
                contract.graph.validator(f"{at}/output"),
                {
                    error: contract.graph.validator(f"{at}/errors/{pointer_segment(error)}")
                    for error in method["errors"]
                },
            )

    def check_input(self, method: str, value: JSONValue) -> None:
        """Raise ``UNAVAILABLE`` for an undeclared method, ``INVALID_INPUT`` for bad input,
        ``RESOURCE_EXHAUSTED`` past the work meter (neither valid nor invalid)."""
        schemas = self._method(method)
        what = f"the input of {method!r}"
        self._check(schemas.input, value, "", what, "INVALID_INPUT", "RESOURCE_EXHAUSTED")

    def check_outcome(self, method: str, outcome: JSONValue) -> None:
        """Raise ``INVALID_RESULT`` unless ``outcome`` (``{"value": v}`` or ``{"error":
        {"name": n, "data": d}}``) fits the method's output or declared error schema."""
        schemas = self._method(method)
        reason = validate_capability_result(outcome)
        if reason is not None:
            raise operation_error("INVALID_RESULT", f"{method!r} answered {reason}")
        assert isinstance(outcome, dict)
        if "value" in outcome:
            what = f"the output of {method!r}"
            self._check(schemas.output, outcome["value"], "/value", what, "INVALID_RESULT")
            return
        error = outcome["error"]
        assert isinstance(error, dict) and isinstance(error["name"], str)
        name = error["name"]
        if name not in schemas.errors:
            declared = ", ".join(schemas.errors) or "none"
            raise operation_error(
                "INVALID_RESULT",
                f"{method!r} answered with error {name!r}, which {self.contract.label} does not "
                f"declare for it (declared: {declared})",
                {"instancePointer": "/error/name", "schemaPointer": f"{schemas.pointer}/errors"},
            )
        what = f"the data of error {name!r} of {method!r}"
        self._check(schemas.errors[name], error["data"], "/error/data", what, "INVALID_RESULT")

    def _method(self, method: str) -> _MethodSchemas:
        try:
            return self._methods[method]
        except KeyError:
            declared = ", ".join(self._methods)
            raise operation_error(
                "UNAVAILABLE",
                f"{self.contract.label} has no method {method!r} (methods: {declared})",
            ) from None

    def _check(
        self,
        validator: Schema1Validator,
        value: JSONValue,
        prefix: str,
        what: str,
        code: WireCode,
        exhausted: WireCode | None = None,
    ) -> None:
        try:
            violation = validator.first_error(value)
        except SchemaError as exc:
            raise operation_error(
                exhausted or code,
                f"{what} could not be checked against {self.contract.label}: {exc.message}",
                {"reason": exc.code, "schemaPointer": exc.pointer},
            ) from None
        if violation is None:
            return
        where = prefix + violation.instance_pointer
        details: dict[str, JSONValue] = {
            "instancePointer": where,
            "schemaPointer": violation.schema_pointer,
        }
        if violation.keyword is not None:
            details["keyword"] = violation.keyword
        raise operation_error(
            code,
            f"{what} is invalid at {where or 'the root'}: {violation.message} "
            f"({self.contract.label} {violation.schema_pointer})",
            details,
        )


def operation_error(code: FlowCode, message: str, details: JSONValue = None) -> OperationError:
    """An :class:`OperationError` whose message fits Run/1 (1–1,024 scalars, no lone
    surrogates, which exception texts about odd file names can hold)."""
    text = message.encode(errors="replace").decode()
    if len(text) > MAX_ERROR_MESSAGE_SCALARS:
        text = text[: MAX_ERROR_MESSAGE_SCALARS - 1] + "…"
    return OperationError(code, text, details)
