"""Run/1 LF framing: bytes in, frame payloads out, with no I/O.

A frame is one JSON/1 object and one LF; the payload holds at most 16,777,216 bytes
(PROTOCOL.md §1). :class:`FrameDecoder` fails *as soon as* the bound is exceeded, never
holds more than it, and scans every byte once. Failures follow §1.3 and are all
:class:`~runner.protocol.codes.ProtocolViolation`: an oversize frame, an incomplete one at
EOF and invalid UTF-8 close with no reply; a JSON/1 failure or an empty frame closes after
a best-effort ``-32700``.
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
    """Splits a byte stream into frame payloads; one decoder per stream. After it raises or
    after :meth:`eof`, any further call raises :class:`LocalProtocolError`."""

    __slots__ = ("_buffer", "_finished")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._finished = False

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next bytes of the stream; return the payloads of completed frames. Raises
        :class:`ProtocolViolation` on an empty frame (``-32700`` reply) or a frame past
        :data:`MAX_PAYLOAD_BYTES` without an LF (no reply), dropping this ``data``'s payloads."""
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
    """A bare LF: no JSON text, so it closes after a ``-32700`` (§1, HOST-CASES FR-03)."""
    reply = error_response(None, PARSE_ERROR, "Parse error: an empty frame (a bare LF)")
    return ProtocolViolation("empty frame (a bare LF)", reply)


def decode_payload(payload: bytes) -> JSONValue:
    """Decode one frame payload as JSON/1 (§1.3 steps 2-3; the value may be a non-object).
    Invalid UTF-8 (checked on its own only once refused: step 2 comes first) raises
    :class:`ProtocolViolation` with no reply, any other failure with a ``-32700`` reply."""
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
    """The bytes of one frame: compact JSON/1 and the LF; :class:`LocalProtocolError` if
    ``message`` is not JSON/1 or too large (we never put an invalid frame on the wire)."""
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
    """:func:`encode_frame`'s bytes for a success response whose result ``json1.dumps``
    already encoded; raises as building and encoding the object would."""
    if not is_wire_id(request_id):
        raise LocalProtocolError(f"{request_id!r} is not a valid request id")
    # A wire id is ASCII letters, digits and ``._:/-``: nothing JSON escapes.
    head = b'{"jsonrpc":"2.0","id":"' + request_id.encode() + b'","result":'
    size = len(head) + len(result) + 1
    if size > MAX_PAYLOAD_BYTES:
        raise LocalProtocolError(f"frame payload of {size:,} bytes exceeds {MAX_PAYLOAD_BYTES:,}")
    return b"".join((head, result, b"}\n"))
