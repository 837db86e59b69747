"""FLOW JSON/1 (runner.json1): every bound at its edge, the rejections, RFC 8785, equality,
and properties that tie the orjson-backed fast path to the stdlib-only pure path."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import timedelta
from enum import IntEnum
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import json1
from runner.json1 import JSON1Error, canonical, dumps, loads

SAFE = json1.MAX_SAFE_INTEGER
Decoder = Callable[[bytes], json1.JSONValue]


@pytest.fixture(params=["fast", "pure"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once with orjson and once as in a component image (stdlib only)."""
    if request.param == "pure":
        monkeypatch.setattr(json1, "orjson", None)
    return str(request.param)


def rejected(document: bytes) -> JSON1Error:
    with pytest.raises(JSON1Error) as caught:
        loads(document)
    error = caught.value
    assert (error.offset is None) != (error.pointer is None), "exactly one location"
    return error


def refused(value: object) -> JSON1Error:
    with pytest.raises(JSON1Error) as caught:
        dumps(value)
    assert caught.value.pointer is not None
    return caught.value


def nested(depth: int, open_: bytes = b"[", close: bytes = b"]", core: bytes = b"") -> bytes:
    return open_ * depth + core + close * depth


# --- the bounds, each at its edge ----------------------------------------------------


@pytest.mark.usefixtures("mode")
class TestBounds:
    def test_depth_128_ok_129_not(self) -> None:
        assert loads(nested(128)) is not None
        assert loads(nested(127, core=b"0")) is not None  # the 0 sits at depth 128
        assert loads(nested(127, b'{"a":', b"}", b"null")) is not None
        assert rejected(nested(129)).pointer == "/0" * 128
        assert rejected(nested(128, core=b"0")).pointer == "/0" * 128
        assert rejected(nested(128, b'{"a":', b"}", b"null")).pointer == "/a" * 128

    def test_very_deep_document_is_rejected_with_offset(self) -> None:
        # Too deep for the stdlib's recursion: located by a bracket scan instead.
        assert rejected(nested(5_000)).offset == 128
        assert rejected(b"[" + b"[[]]," * 3 + nested(5_000) + b"]").offset == 16 + 127

    def test_document_bytes(self) -> None:
        exact = b"null" + b" " * (json1.MAX_DOCUMENT_BYTES - 4)
        assert loads(exact) is None
        assert rejected(exact + b" ").offset == json1.MAX_DOCUMENT_BYTES

    @pytest.mark.parametrize("sign", [1, -1])
    def test_safe_integers(self, sign: int) -> None:
        assert loads(b"%d" % (sign * SAFE)) == sign * SAFE
        assert loads(b"%d.0" % (sign * SAFE)) == sign * SAFE
        assert "beyond" in rejected(b"[%d]" % (sign * (SAFE + 1))).reason
        assert rejected(b"[%d]" % (sign * (SAFE + 1))).pointer == "/0"
        assert rejected(b"%d.0" % (sign * (SAFE + 1))).pointer == ""

    @pytest.mark.parametrize("token", [b"9007199254740993", b"1e16", b"1e300", b"1.5e300"])
    def test_integral_values_beyond_the_range(self, token: bytes) -> None:
        assert "beyond" in rejected(b'{"a":%s}' % token).reason

    def test_large_non_integral_values_cannot_exist(self) -> None:
        # Every double of magnitude >= 2^53 is integral: 2^53 - 0.5 rounds to 2^53.
        assert loads(b"4503599627370495.5") == 4503599627370495.5
        assert "beyond" in rejected(b"9007199254740991.5").reason

    def test_members_per_object(self) -> None:
        members = [b'"k%d":null' % i for i in range(json1.MAX_MEMBERS)]
        assert len(loads(b"{" + b",".join(members) + b"}")) == json1.MAX_MEMBERS  # type: ignore[arg-type]
        error = rejected(b'{"x":{' + b",".join([*members, b'"last":null']) + b"}}")
        assert error.pointer == "/x"

    def test_items_per_array(self) -> None:
        assert len(loads(b"[" + b",".join([b"null"] * json1.MAX_ITEMS) + b"]")) == 65_536  # type: ignore[arg-type]
        error = rejected(b"[[" + b",".join([b"null"] * (json1.MAX_ITEMS + 1)) + b"]]")
        assert error.pointer == "/0"

    @pytest.mark.parametrize("unit", ["a", "é", "€", "😀"])
    def test_member_name_bytes(self, unit: str) -> None:
        name = unit * (json1.MAX_NAME_BYTES // len(unit.encode()))
        name += "a" * (json1.MAX_NAME_BYTES - len(name.encode()))
        assert loads(b'{"%s":1}' % name.encode()) == {name: 1}
        error = rejected(b'{"x":{"%s":1}}' % (name + "a").encode())
        assert error.pointer == f"/x/{name}a"
        assert "member name longer" in error.reason

    def test_member_name_bytes_count_after_unescaping(self) -> None:
        escaped = b"\\u00e9" * 512  # 3,072 bytes of token, 1,024 bytes of name
        assert loads(b'{"%s":1}' % escaped) == {"é" * 512: 1}

    @pytest.mark.parametrize(
        "token",
        [
            b"0." + b"0" * 125 + b"1",
            b"-0." + b"0" * 124 + b"1",
            b"1e" + b"0" * 125 + b"5",
            b"1." + b"0" * 119 + b"E+00005",
        ],
    )
    def test_number_token_bytes(self, token: bytes) -> None:
        assert len(token) == json1.MAX_NUMBER_TOKEN
        assert isinstance(loads(b"[%s]" % token), list)
        longer = token[:-1] + b"0" + token[-1:]
        error = rejected(b'{"n":[1, %s]}' % longer)
        assert (error.reason, error.pointer) == ("number token longer than 128 bytes", "/n/1")

    def test_long_integer_token(self) -> None:
        error = rejected(b"[%s]" % (b"1" * 129))
        assert (error.reason, error.pointer) == ("number token longer than 128 bytes", "/0")

    def test_long_digit_runs_inside_strings_are_fine(self) -> None:
        assert loads(b'{"s": "%s"}' % (b"0" * 300)) == {"s": "0" * 300}

    def test_value_nodes(self) -> None:
        # root + 4 arrays of 65,534 + n nulls in the root: 262,141 + n nodes
        def document(extra: int) -> bytes:
            inner = b"[" + b",".join([b"null"] * 65_534) + b"]"
            return b"[" + b",".join([inner] * 4 + [b"null"] * extra) + b"]"

        assert len(loads(document(3))) == 7  # type: ignore[arg-type]
        error = rejected(document(4))
        assert (error.reason, error.pointer) == ("more than 262144 values", "/7")

    @pytest.mark.parametrize("unit", ["a", "é"])
    def test_string_bytes(self, unit: str) -> None:
        text = unit * (json1.MAX_STRING_BYTES // len(unit.encode()))
        assert loads(b'"%s"' % text.encode()) == text
        error = rejected(b'["%s"]' % (text + "a").encode())
        assert (error.reason, error.pointer) == ("string longer than 8388608 UTF-8 bytes", "/0")


# --- documents outside JSON/1 --------------------------------------------------------


@pytest.mark.usefixtures("mode")
class TestRejections:
    def test_byte_order_mark(self) -> None:
        assert rejected(b"\xef\xbb\xbf{}").offset == 0

    @pytest.mark.parametrize(
        ("document", "offset"),
        [
            (b'{"a":\xff}', 5),
            (b'"\xc0\x80"', 1),  # overlong
            (b'"\xe2\x82"', 1),  # truncated
            (b'"\xf4\x90\x80\x80"', 1),  # beyond U+10FFFF
            (b'{"\xfe":1}', 2),
        ],
    )
    def test_invalid_utf8(self, document: bytes, offset: int) -> None:
        assert rejected(document).offset == offset

    def test_raw_lone_surrogate_is_invalid_utf8(self) -> None:
        error = rejected(b'["\xed\xa0\x80"]')
        assert (error.reason, error.offset) == ("invalid UTF-8", 2)

    @pytest.mark.parametrize(
        "document",
        [b'"\\ud800"', b'["\\uDC00"]', b'"\\ud800\\u0041"', b'"\\udc00\\ud800"', b'{"\\ud83d":1}'],
    )
    def test_escaped_lone_surrogates(self, document: bytes) -> None:
        assert rejected(document).reason == "lone surrogate escape"

    @pytest.mark.parametrize(
        ("document", "value"),
        [
            (b'"\\ud83d\\ude00"', "😀"),
            (b'"\\uD83D\\uDE00"', "😀"),
            (b'{"\\ud83d\\ude00":"\\\\ud800"}', {"😀": "\\ud800"}),
            (b'"\\\\\\ud83d\\ude00"', "\\😀"),
        ],
    )
    def test_valid_surrogate_pairs(self, document: bytes, value: object) -> None:
        assert loads(document) == value

    @pytest.mark.parametrize(
        ("document", "pointer"),
        [
            (b'{"a":1,"a":1}', ""),
            (b'{"a":{"b":[0,{"c":1,"d":2,"c":3}]}}', "/a/b/1"),
            (b'[{"k:":1, "k:":2}]', "/0"),
            (b'{"k\\u003a":1,"k:":2}', ""),
            (b'{"x": {"\\u00e9": 1, "\xc3\xa9": 2}}', "/x"),
        ],
    )
    def test_duplicate_members(self, document: bytes, pointer: str) -> None:
        error = rejected(document)
        assert error.reason.startswith("duplicate member name")
        assert error.pointer == pointer

    @pytest.mark.parametrize(
        "document", [b"NaN", b"[Infinity]", b'{"a":-Infinity}', b"1e400", b"-1e400", b"[1E309]"]
    )
    def test_non_finite_numbers(self, document: bytes) -> None:
        rejected(document)

    @pytest.mark.parametrize(
        ("document", "offset"), [(b"{} {}", 3), (b"1 2", 2), (b"[]x", 2), (b'"a""b"', 3)]
    )
    def test_two_values(self, document: bytes, offset: int) -> None:
        error = rejected(document)
        assert (error.reason, error.offset) == ("not RFC 8259 JSON: data after the value", offset)

    @pytest.mark.parametrize("document", [b"", b" ", b" \n\t\r"])
    def test_empty_document(self, document: bytes) -> None:
        assert rejected(document).reason == "empty document"

    @pytest.mark.parametrize(
        "document",
        [b"[1,]", b"{'a':1}", b"01", b"1.", b".5", b"+1", b'"\x01"', b"\x0c1", b"[1 2]", b'{"a"}'],
    )
    def test_not_rfc_8259(self, document: bytes) -> None:
        assert rejected(document).offset is not None

    def test_whitespace_and_negative_zero(self) -> None:
        assert loads(b' \t\r\n{"a" : [ 1 , 2.5 ] }\r\n') == {"a": [1, 2.5]}
        value = loads(b"[-0, -0.0, -0e5, -1e-400, 0.0]")
        assert value == [0, 0, 0, 0, 0.0]
        assert [type(item) for item in value] == [int, int, int, int, float]

    def test_bytes_like_input(self) -> None:
        assert loads(bytearray(b"[1]")) == [1]
        assert loads(memoryview(b"[[1]]")[1:4]) == [1]
        with pytest.raises(TypeError):
            loads("[1]")  # type: ignore[arg-type]

    def test_message_names_reason_and_place(self) -> None:
        assert str(rejected(b'{"a":[1,{"b":1,"b":2}]}')) == (
            "not FLOW JSON/1: duplicate member name 'b' (at /a/1)"
        )
        assert str(rejected(b"[1,]")).endswith("(at byte 3)")
        assert str(rejected(b"9007199254740992")).endswith("(at the root)")


def test_pointer_segments_are_escaped() -> None:
    error = rejected(b'{"a/b":{"~":[1e16]}}')
    assert error.pointer == "/a~1b/~0/0"


def test_error_survives_pickling() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(rejected(b"[1,]")))
    assert (error.reason, error.offset, error.pointer) == (
        "not RFC 8259 JSON: Expecting value",
        3,
        None,
    )


# --- encoding ------------------------------------------------------------------------


def lone_surrogate_nested() -> object:
    return {"a": ["ok", "\ud800"]}


def cycle() -> object:
    loop: list[object] = []
    loop.append(loop)
    return loop


class Small(IntEnum):
    ONE = 1


class Text(str):
    pass


@pytest.mark.usefixtures("mode")
class TestEncoding:
    def test_compact_utf8_without_ascii_escapes(self) -> None:
        value = {"a": [1, 2.5, "é😀\u2028\x7f"], "b": None, "c": True, "\x01": "\n\t"}
        assert (
            dumps(value)
            == '{"a":[1,2.5,"é😀\u2028\x7f"],"b":null,"c":true,"\\u0001":"\\n\\t"}'.encode()
        )

    def test_negative_zero_encodes_as_zero(self) -> None:
        assert dumps(-0.0) == b"0"
        assert dumps({"z": [-0.0, 0.0, 0]}) == b'{"z":[0,0.0,0]}'

    @pytest.mark.parametrize("value", [1.0, 0.1, 1e-7, 5e-324, 2.0**53 - 1, -123.456e-20])
    def test_floats_round_trip(self, value: float) -> None:
        assert loads(dumps(value)) == value

    @pytest.mark.parametrize(
        ("value", "pointer", "reason"),
        [
            (math.nan, "", "nan is not a finite number"),
            ([math.inf], "/0", "inf is not a finite number"),
            ({"x": -math.inf}, "/x", "-inf is not a finite number"),
            (2**53, "", "beyond"),
            ([-(2**53)], "/0", "beyond"),
            (1e16, "", "beyond"),
            (2.0**53, "", "beyond"),
            (lone_surrogate_nested(), "/a/1", "lone surrogate in string"),
            ({"ok": {"\udfff": 1}}, "/ok/\udfff", "lone surrogate in member name"),
            ({1: 2}, "/1", "member name of type int"),
            ({"a": {None: 2}}, "/a/None", "member name of type NoneType"),
            ({(1, 2): 3}, "/(1, 2)", "member name of type tuple"),
            ({"a": (1,)}, "/a", "tuple is not a JSON/1 type"),
            ([{1, 2}], "/0", "set is not a JSON/1 type"),
            ([b"x"], "/0", "bytes is not a JSON/1 type"),
            ([object()], "/0", "object is not a JSON/1 type"),
            ([Small.ONE], "/0", "Small is not a JSON/1 type"),
            (Text("x"), "", "Text is not a JSON/1 type"),
            (OrderedDict(a=1), "", "OrderedDict is not a JSON/1 type"),
            ({"k": {Text("x"): 1}}, "/k/x", "member name of type Text"),
            (cycle(), "/0" * 128, "nesting deeper than 128"),
        ],
    )
    def test_refusals(self, value: object, pointer: str, reason: str) -> None:
        error = refused(value)
        assert (error.pointer, reason in error.reason) == (pointer, True)

    def test_bounds(self) -> None:
        deep: object = None
        for _ in range(128):
            deep = [deep]
        assert refused(deep).pointer == "/0" * 128  # the None is at level 129
        assert dumps(deep[0]).count(b"[") == 127  # type: ignore[index]
        assert refused([None] * 65_537).reason == "array with more than 65536 items"
        assert refused({str(i): None for i in range(65_537)}).pointer == ""
        assert refused({"a" * 1_025: 1}).pointer == "/" + "a" * 1_025
        assert refused(["é" * 4_194_304 + "a"]).pointer == "/0"
        assert refused([[None] * 65_535] * 4).reason == "more than 262144 values"
        dumps({"a" * 1_024: "é" * 4_194_304})


# --- RFC 8785 ------------------------------------------------------------------------

# RFC 8785 Appendix B: IEEE 754 bit patterns and their ECMAScript/JCS text (checked
# against Node's Number.prototype.toString).
NUMBER_VECTORS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), NUMBER_VECTORS)
def test_rfc8785_number_vectors(bits: str, text: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert json1._es_number(value) == text
    if abs(value) <= SAFE:
        assert canonical(value) == text.encode()
    else:
        with pytest.raises(JSON1Error):  # outside JSON/1: never repaired
            canonical(value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (-0.0, "0"),
        (1.0, "1"),
        (4.50, "4.5"),
        (2e-3, "0.002"),
    ],
)
def test_canonical_numbers(value: float, text: str) -> None:
    assert canonical(value) == text.encode()


