"""Run/1 LF framing: bytes in, frame payloads out, with no I/O.

A frame is one JSON/1 object, UTF-8, followed by exactly one LF; the payload before the
LF holds at most 16,777,216 bytes (PROTOCOL.md §1). Reading a component's stdout must
fail *as soon as* the bound is exceeded, not after buffering without limit, so
:class:`FrameDecoder` never holds more than the bound: it keeps only the bytes of the
current partial frame and scans every input byte exactly once (an LF can only appear
in new data, so buffered bytes are never searched again).

The failures map to the §1.3 receive pipeline: an oversize frame and an incomplete
frame at EOF are framing violations (close, no reply); invalid UTF-8 in a complete frame
also closes with no reply; a JSON/1 failure closes after a best-effort ``-32700`` reply,
and so does an empty frame (a bare LF: a payload that is no JSON text, refused by the
framer). All are :class:`~runner.protocol.codes.ProtocolViolation`.
"""

from __future__ import annotations

from typing import Final

from runner import json1
from runner.json1 import JSONValue
from runner.protocol.builders import error_response
from runner.protocol.codes import (
    MAX_ERROR_MESSAGE_SCALARS,
    PARSE_ERROR,
    LocalProtocolError,
    ProtocolViolation,
)
from runner.protocol.names import is_wire_id

MAX_PAYLOAD_BYTES: Final = 16_777_216
"""The largest frame payload (bytes before the LF)."""

_LF: Final = 0x0A


class FrameDecoder:
    """Splits a byte stream into frame payloads; one decoder per stream.

    After it raises, or after :meth:`eof`, the decoder is finished and any further
    call raises :class:`LocalProtocolError`.
    """

    __slots__ = ("_buffer", "_finished")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._finished = False

    @property
    def at_boundary(self) -> bool:
        """Whether no bytes of an unfinished frame are buffered."""
        return not self._buffer

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next bytes of the stream; return the payloads of completed frames.

        Raises :class:`ProtocolViolation` on an empty frame (with the best-effort
        ``-32700`` reply) or once more than :data:`MAX_PAYLOAD_BYTES` bytes of one frame
        have arrived without an LF (no reply).
        Payloads completed earlier in the same ``data`` are dropped with it: the channel
        is lost anyway.
        """
        if self._finished:
            raise LocalProtocolError("the frame decoder has already finished")
        buffer = self._buffer
        frames: list[bytes] = []
        start = 0
        end = len(data)
        while start < end:
            lf = data.find(_LF, start)
            if lf < 0:
                if len(buffer) + end - start > MAX_PAYLOAD_BYTES:
                    raise self._fail(_oversize())
                buffer += memoryview(data)[start:]
                break
            size = len(buffer) + lf - start
            if size == 0:
                raise self._fail(_empty())
            if size > MAX_PAYLOAD_BYTES:
                raise self._fail(_oversize())
            if buffer:
                buffer += memoryview(data)[start:lf]
                frames.append(bytes(buffer))
                buffer.clear()
            else:
                frames.append(data[start:lf])
            start = lf + 1
        return frames

    def eof(self) -> None:
        """The stream ended; raises :class:`ProtocolViolation` if a frame is incomplete."""
        if self._finished:
            raise LocalProtocolError("the frame decoder has already finished")
        self._finished = True
        if self._buffer:
            pending = len(self._buffer)
            self._buffer.clear()
            raise ProtocolViolation(f"incomplete frame: {pending} bytes after the last LF")

    def _fail(self, violation: ProtocolViolation) -> ProtocolViolation:
        self._finished = True
        self._buffer.clear()
        return violation


def _oversize() -> ProtocolViolation:
    return ProtocolViolation(f"frame payload exceeds {MAX_PAYLOAD_BYTES:,} bytes without an LF")


def _empty() -> ProtocolViolation:
    """A bare LF: its payload is no JSON text, so it closes after the ``-32700`` that any
    such frame gets (§1; HOST-CASES FR-03 asks the same of a component)."""
    reply = error_response(None, PARSE_ERROR, "Parse error: an empty frame (a bare LF)")
    return ProtocolViolation("empty frame (a bare LF)", reply)


def decode_payload(payload: bytes) -> JSONValue:
    """Decode one frame payload as JSON/1 (§1.3 steps 2-3).

    Invalid UTF-8 raises :class:`ProtocolViolation` with no reply; any other JSON/1
    failure (syntax, BOM, duplicate member, lone surrogate, out-of-domain number,
    exceeded bound) raises it with a best-effort ``-32700`` reply (``id: null``).
    The value may still be a non-object; :func:`~runner.protocol.envelope.classify`
    rejects that.

    JSON/1 refuses invalid UTF-8 too, so the payload is decoded once: only a refused one
    is checked for UTF-8 on its own, since step 2 comes first (a BOM followed by invalid
    UTF-8 is a UTF-8 failure, not a JSON/1 one).
    """
    try:
        return json1.loads(payload)
    except json1.JSON1Error as exc:
        failure = exc
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolViolation(f"frame is not valid UTF-8 (byte {exc.start})") from None
    message = f"Parse error: {failure.reason}"[:MAX_ERROR_MESSAGE_SCALARS]
    raise ProtocolViolation(
        f"frame is not JSON/1: {failure.reason}", error_response(None, PARSE_ERROR, message)
    ) from failure


def encode_frame(message: JSONValue) -> bytes:
    """The bytes of one frame: compact JSON/1 and the LF.

    Raises :class:`LocalProtocolError` if ``message`` is not JSON/1 or its payload
    would exceed :data:`MAX_PAYLOAD_BYTES`: we never put an invalid frame on the wire.
    """
    try:
        payload = json1.dumps(message)
    except json1.JSON1Error as exc:
        raise LocalProtocolError(f"cannot send a value outside JSON/1: {exc.reason}") from exc
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise LocalProtocolError(
            f"frame payload of {len(payload):,} bytes exceeds {MAX_PAYLOAD_BYTES:,}"
        )
    return payload + b"\n"


def encode_result_frame(request_id: str, result: bytes) -> bytes:
    """The frame of a success response to ``request_id`` whose result ``json1.dumps``
    already encoded: the bytes :func:`encode_frame` writes for that response object.

    Raises :class:`LocalProtocolError` for an id that is not a wire id or a payload over
    :data:`MAX_PAYLOAD_BYTES`, as building and encoding the object would.
    """
    if not is_wire_id(request_id):
        raise LocalProtocolError(f"{request_id!r} is not a valid request id")
    # A wire id is ASCII letters, digits and ``._:/-``: nothing JSON escapes.
    head = b'{"jsonrpc":"2.0","id":"' + request_id.encode() + b'","result":'
    size = len(head) + len(result) + 1
    if size > MAX_PAYLOAD_BYTES:
        raise LocalProtocolError(f"frame payload of {size:,} bytes exceeds {MAX_PAYLOAD_BYTES:,}")
    return b"".join((head, result, b"}\n"))
