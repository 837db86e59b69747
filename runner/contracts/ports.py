"""Channel ports and sources, and the rule that matches them (PROTOCOL.md §7.4, §15.2).

``package/`` (declared ports) and ``host/`` (the hub that moves a right to a callee)
need the same types and rule, so they live here, below both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from runner import json1
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

Delivery = Literal["direct", "broadcast"]
Direction = Literal["send", "receive"]
Identity = tuple[str, str, str]
"""A Channel Contract/1 source identity: (id, version, digest)."""


class FirstError(Protocol):
    """A Schema/1 validator's ``first_error``: the first violation or ``None``; with
    ``units`` fewer than Schema/1's limit, ``meter.Unfinished`` once they are spent."""

    def __call__(self, instance: JSONValue, units: int = ..., /) -> object: ...


class ItemSchema:
    """An item constraint: a compiled Schema/1 validator and its canonical bytes (two
    are compatible only when canonically equal: §15.2 has no subtyping)."""

    __slots__ = ("canonical", "document", "first_error")

    def __init__(self, document: JSONValue, first_error: FirstError) -> None:
        self.document = document
        self.canonical = json1.canonical(document)
        self.first_error = first_error

    @classmethod
    def compile(cls, document: JSONValue) -> ItemSchema | None:
        """``None`` for the generic schema; raises ``SchemaError`` outside Schema/1."""
        if document is True:
            return None
        # imported here: Schema/1's compiler, which a run without item schemas never needs
        from runner.contracts.schema1 import compile_schema1

        return cls(document, compile_schema1(document, defs={}).first_error)


def compatible(a: ItemSchema | None, b: ItemSchema | None) -> bool:
    """Generic fits anything; two nontrivial item schemas must be canonically equal."""
    return a is None or b is None or a.canonical == b.canonical


@dataclass(frozen=True)
class PortSpec:
    """A callee's declared channel port (FLOW.md ``channels``), resolved for matching."""

    direction: Direction
    required: bool = True
    schema: ItemSchema | None = None
    identity: Identity | None = None
    delivery: Delivery | None = None
    start: Literal["beginning", "suffix"] | None = None


@dataclass(frozen=True)
class SourceType:
    """What ``channel/create`` named: an item schema and, for a contract, its identity."""

    schema: ItemSchema | None = None
    identity: Identity | None = None


ContractResolver = Callable[[str], SourceType]
"""Resolve a package-local ``./`` contract path of the invoking package, or raise
``OperationError``."""


def check_required(ports: Mapping[str, PortSpec] | None, mapping: Mapping[str, str]) -> None:
    missing = [p for p, spec in (ports or {}).items() if spec.required and p not in mapping]
    if missing:
        raise OperationError(
            "INVALID_INPUT",
            f"required channel port(s) {', '.join(sorted(missing))} are not connected",
        )


def required_ports(ports: Mapping[str, PortSpec] | None) -> list[str]:
    """The ports an invocation cannot start without (a root run has nobody to wire them)."""
    return sorted(p for p, spec in (ports or {}).items() if spec.required)


def ports_of(declarations: Mapping[str, JSONValue]) -> dict[str, PortSpec]:
    """Ports declared inline (a capability method's ``channels``), resolved for matching;
    one naming a ``contract`` is refused, as no package is there to resolve its path."""
    ports: dict[str, PortSpec] = {}
    for name, spec in declarations.items():
        assert isinstance(spec, dict)
        if "contract" in spec:
            raise OperationError(
                "INVALID_INPUT",
                f"port {name!r} names a channel contract; this host resolves channel "
                "contracts only inside FLOW packages",
            )
        ports[name] = PortSpec(
            direction="receive" if spec["direction"] == "receive" else "send",
            required=spec.get("required", True) is not False,
            schema=ItemSchema.compile(spec["schema"]) if "schema" in spec else None,
            delivery=cast(Delivery | None, spec.get("delivery")),
            start=cast(Literal["beginning", "suffix"] | None, spec.get("start")),
        )
    return ports