def test_rfc8785_example(mode: str) -> None:
    # RFC 8785 §3.2.2 without 1E30, which JSON/1 refuses (integral beyond 2^53).
    document = (
        b'{"numbers": [333333333.33333329, 4.50, 2e-3, 0.000000000000000000000000001],'
        b' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        b' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical(loads(document)) == expected.encode()


def test_rfc8785_sorting_by_utf16_code_units() -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    # U+1F600 is written as the units D83D DE00, so it sorts before U+FB33.
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign",'
        '"😀":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )
    assert canonical(value) == expected.encode()


def test_canonical_validates_and_never_repairs() -> None:
    for bad in ([1e21], {"a": math.nan}, {"k": "\ud800"}, (1,), {1: 1}):
        with pytest.raises(JSON1Error):
            canonical(bad)
    assert (
        canonical({"b": [1, {"d": None, "c": -0.0}], "a": "x"})
        == b'{"a":"x","b":[1,{"c":0,"d":null}]}'
    )


# --- properties ----------------------------------------------------------------------

keys = st.text(max_size=6)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(-SAFE, SAFE, allow_nan=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=24,
)
WRITERS: list[Callable[[Any], bytes]] = [
    orjson.dumps,
    lambda v: json.dumps(v).encode(),  # ASCII escapes, ", " and ": "
    lambda v: json.dumps(v, ensure_ascii=False, indent=1).encode(),
    lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode(),
]
SNIPPETS = [
    *(bytes([c]) for c in b'{}[]":,\\-+.0123456789eE \nntfu'),
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\u003a",
    b"\xed\xa0\x80",
    b"\xff",
    b"\xc3",
    b"\xef\xbb\xbf",
    b"NaN",
    b"1e400",
    b"9007199254740992",
    b'"a":1,',
    b"0" * 130,
    b"[" * 130,
]
FAST_ENOUGH = settings(deadline=timedelta(seconds=2), suppress_health_check=[HealthCheck.too_slow])


def outcome(decode: Decoder, document: bytes) -> tuple[str, str]:
    try:
        return "value", repr(decode(document))
    except JSON1Error as error:
        return "error", str(error)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    document = bytearray(draw(st.sampled_from(WRITERS))(draw(values)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(document)))
        action = draw(st.sampled_from(["replace", "insert", "delete", "copy", "truncate"]))
        snippet = draw(st.sampled_from(SNIPPETS) | st.binary(min_size=1, max_size=2))
        if action == "replace":
            document[at : at + len(snippet)] = snippet
        elif action == "insert":
            document[at:at] = snippet
        elif action == "delete":
            del document[at : at + draw(st.integers(1, 4))]
        elif action == "copy":  # repeat a stretch elsewhere: duplicate members, two values
            start = draw(st.integers(0, len(document)))
            document[at:at] = document[start : start + draw(st.integers(1, 12))]
        else:
            del document[at:]
    return bytes(document)


@FAST_ENOUGH
@given(values)
def test_round_trip(value: json1.JSONValue) -> None:
    for encode in (dumps, lambda v: json.dumps(v, ensure_ascii=False).encode(), canonical):
        document = encode(value)
        assert canonical(json1._loads_fast(document)) == canonical(value)
        assert canonical(json1._loads_pure(document)) == canonical(value)
    assert canonical(loads(dumps(value))) == canonical(value)


@FAST_ENOUGH
@given(values, st.sampled_from(WRITERS))
def test_paths_agree_on_valid_documents(
    value: json1.JSONValue, write: Callable[[Any], bytes]
) -> None:
    document = write(value)
    assert outcome(json1._loads_fast, document) == outcome(json1._loads_pure, document)
    assert canonical(loads(document)) == canonical(value)


@settings(FAST_ENOUGH, max_examples=400)
@given(mutated())
def test_paths_agree_on_mutated_documents(document: bytes) -> None:
    # Anything but JSON1Error escapes `outcome` and fails the test.
    assert outcome(json1._loads_fast, document) == outcome(json1._loads_pure, document)


@st.composite
def with_duplicate(draw: st.DrawFn) -> tuple[bytes, str]:
    """A document with one repeated member name somewhere, and that object's pointer."""
    obj = draw(st.dictionaries(keys, values, min_size=1, max_size=4))
    name = draw(st.sampled_from(sorted(obj)))
    write = draw(st.sampled_from(WRITERS))
    body = write(obj)
    repeated = body[:1] + write({name: draw(values)})[1:-1] + b"," + body[1:]
    path = draw(st.lists(st.sampled_from(["k", "k:", "\u003a", 0]), max_size=3))
    for step in reversed(path):
        repeated = (
            b"[%s]" % repeated if step == 0 else write({step: None}).replace(b"null", repeated)
        )
    pointer = json1.json_pointer(path)
    return repeated, pointer


@FAST_ENOUGH
@given(with_duplicate())
def test_duplicates_found_at_any_depth(case: tuple[bytes, str]) -> None:
    document, pointer = case
    for decode in (json1._loads_fast, json1._loads_pure):
        with pytest.raises(JSON1Error) as caught:
            decode(document)
        assert caught.value.reason.startswith("duplicate member name")
        assert caught.value.pointer == pointer


# Lone surrogates are left out: the survey leaves them to the encoders, which stop there.
odd_scalars = st.sampled_from([2**53, -(2**53), 1e16, math.inf, math.nan, (1,), b"x", {1: 2}])
odd_values = st.recursive(
    scalars | odd_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=12,
)


@FAST_ENOUGH
@given(odd_values)
def test_survey_and_violation_agree(value: object) -> None:
    assert (json1._survey(value, foreign=True) is None) == (json1._violation(value) is not None)


# Over 32 values the survey goes level by level instead of in one plain walk.
large_odd_values = st.recursive(
    scalars | odd_scalars,
    lambda inner: (
        st.lists(inner, min_size=2, max_size=12)
        | st.dictionaries(keys, inner, min_size=2, max_size=12)
    ),
    max_leaves=120,
)


@FAST_ENOUGH
@given(large_odd_values)
def test_survey_and_violation_agree_on_large_trees(value: object) -> None:
    assert (json1._survey(value, foreign=True) is None) == (json1._violation(value) is not None)


def test_imports_with_the_standard_library_alone() -> None:
    script = (
        "import sys; sys.modules['orjson'] = None\n"
        "before = set(sys.modules)\n"
        "import runner.json1 as j\n"
        "assert j.orjson is None and j.loads(b'[1, -0.0]') == [1, 0]\n"
        "assert j.dumps({'a': -0.0}) == b'{\"a\":0}'\n"
        "new = {m.partition('.')[0] for m in set(sys.modules) - before}\n"
        "assert new - set(sys.stdlib_module_names) == {'runner'}, new\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def iter_fixture_cases() -> Iterator[tuple[str, bytes, bool]]:
    """The conformance corpus's framing vectors (fixtures/framing.json), payload only."""
    yield "empty-object-frame", b"{}", True
    yield "unicode-scalar", b'{"value":"\xf0\x9f\x90\xa3"}', True
    yield "empty-frame", b"", False
    yield "utf8-bom", b"\xef\xbb\xbf{}", False
    yield "invalid-utf8", b'{"a":\xff}', False
    yield "duplicate-member", b'{"a":1,"a":2}', False
    yield "escaped-lone-surrogate", b'{"a":"\\ud800"}', False
    yield "unsafe-integral-token", b'{"a":9007199254740993}', False
    yield "two-values-one-frame", b"{} {}", False


@pytest.mark.parametrize(("name", "document", "valid"), list(iter_fixture_cases()))
def test_conformance_framing_vectors(mode: str, name: str, document: bytes, valid: bool) -> None:
    if valid:
        loads(document)
    else:
        rejected(document)


# --- orjson's encoder is never used ------------------------------------------------


def crash_tree(levels: int, after: int, item: object = 0) -> list[Any]:
    """A shape on which orjson 3.13.0's encoder corrupts its heap: 127 levels with 16
    zeros after each nested array, or just 12 levels with 100 floats (see json1's notes)."""
    tree: Any = 0
    for _ in range(levels):
        tree = [tree, *[item] * after]
    return tree


CRASH_TREES = [(127, 16, 0), (12, 100, 123456789.125), (35, 100, None), (64, 17, 1.5)]


def test_trees_that_crash_orjson_are_encoded_and_decoded_cleanly() -> None:
    script = (
        "import json\n"
        "from runner import json1\n"
        "from test_json1 import CRASH_TREES, crash_tree\n"
        "for levels, after, item in CRASH_TREES:\n"
        "    tree = crash_tree(levels, after, item)\n"
        "    compact = json.dumps(tree, separators=(',', ':')).encode()\n"
        "    assert json1.dumps(tree) == compact and json1.loads(compact) == tree\n"
        "    if item is not None and not isinstance(item, float):\n"
        "        assert json1.canonical(tree) == compact\n"
        "    obj = {'z': tree[0], 'a': 1}  # canonical sorts the names\n"
        '    assert json1.canonical(obj).startswith(b\'{"a":1,"z":[\')\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).parent,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


def test_orjson_dumps_is_never_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not at any depth, for no encoder or check: no depth bound was found below which
    orjson 3.13.0's dumps is safe (it crashed from 12 levels on)."""

    def refuse(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("orjson.dumps was called")

    monkeypatch.setattr(orjson, "dumps", refuse)
    for value in ({"a": [1, 2.5, "x:y"], "b": None}, [{"é": "\u2028"}] * 40, crash_tree(3, 40)):
        document = dumps(value)
        assert loads(document) == value and loads(document.replace(b",", b", ")) == value
        assert canonical(value) == canonical(loads(document))


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        # One more colon than members, hidden by an escaped colon in the kept name.
        (b'{"k\\u003a":1,"k\\u003a":2}', "duplicate member name 'k:'"),
        (b'{"k\\u003A":"a:","k\\u003A":"b"}', "duplicate member name 'k:'"),
        # The dropped member's colons are in strings too.
        (b'{"x":"a:b","x":"c"}', "duplicate member name 'x'"),
        (b'{"x:":1,"x:":2}', "duplicate member name 'x:'"),
        (b'{"c":"port:events","p":{"c":"port:events","c":1}}', "duplicate member name 'c'"),
        # Long tokens come with floats; a colon elsewhere does not let them through.
        (b'{"c":"a:b","n":1.' + b"0" * 200 + b"}", "number token longer than 128 bytes"),
        (b"[1e0" + b"0" * 200 + b"1]", "number token longer than 128 bytes"),
    ],
)
def test_the_fast_paths_colon_count_is_not_fooled(document: bytes, reason: str) -> None:
    # The fast path settles documents by counting colons; these must reach the pure one.
    with pytest.raises(JSON1Error) as caught:
        json1._loads_fast(document)
    assert caught.value.reason == reason


def test_a_large_text_item_is_settled_without_re_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    # A channel item of 1 MiB of text: one count of the colons, no compact encoding.
    def no_encoding(value: object) -> str:
        raise AssertionError("re-encoded")

    frame = b'{"method":"channel/send","params":{"channel":"port:a","item":"%s"}}' % (
        b"x" * 1_048_576
    )
    monkeypatch.setattr(json1, "_COMPACT", no_encoding)
    value = json1._loads_fast(frame)
    assert isinstance(value, dict) and len(value["params"]["item"]) == 1_048_576


@pytest.mark.parametrize(
    "text",
    [
        "x" * json1._LONG_TEXT,
        "é" * json1._LONG_TEXT,
        "\U0001f600\u2028\x7f" * json1._LONG_TEXT,
        *("x" * json1._LONG_TEXT + char for char in json1._ESCAPED),
    ],
)
def test_long_text_is_encoded_as_the_stdlib_writes_it(text: str) -> None:
    # Long strings skip the stdlib's escaper when nothing in them needs escaping; every
    # character it rewrites must still send them through it.
    tree = {"item": [text, {"n": 1}], "name": text[-3:]}
    expected = json.dumps(tree, ensure_ascii=False, separators=(",", ":")).encode()
    assert dumps(tree) == expected
    assert dumps(text) == json.dumps(text, ensure_ascii=False).encode()


def test_a_lone_surrogate_in_long_text_is_refused() -> None:
    with pytest.raises(JSON1Error) as caught:
        dumps({"a": "x" * json1._LONG_TEXT + "\ud800"})
    assert (caught.value.reason, caught.value.pointer) == ("lone surrogate in string", "/a")
