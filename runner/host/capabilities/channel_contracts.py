"""Channel Contract/1: the named item type of a channel source (PROTOCOL.md §15.2).

A channel created with ``contract: "./updates.json"`` carries that descriptor's identity
(id, version, digest) on every grant, and its ``item`` schema holds every value sent.
Ports that name a contract accept only sources of the identical identity; this is how
two flows written apart agree on what flows between them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final

from runner import json1
from runner.json1 import JSONValue

from .contracts import MAX_CONTRACT_BYTES, ContractError, ContractIdentity
from .schema1 import Schema1Graph, Schema1Validator, SchemaError, meta_violation

CHANNEL_CONTRACT_1_URI: Final = "https://flow.jig.md/schemas/channel-contract-1.schema.json"
DIGEST_DOMAIN: Final = b"FLOW-Channel-Contract/1\0"


@dataclass(frozen=True)
class ChannelContract:
    """A validated descriptor. Equal when the identities are equal."""

    identity: ContractIdentity
    item: JSONValue = field(compare=False, repr=False)
    """The item schema as written (``True`` for any JSON/1 value)."""
    validator: Schema1Validator = field(compare=False, repr=False)
    source: str = field(compare=False, default="<descriptor>")


def channel_contract_digest(descriptor: JSONValue) -> str:
    """``sha256:<hex>`` of the domain separator and the RFC 8785 bytes of the descriptor."""
    return "sha256:" + hashlib.sha256(DIGEST_DOMAIN + json1.canonical(descriptor)).hexdigest()


def parse_channel_contract(data: bytes, *, source: str = "<descriptor>") -> ChannelContract:
    """Validate descriptor bytes (≤262,144, JSON/1, Channel Contract/1, Schema/1 item)."""
    if len(data) > MAX_CONTRACT_BYTES:
        raise ContractError(
            source,
            "CONTRACT_LIMIT_EXCEEDED",
            "",
            f"the descriptor is over {MAX_CONTRACT_BYTES:,} bytes",
        )
    try:
        descriptor = json1.loads(data)
    except json1.JSON1Error as exc:
        raise ContractError(source, "CONTRACT_INVALID_JSON", exc.pointer or "", str(exc)) from None
    if not isinstance(descriptor, dict):
        raise ContractError(source, "CONTRACT_INVALID", "", "a descriptor is a JSON object")
    defs = descriptor.get("$defs")
    item = descriptor.get("item", True)
    try:
        graph = Schema1Graph({"/item": item}, defs if isinstance(defs, dict) else {})
    except SchemaError as exc:
        raise ContractError(source, exc.code, exc.pointer, exc.message) from None
    found = meta_violation(descriptor, CHANNEL_CONTRACT_1_URI)
    if found is not None:
        pointer, message = found
        raise ContractError(
            source, "CONTRACT_INVALID", pointer, f"{message} (see the Channel Contract/1 schema)"
        )
    identity = ContractIdentity(
        str(descriptor["id"]), str(descriptor["version"]), channel_contract_digest(descriptor)
    )
    return ChannelContract(identity, item, graph.validator("/item"), source)
