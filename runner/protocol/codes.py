"""The Run/1 error registry and the three exception types of the protocol core.

Run/1 reports a failed Run or operation as one of 13 wire codes in a ``-32000`` error's
``data.code``, or, when the channel itself ends, as one of two local-only codes never
sent (PROTOCOL.md §9). The registry is written out so the installed package needs no
spec checkout; a test keeps it equal to ``run-1-errors.json``. As in h11, a *remote*
mistake is a :class:`ProtocolViolation` (``PROTOCOL_ERROR``), a *local* one (misusing
the API) a :class:`LocalProtocolError`, a bug never reported to the peer;
:class:`OperationError` is the ordinary report of a failed Run or operation.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from runner.json1 import JSONValue

WireCode = Literal[
    "CANCELLED",
    "DEADLINE_EXCEEDED",
    "OWNER_CLOSED",
    "OPERATION_CONFLICT",
    "UNAVAILABLE",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "INVALID_INPUT",
    "INVALID_RESULT",
    "UNCERTAIN",
    "EXECUTION_FAILED",
    "LAGGED",
    "DISCONNECTED",
]
"""A code that may travel in ``error.data.code`` of a ``-32000`` error."""

LocalCode = Literal["PROTOCOL_ERROR", "CHANNEL_LOST"]
"""A terminal classification of a lost channel; never sent on the wire."""

FlowCode = WireCode | LocalCode

WIRE_CODES: Final[tuple[WireCode, ...]] = get_args(WireCode)
"""The 13 wire codes, in registry order."""

LOCAL_CODES: Final[tuple[LocalCode, ...]] = get_args(LocalCode)
"""The 2 local-only codes, in registry order."""

PROTOCOL_ERROR: Final = "PROTOCOL_ERROR"
"""A detected peer violation: framing, JSON/1, envelope, correlation, protocol state."""

CHANNEL_LOST: Final = "CHANNEL_LOST"
"""EOF, a read or write failure, or transport loss with no detected violation."""

_FLOW_CODES: Final[frozenset[str]] = frozenset(WIRE_CODES + LOCAL_CODES)
_WIRE_CODE_SET: Final[frozenset[str]] = frozenset(WIRE_CODES)

# JSON-RPC 2.0 error codes used by Run/1 (PROTOCOL.md §9.1, §9.2).
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
OPERATIONAL: Final = -32000

MAX_ERROR_MESSAGE_SCALARS: Final = 1_024
"""An error ``message`` holds 1–1,024 Unicode scalar values."""


_CUT: Final = " [...]"


def bounded_message(text: str) -> str:
    """``text`` as an error message: 1-1,024 scalars, a cut marked ``[...]`` (a message
    quoting the peer must never make the host build an error it cannot hold)."""
    if len(text) <= MAX_ERROR_MESSAGE_SCALARS:
        return text or "unspecified"
    return text[: MAX_ERROR_MESSAGE_SCALARS - len(_CUT)] + _CUT


def is_wire_code(code: object) -> bool:
    """Whether ``code`` is one of the 13 codes allowed in ``error.data.code``."""
    return isinstance(code, str) and code in _WIRE_CODE_SET


class LocalProtocolError(Exception):
    """This process misused the protocol API (a bug here, not the peer's fault)."""


class ProtocolViolation(Exception):
    """The peer broke Run/1; the channel must close and is classified ``PROTOCOL_ERROR``.
    ``reply`` is the best-effort error frame to write before closing (never waited on), or
    ``None`` where the protocol closes with no further frame."""

    code: Final = PROTOCOL_ERROR

    def __init__(self, reason: str, reply: dict[str, JSONValue] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply = reply


class OperationError(Exception):
    """A failed Run or operation: a wire code (or a local one) with its message;
    ``details`` is ``data.details``, ``None`` when absent (as in Run SDK/1, an explicit
    ``null`` is not told apart)."""

    def __init__(self, code: FlowCode, message: str, details: JSONValue = None) -> None:
        if code not in _FLOW_CODES:
            raise LocalProtocolError(f"{code!r} is not a Run/1 error code")
        if not isinstance(message, str) or not 1 <= len(message) <= MAX_ERROR_MESSAGE_SCALARS:
            raise LocalProtocolError("an error message must be 1-1,024 Unicode scalars")
        super().__init__(f"{code}: {message}")
        self.code: FlowCode = code
        self.message = message
        self.details = details

    @property
    def is_local(self) -> bool:
        """Whether the code is local-only (``PROTOCOL_ERROR`` or ``CHANNEL_LOST``)."""
        return self.code not in _WIRE_CODE_SET

    def to_error_object(self) -> dict[str, JSONValue]:
        """The JSON-RPC ``error`` member reporting this failure; :class:`LocalProtocolError`
        for a local-only code, which is never sent (map it to a wire code first, §5)."""
        if self.is_local:
            raise LocalProtocolError(f"{self.code} is local-only and is never sent")
        data: dict[str, JSONValue] = {"code": self.code}
        if self.details is not None:
            data["details"] = self.details
        return {"code": OPERATIONAL, "message": self.message, "data": data}
