"""LF framing: the shared framing vectors, the 16 MiB boundary, and a fuzzed pipeline."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messagekit import validate_result
from runner import json1
from runner.protocol.builders import cancel_notification, result_response
from runner.protocol.codes import LocalProtocolError, ProtocolViolation
from runner.protocol.envelope import ErrorResponse, Message, Request, Success, classify
from runner.protocol.frames import (
    MAX_PAYLOAD_BYTES,
    FrameDecoder,
    decode_payload,
    encode_frame,
    encode_result_frame,
)
from runner.protocol.names import CHANNEL_METHODS, COMPONENT_TO_HOST_METHODS
from runner.protocol.params import validate_params
from speckit import load_spec

_load = load_spec


FRAMING = _load("conformance/framing.json")
MESSAGES = _load("conformance/messages.json")

# Where each known invalid vector must fail; vectors added to the corpus later only need
# to fail somewhere. "json1" failures carry a -32700 reply, the others none.
EXPECTED_STAGE = {
    "empty-frame": "framing",
    "utf8-bom": "json1",
    "invalid-utf8": "utf8",
    "duplicate-member": "json1",
    "escaped-lone-surrogate": "json1",
    "unsafe-integral-token": "json1",
    "eof-before-line-feed": "eof",
    "two-values-one-frame": "json1",
}


def _read_stream(data: bytes) -> list[Any]:
    """Frame, decode and return every value of a complete stream."""
    decoder = FrameDecoder()
    frames = decoder.feed(data)
    decoder.eof()
    return [decode_payload(frame) for frame in frames]


@pytest.mark.parametrize("vector", FRAMING["valid"], ids=lambda v: v["name"])
def test_valid_framing_vector(vector: dict[str, str]) -> None:
    decoder = FrameDecoder()
    frames = decoder.feed(bytes.fromhex(vector["hex"]))
    decoder.eof()  # raises unless the stream ends at a frame boundary
    assert len(frames) == 1
    assert isinstance(decode_payload(frames[0]), dict)


@pytest.mark.parametrize("vector", FRAMING["invalid"], ids=lambda v: v["name"])
def test_invalid_framing_vector(vector: dict[str, str]) -> None:
    data = bytes.fromhex(vector["hex"])
    decoder = FrameDecoder()
    stage = "framing"
    with pytest.raises(ProtocolViolation) as caught:
        frames = decoder.feed(data)
        stage = "eof"
        decoder.eof()
        for frame in frames:
            stage = "utf8" if not _is_utf8(frame) else "json1"
            decode_payload(frame)
    assert stage == EXPECTED_STAGE.get(vector["name"], stage)
    if stage == "json1" or vector["name"] == "empty-frame":  # a bare LF is no JSON text
        reply = caught.value.reply
        assert reply is not None and reply["id"] is None
        error = reply["error"]
        assert (
            isinstance(error, dict)
            and error["code"] == -32700
            and set(error)
            == {
                "code",
                "message",
            }
        )
    else:
        assert caught.value.reply is None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_max_payload_accepted_whole() -> None:
    payload = b'"' + b"a" * (MAX_PAYLOAD_BYTES - 2) + b'"'
    assert len(payload) == MAX_PAYLOAD_BYTES
    decoder = FrameDecoder()
    assert decoder.feed(payload) == []
    assert decoder.feed(b"\n") == [payload]
    decoder.eof()


def test_max_payload_accepted_in_chunks() -> None:
    payload = b"x" * MAX_PAYLOAD_BYTES
    decoder = FrameDecoder()
    chunk = 65_536
    for start in range(0, MAX_PAYLOAD_BYTES, chunk):
        assert decoder.feed(payload[start : start + chunk]) == []
    (frame,) = decoder.feed(b"\n{}\n")[:1]
    assert frame == payload


def test_one_byte_over_fails_as_soon_as_buffered() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"x" * MAX_PAYLOAD_BYTES)
    with pytest.raises(ProtocolViolation) as caught:
        decoder.feed(b"x")  # no LF needed: the bound is already exceeded
    assert caught.value.reply is None
    assert not decoder._buffer  # nothing kept


def test_one_byte_over_in_one_chunk() -> None:
    with pytest.raises(ProtocolViolation):
        FrameDecoder().feed(b"x" * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(ProtocolViolation):
        FrameDecoder().feed(b"{}\n" + b"x" * (MAX_PAYLOAD_BYTES + 1) + b"\n")


def test_frames_split_and_joined() -> None:
    stream = b'{"a":1}\n{"b":[1,2]}\n{}\n'
    decoder = FrameDecoder()
    frames: list[bytes] = []
    for i in range(len(stream)):
        frames += decoder.feed(stream[i : i + 1])
        assert (not decoder._buffer) == (stream[i : i + 1] == b"\n")
    assert frames == [b'{"a":1}', b'{"b":[1,2]}', b"{}"]
    decoder.eof()
    assert FrameDecoder().feed(stream) == frames


def test_byte_at_a_time_is_linear() -> None:
    # 200,000 single-byte feeds of one frame: quadratic re-scanning would take minutes.
    payload = b"[" + b"1," * 99_999 + b"1]"
    decoder = FrameDecoder()
    for byte in payload:
        assert decoder.feed(bytes((byte,))) == []
    assert decoder.feed(b"\n") == [payload]


def test_empty_frame_after_a_frame() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolViolation, match="empty frame") as caught:
        decoder.feed(b"{}\n\n")
    reply = caught.value.reply
    assert reply is not None and reply["id"] is None
    assert reply["error"] == {"code": -32700, "message": "Parse error: an empty frame (a bare LF)"}


def test_eof_on_boundary_and_mid_frame() -> None:
    decoder = FrameDecoder()
    decoder.eof()  # an empty stream ends cleanly
    partial = FrameDecoder()
    partial.feed(b"{}\n{")
    with pytest.raises(ProtocolViolation, match="incomplete frame"):
        partial.eof()


def test_finished_decoder_is_a_local_error() -> None:
    decoder = FrameDecoder()
    decoder.eof()
    with pytest.raises(LocalProtocolError):
        decoder.feed(b"{}\n")
    failed = FrameDecoder()
    with pytest.raises(ProtocolViolation):
        failed.feed(b"\n")
    with pytest.raises(LocalProtocolError):
        failed.feed(b"{}\n")
    with pytest.raises(LocalProtocolError):
        failed.eof()


def test_encode_frame() -> None:
    message = cancel_notification("component:2")
    frame = encode_frame(message)
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    assert b" " not in frame
    assert _read_stream(frame) == [message]
    assert encode_frame({"text": "line\nbreak ü"}).count(b"\n") == 1


def test_encode_frame_refuses_oversize_and_non_json1() -> None:
    half = "a" * 8_388_600
    with pytest.raises(LocalProtocolError):
        encode_frame({"a": half, "b": half, "c": "x" * 10_000})
    with pytest.raises(LocalProtocolError):
        encode_frame({"n": float("nan")})
    with pytest.raises(LocalProtocolError):
        encode_frame({"n": 2**53})


def test_parse_error_reply_is_a_valid_frame() -> None:
    with pytest.raises(ProtocolViolation) as caught:
        decode_payload(b'{"a":1,"a":2}')
    reply = caught.value.reply
    assert reply is not None
    assert isinstance(classify(reply), ErrorResponse)
    assert _read_stream(encode_frame(reply)) == [reply]


def test_non_object_payload_decodes_and_classify_rejects() -> None:
    for payload in (b"[]", b"1", b'"x"', b"null"):
        with pytest.raises(ProtocolViolation) as caught:
            classify(decode_payload(payload))
        assert caught.value.reply is not None


# --- fuzz: the whole receive pipeline raises only our own error types -------------------

VALID_FRAMES = [encode_frame(vector["value"]) for vector in MESSAGES["valid"]]


@st.composite
def mutated_streams(draw: st.DrawFn) -> list[bytes]:
    data = bytearray(b"".join(draw(st.lists(st.sampled_from(VALID_FRAMES), min_size=1))))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        position = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[position] = draw(st.integers(0, 255))
        elif op == "insert":
            data[position:position] = draw(
                st.sampled_from([b"\n", b"\x00", b"\xff", b"\xef\xbb\xbf", b'"', b"{", b"}"])
                | st.binary(max_size=4)
            )
        elif op == "delete" and data:
            del data[position : position + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[position:]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    bounds = [0, *cuts, len(data)]
    return [bytes(data[a:b]) for a, b in itertools.pairwise(bounds)]


def _check_message(message: Message) -> None:
    if isinstance(message, Request):
        if message.method in COMPONENT_TO_HOST_METHODS | {"flow/run"}:
            validate_params(message.method, message.params)
    elif isinstance(message, Success):
        for method in ("flow/run", "capability/call", *sorted(CHANNEL_METHODS)):
            validate_result(method, message.result)
    elif isinstance(message, ErrorResponse):
        message.operation_error()


@settings(max_examples=600, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_streams())
def test_mutated_streams_raise_only_protocol_errors(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                _check_message(classify(decode_payload(frame)))
        decoder.eof()
    except ProtocolViolation:  # decode_payload wraps every json1.JSON1Error
        pass


@pytest.mark.parametrize(
    "result",
    [None, {"value": None}, {"value": -0.0, "s": 'é\u2028"\\'}, [1, 2.5, {"a": []}], "x"],
)
def test_encode_result_frame_is_the_frame_of_the_response_object(result: object) -> None:
    expected = encode_frame(result_response("component:7", result))  # type: ignore[arg-type]
    assert encode_result_frame("component:7", json1.dumps(result)) == expected


def test_encode_result_frame_refuses_a_bad_id_and_an_oversize_payload() -> None:
    with pytest.raises(LocalProtocolError):
        encode_result_frame('a"b', b"null")
    with pytest.raises(LocalProtocolError):
        encode_result_frame("c:1", b'"' + b"x" * MAX_PAYLOAD_BYTES + b'"')
