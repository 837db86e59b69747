"""The values a component sees: Run results, attachments, channel facts, JSON types, names.

These are plain immutable records so that handler code can build, compare and log
them without touching the wire. The name grammars are the ones Run/1 fixes for
request ids, operation ids and LocalNames (PROTOCOL.md §1, §3, §12); both the envelope
checks and the call-argument checks use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, TypeGuard

from runner.component.errors import WireCode
from runner.json1 import MAX_DOCUMENT_BYTES, MAX_SAFE_INTEGER, JSONValue

JSONObject: TypeAlias = dict[str, JSONValue]
AttachmentAccess: TypeAlias = Literal["read", "read-write"]
Delivery: TypeAlias = Literal["direct", "broadcast"]
ReleaseOutcome: TypeAlias = Literal["released", "ended", "failed"]

MAX_FRAME_BYTES: Final = MAX_DOCUMENT_BYTES  # a frame's payload is one JSON/1 document
MAX_MESSAGE_SCALARS: Final = 1_024
MAX_INTENT_SCALARS: Final = 16_384
MAX_MAP_ENTRIES: Final = 256
MAX_ENDPOINTS: Final = 512  # per Run, root grants included: the reference SDK's local cap
MAX_SOURCES: Final = 512  # broadcast sources per Run, likewise

_WIRE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_LOCAL_NAME: Final = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


@dataclass(frozen=True, slots=True)
class RunResult:
    """A finished Run: a package outcome (``done`` or a declared one) and its output."""

    outcome: str
    output: JSONValue


@dataclass(frozen=True, slots=True)
class Attachment:
    """A sandbox-local directory the host prepared for this Run, and how it may be used."""

    path: str
    access: AttachmentAccess


@dataclass(frozen=True, slots=True)
class ChannelContractIdentity:
    """The exact Channel Contract/1 a source was named with at creation (PROTOCOL.md §15.2).

    Readers and writers match on all three members; there are no version ranges.
    """

    id: str
    version: str
    digest: str


@dataclass(frozen=True, slots=True)
class ReleaseStatus:
    """What the host reported when a receiver was disposed of (``channel/release``).

    ``released``: disposed before the source ended or failed (deliberately incomplete
    delivery, not a failure); ``ended``: the source had ended cleanly after
    ``last_sequence``; ``failed``: the receiver's sticky failure ``code`` (e.g.
    ``LAGGED``) with optional ``details``.
    """

    status: ReleaseOutcome
    last_sequence: int | None = None
    code: WireCode | None = None
    details: JSONValue = None


def is_wire_id(value: object) -> TypeGuard[str]:
    """A request id, operation id or endpoint reference: 1–128 ASCII of the id grammar."""
    return isinstance(value, str) and value.isascii() and _WIRE_ID.fullmatch(value) is not None


def is_local_name(value: object) -> TypeGuard[str]:
    """A Package/1 LocalName: 1–64 lowercase ASCII words joined by single hyphens."""
    return (
        isinstance(value, str)
        and len(value) <= 64
        and value.isascii()
        and _LOCAL_NAME.fullmatch(value) is not None
    )


def is_safe_integer(value: object, minimum: int = 0) -> bool:
    """An integral JSON/1 number in ``minimum … 2^53−1`` (``5.0`` counts as ``5``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return minimum <= value <= MAX_SAFE_INTEGER and float(value).is_integer()
