"""The exceptions a component author meets, and the one that ends the channel.

Run SDK/1 gives authors two error types, to branch on by field, never by message:
:class:`OperationError` (one of the 13 wire codes or 2 local classifications of a lost
channel) and :class:`CapabilityError` (an application error a contract declares).
:class:`ChannelFault` is internal: never raised into handler code, it ends the process
nonzero with no root response (PROTOCOL.md §1, §9.2).
"""

from __future__ import annotations

from runner.json1 import JSONValue
from runner.protocol.codes import LocalCode, ProtocolViolation, WireCode

OperationErrorCode = WireCode | LocalCode


class OperationError(Exception):
    """A Run/1 operation failed; branch on :attr:`code`, not on :attr:`message`. Raised for
    ``-32000`` replies and local refusals, and *by* a handler to fail its Run with a code.
    """

    def __init__(
        self, code: OperationErrorCode, message: str | None = None, details: JSONValue = None
    ) -> None:
        self.code: OperationErrorCode = code
        self.message: str = code if message is None else message
        self.details: JSONValue = details
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"OperationError({self.code!r}, {self.message!r}, {self.details!r})"


class CapabilityError(Exception):
    """A capability answered with an error its contract declares (not a failure of Run/1)."""

    def __init__(self, error_name: str, data: JSONValue) -> None:
        self.error_name = error_name
        self.data: JSONValue = data
        super().__init__(error_name)

    def __repr__(self) -> str:
        return f"CapabilityError({self.error_name!r}, {self.data!r})"


class ChannelFault(Exception):
    """The channel is finished: ``PROTOCOL_ERROR`` (the host broke Run/1) or ``CHANNEL_LOST``;
    ``reply`` is the best-effort error frame to send first (``-32700``/``-32600``), if any.
    """

    def __init__(
        self, code: LocalCode, reason: str, reply: dict[str, JSONValue] | None = None
    ) -> None:
        self.code: LocalCode = code
        self.reason = reason
        self.reply = reply
        super().__init__(f"{code}: {reason}")


def protocol_error(reason: str, reply: dict[str, JSONValue] | None = None) -> ChannelFault:
    """A detected host violation of Run/1."""
    return ChannelFault("PROTOCOL_ERROR", reason, reply)


def fault_of(violation: ProtocolViolation) -> ChannelFault:
    """The protocol core's verdict on a host frame, as the SDK's end of the channel."""
    return ChannelFault("PROTOCOL_ERROR", violation.reason, violation.reply)
