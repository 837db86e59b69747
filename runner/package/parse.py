"""A validated FLOW package (:class:`Package`) made from its files: ``FLOW.md`` parsed,
its references resolved, every schema and contract compiled, the tree digested. Only a
run of an image with a package imports this module (and the YAML and Schema/1 it needs).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeVar

from runner import json1
from runner.json1 import JSONValue
from runner.package import FLOW_MD
from runner.package.errors import PackageError

if TYPE_CHECKING:
    from runner.contracts.capability import CapabilityContract
    from runner.contracts.channel import ChannelContract
    from runner.contracts.schema1 import Schema1Validator
    from runner.package.frontmatter import Access, Port

SCHEMA_FILES: Final = ("input", "settings", "result")
DIGEST_DOMAIN: Final = b"FLOW-Package/1\0"
T = TypeVar("T")


@dataclass(frozen=True)
class Package:
    """A validated package: its metadata, compiled schemas, contracts and digest."""

    image_id: str
    root: str
    """The package directory inside the image."""
    name: str
    description: str
    outcomes: dict[str, str]
    uses: dict[str, CapabilityContract | None]
    """Capability slot → its contract, or ``None`` for a ``{local: true}`` slot."""
    attachments: dict[str, Access]
    channels: dict[str, Port]
    schemas: dict[str, Schema1Validator] = field(repr=False)
    """``input`` / ``settings`` / ``result`` → validator, for the files present."""
    schema_documents: dict[str, JSONValue] = field(repr=False)
    digest: str
    file_count: int
    channel_contracts: dict[str, ChannelContract] = field(default_factory=dict, repr=False)
    """``./`` reference → Channel Contract/1 descriptor, for every port that names one."""
    json_files: dict[str, bytes] = field(default_factory=dict, repr=False)
    """Package path → bytes of each small ``.json`` file: what ``channel/create``'s
    ``contract`` may name at run time (it resolves only inside the invoking package)."""


def package_digest(files: dict[str, bytes]) -> str:
    """``sha256:<hex>`` of the file tree by the Package/1 digest rule (§14)."""
    digest = hashlib.sha256(DIGEST_DOMAIN + struct.pack(">Q", len(files)))
    for path in sorted(files, key=lambda p: p.encode()):
        name, content = path.encode(), files[path]
        digest.update(b"\x01" + struct.pack(">I", len(name)) + name)
        digest.update(struct.pack(">Q", len(content)) + content)
    return "sha256:" + digest.hexdigest()


def package_from_files(files: dict[str, bytes], image_id: str = "", root: str = "") -> Package:
    """Validate a package's files: FLOW.md, its references and the root schemas."""
    from runner.contracts.capability import MAX_CONTRACT_BYTES, parse_contract
    from runner.contracts.channel import parse_channel_contract
    from runner.contracts.schema1 import SchemaError, compile_schema1_file
    from runner.package.frontmatter import parse_flow_md

    if FLOW_MD not in files:
        raise PackageError(FLOW_MD, "", "missing: every package has a root FLOW.md")
    meta = parse_flow_md(files[FLOW_MD])
    uses = {
        slot: None if ref is None else _contract(files, ref, f"uses.{slot}", parse_contract)
        for slot, ref in meta.uses.items()
    }
    channel_contracts = {
        port.contract: _contract(files, port.contract, f"channels.{name}", parse_channel_contract)
        for name, port in meta.channels.items()
        if port.contract is not None
    }
    schemas: dict[str, Schema1Validator] = {}
    documents: dict[str, JSONValue] = {}
    for kind in SCHEMA_FILES:
        name = f"{kind}.schema.json"
        if name in files:
            try:
                schemas[kind] = compile_schema1_file(files[name])
            except SchemaError as exc:
                raise PackageError(name, exc.pointer or "/", f"{exc.code}: {exc.message}") from None
            documents[kind] = json1.loads(files[name])
    return Package(
        image_id=image_id,
        root=root,
        name=meta.name,
        description=meta.description,
        outcomes=meta.outcomes,
        attachments=meta.attachments,
        channels=meta.channels,
        uses=uses,
        channel_contracts=channel_contracts,
        schemas=schemas,
        schema_documents=documents,
        digest=package_digest(files),
        file_count=len(files),
        json_files={
            path: data
            for path, data in files.items()
            if path.endswith(".json") and len(data) <= MAX_CONTRACT_BYTES
        },
    )


def _contract(files: dict[str, bytes], ref: str, key: str, parse: Callable[..., T]) -> T:
    """The descriptor ``ref`` names, parsed; a missing file or a bad descriptor is a
    :class:`PackageError` naming the FLOW.md key or the descriptor's file."""
    from runner.contracts.capability import ContractError

    data = files.get(ref[2:])
    if data is None:
        raise PackageError(
            FLOW_MD, f"{key}.contract", f"{ref!r} names no regular file in the package (exact case)"
        )
    try:
        return parse(data, source=ref[2:])
    except ContractError as exc:
        raise PackageError(ref[2:], exc.pointer, f"{exc.code}: {exc.message}") from None


def summary(package: Package) -> dict[str, JSONValue]:
    """What ``flow-runner inspect`` shows: declarations, contract identities, schemas."""
    uses: dict[str, JSONValue] = {
        slot: {"local": True}
        if c is None
        else dict(zip(("contract", "version", "digest"), c.identity, strict=True))
        for slot, c in package.uses.items()
    }
    channels: dict[str, JSONValue] = {
        name: {
            key: value
            for key, value in {
                "direction": port.direction,
                "required": port.required,
                "contract": _channel_contract(package, port.contract),
                "delivery": port.delivery,
                "start": port.start,
                "schema": _schema_summary(port.schema) if port.schema is not None else None,
            }.items()
            if value is not None
        }
        for name, port in package.channels.items()
    }
    return {
        "image": package.image_id,
        "name": package.name,
        "description": package.description,
        "outcomes": dict(package.outcomes),
        "uses": uses,
        "attachments": dict(package.attachments),
        "channels": channels,
        "schemas": {
            kind: _schema_summary(document) for kind, document in package.schema_documents.items()
        },
        "digest": package.digest,
        "files": package.file_count,
    }


def _channel_contract(package: Package, ref: str | None) -> JSONValue:
    """A port's contract as inspect shows it: where it is and its identity."""
    if ref is None:
        return None
    return {"path": ref, **package.channel_contracts[ref].identity._asdict()}


def _schema_summary(document: JSONValue) -> JSONValue:
    """A schema's top level: type, required and property names."""
    if not isinstance(document, dict):
        return document
    out: dict[str, JSONValue] = {}
    for key in ("type", "required", "properties", "additionalProperties"):
        if key in document:
            value = document[key]
            names: list[JSONValue] = list(sorted(value)) if isinstance(value, dict) else []
            out[key] = names if key == "properties" else value
    return out
