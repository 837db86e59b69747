"""Holding one invocation to its package (PROTOCOL.md §4 host-side checks, §14).

Settings, attachments and capability slots that misfit are the caller's mistakes
(:class:`InvocationRefused`); an input outside ``input.schema.json`` is a Run failure
(``INVALID_INPUT``), both before any container exists; after the run, an undeclared
outcome or a result outside ``result.schema.json`` is ``INVALID_RESULT``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from runner.contracts.ports import ItemSchema, PortSpec, SourceType
from runner.json1 import JSONValue
from runner.package.errors import InvocationRefused
from runner.protocol.codes import OperationError, WireCode
from runner.sandbox.base import Attachment

if TYPE_CHECKING:
    from runner.contracts.channel import ChannelContract
    from runner.package.parse import Package


def check_settings(package: Package, settings: dict[str, JSONValue]) -> None:
    """Refuse settings the package does not accept (without a schema, only ``{}``)."""
    validator = package.schemas.get("settings")
    if validator is None:
        if settings:
            raise InvocationRefused(
                "INVALID_SETTINGS",
                f"package {package.name!r} has no settings.schema.json, so it takes no "
                f"settings; drop {', '.join(sorted(settings))} (only {{}} is valid)",
            )
        return
    violation = validator.first_error(settings)
    if violation is not None:
        raise InvocationRefused(
            "INVALID_SETTINGS",
            f"settings rejected by {package.name!r}'s settings.schema.json at "
            f"{violation.instance_pointer or 'the root'}: {violation.message} (schema "
            f"{violation.schema_pointer or '/'}); fix the settings",
        )


def check_attachments(package: Package, attachments: Iterable[Attachment]) -> None:
    """Every declared attachment supplied, none extra, none wider than declared."""
    supplied = {att.name: att.access for att in attachments}
    missing = sorted(set(package.attachments) - set(supplied))
    extra = sorted(set(supplied) - set(package.attachments))
    wider = sorted(
        name
        for name, access in supplied.items()
        if access == "read-write" and package.attachments.get(name) == "read"
    )
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing)} (supply with --attach NAME=PATH)")
    if extra:
        problems.append(f"not declared: {', '.join(extra)} (remove them)")
    if wider:
        problems.append(f"declared read but supplied read-write: {', '.join(wider)} (use :ro)")
    if problems:
        declared = ", ".join(f"{n}:{a}" for n, a in sorted(package.attachments.items()))
        raise InvocationRefused(
            "INVALID_ATTACHMENTS",
            f"package {package.name!r} declares attachments [{declared}]; " + "; ".join(problems),
        )


def check_capability_slots(package: Package, slots: Iterable[str], *, where: str) -> None:
    """Every configured capability slot must be one the package ``uses``."""
    unknown = sorted(set(slots) - set(package.uses))
    if unknown:
        declared = ", ".join(sorted(package.uses)) or "none"
        raise InvocationRefused(
            "INVALID_CAPABILITIES",
            f"{where}: capability slot(s) {', '.join(unknown)} are not in package "
            f"{package.name!r}'s `uses` (it declares: {declared}); remove them from the "
            "configuration or declare them in FLOW.md",
        )


def input_failure(package: Package, value: JSONValue) -> OperationError | None:
    """``INVALID_INPUT`` when the input does not fit ``input.schema.json``."""
    return _schema_failure(package, "input", value, "INVALID_INPUT")


def result_failure(package: Package, result: dict[str, JSONValue]) -> OperationError | None:
    """``INVALID_RESULT`` for an undeclared outcome or a result outside its schema."""
    outcome = result.get("outcome")
    if outcome != "done" and outcome not in package.outcomes:
        declared = ", ".join(["done", *sorted(package.outcomes)])
        return OperationError(
            "INVALID_RESULT",
            f"outcome {outcome!r} is neither done nor declared in {package.name!r}'s FLOW.md "
            f"(declared: {declared})",
            {"outcome": outcome},
        )
    return _schema_failure(package, "result", result, "INVALID_RESULT")


def _schema_failure(
    package: Package, kind: str, value: JSONValue, code: WireCode
) -> OperationError | None:
    validator = package.schemas.get(kind)
    violation = validator.first_error(value) if validator is not None else None
    if violation is None:
        return None
    return OperationError(
        code,
        f"{kind} rejected by {package.name!r}'s {kind}.schema.json at "
        f"{violation.instance_pointer or 'the root'}: {violation.message}",
        {
            "instancePointer": violation.instance_pointer,
            "schemaPointer": violation.schema_pointer,
            "keyword": violation.keyword,
        },
    )


def channel_ports(package: Package) -> dict[str, PortSpec]:
    """The package's declared channel ports, resolved for matching against grants."""
    ports: dict[str, PortSpec] = {}
    for name, port in package.channels.items():
        schema = None if port.schema is None else ItemSchema.compile(port.schema)
        identity: tuple[str, str, str] | None = None
        if port.contract is not None:
            contract = package.channel_contracts[port.contract]
            identity = contract.identity
            schema = _contract_schema(contract)
        ports[name] = PortSpec(
            port.direction, port.required, schema, identity, port.delivery, port.start
        )
    return ports


ON_DEMAND_BYTES = 262_144
"""Descriptor bytes one run may have parsed on demand: ``channel/create`` naming a package
file that no port declares. The parse takes ~1-3 µs a byte (the meta-schema check, the
schemas' compilation, jsonschema's report of a broken one), in a worker thread; this bounds
what a component naming file after file makes the host spend to one largest descriptor's
worth (~0.5 s of CPU). A path is parsed at most once, its failure kept as its success is."""


def channel_contract_resolver(package: Package) -> Callable[[str], SourceType]:
    """Resolve ``channel/create``'s ``contract`` path inside this package, or refuse it;
    from any thread (the channel party's workers)."""
    # imported here: contract parsing, which most runs never need
    from runner.contracts.capability import ContractError
    from runner.contracts.channel import parse_channel_contract

    parsed = dict(package.channel_contracts)  # this invocation's, so the package stays as read
    refused: dict[str, str] = {}  # path -> why
    spent = 0
    lock = threading.Lock()

    def resolve(path: str) -> SourceType:
        with lock:
            return resolved(path)

    def resolved(path: str) -> SourceType:
        nonlocal spent
        contract = parsed.get(path)
        if contract is None:
            if path in refused:
                raise OperationError("INVALID_INPUT", refused[path])
            data = package.json_files.get(path[2:])
            if data is None:
                raise OperationError(
                    "INVALID_INPUT",
                    f"contract {path!r} names no descriptor in package {package.name!r}",
                )
            if spent + len(data) > ON_DEMAND_BYTES:
                raise OperationError(
                    "INVALID_INPUT",
                    f"contract {path!r}: this run has had {spent:,} bytes of descriptors "
                    f"no port declares parsed, and may have {ON_DEMAND_BYTES:,}; declare "
                    "the contract on a channel port in FLOW.md (read with the package)",
                )
            spent += len(data)
            try:
                contract = parsed[path] = parse_channel_contract(data, source=path[2:])
            except ContractError as exc:
                refused[path] = f"contract {path!r}: {exc}"
                raise OperationError("INVALID_INPUT", refused[path]) from None
        return SourceType(_contract_schema(contract), contract.identity)

    return resolve


def _contract_schema(contract: ChannelContract) -> ItemSchema | None:
    if contract.item is True:
        return None
    return ItemSchema(contract.item, contract.validator.first_error)
