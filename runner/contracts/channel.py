"""Channel Contract/1 (PROTOCOL.md §15.2): the named item type of a channel source.

A channel created with a contract carries its identity on every grant, and its ``item``
schema holds every value sent; a port that names a contract accepts only that identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from runner.contracts.capability import ContractIdentity, read_contract
from runner.contracts.schema1 import Schema1Validator
from runner.json1 import JSONValue

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


def parse_channel_contract(data: bytes, *, source: str = "<descriptor>") -> ChannelContract:
    """Validate descriptor bytes (≤262,144, JSON/1, Channel Contract/1, Schema/1 item)."""
    descriptor, graph, identity = read_contract(
        data,
        source,
        lambda d: {"/item": d.get("item", True)},
        CHANNEL_CONTRACT_1_URI,
        DIGEST_DOMAIN,
    )
    return ChannelContract(identity, descriptor.get("item", True), graph.validator("/item"), source)
