"""The values a component sees: Run results, attachments, channel facts, JSON types, names.

These are plain immutable records so that handler code can build, compare and log
them without touching the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from runner.json1 import JSONValue
from runner.protocol.codes import WireCode

JSONObject: TypeAlias = dict[str, JSONValue]
AttachmentAccess: TypeAlias = Literal["read", "read-write"]
Delivery: TypeAlias = Literal["direct", "broadcast"]
ReleaseOutcome: TypeAlias = Literal["released", "ended", "failed"]

MAX_ENDPOINTS: Final = 512  # per Run, root grants included: the reference SDK's local cap
MAX_SOURCES: Final = 512  # broadcast sources per Run, likewise


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
    """The exact Channel Contract/1 a source was named with at creation (PROTOCOL.md §15.2):
    readers and writers match on all three members, with no version ranges."""

    id: str
    version: str
    digest: str


@dataclass(frozen=True, slots=True)
class ReleaseStatus:
    """What the host reported when a receiver was disposed of (``channel/release``):
    ``released`` before its source ended or failed (incomplete delivery, not a failure),
    ``ended`` after ``last_sequence``, or ``failed`` with the receiver's sticky failure
    ``code`` and optional ``details``."""

    status: ReleaseOutcome
    last_sequence: int | None = None
    code: WireCode | None = None
    details: JSONValue = None
