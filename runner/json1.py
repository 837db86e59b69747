"""FLOW JSON/1, strict: decode, encode, canonical bytes (RFC 8785) and equality.

Every Run/1 frame, input, result and channel value must be a FLOW JSON/1 document
(PROTOCOL.md §2). ``json`` and ``orjson`` each accept documents outside it (duplicate
names, ``NaN``, ``1e16``, unbounded depth), so this module is the one gate every seam
uses: it never repairs a value, it raises :class:`JSON1Error` naming the rule and a byte
offset or a JSON pointer.

Two decoders give the same verdict and value for every input: the *pure* one (standard
library only: component images carry it) and, when ``orjson`` is importable, a *fast* one
that hands every rejection and every doubt to the pure one, so every error message comes
from one place. Encoding never uses orjson: 3.13.0's ``dumps`` corrupts its heap on valid
nested arrays from 12 levels deep, and the trees encoded here are chosen by components.

A negative zero decodes and encodes as the integer ``0``.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any, Final, NamedTuple, TypeAlias

try:
    import orjson
except ImportError:  # component images carry this module without orjson
    orjson = None  # type: ignore[assignment]

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None

MAX_DOCUMENT_BYTES: Final = 16_777_216
MAX_DEPTH: Final = 128
MAX_NODES: Final = 262_144
MAX_MEMBERS: Final = 65_536
MAX_ITEMS: Final = 65_536
MAX_STRING_BYTES: Final = 8_388_608
MAX_NAME_BYTES: Final = 1_024
MAX_NUMBER_TOKEN: Final = 128
MAX_SAFE_INTEGER: Final = 9_007_199_254_740_991

_BOM: Final = b"\xef\xbb\xbf"
# A str of at most this many code points cannot exceed the byte bound (4 bytes a point).
_STRING_CHARS: Final = MAX_STRING_BYTES // 4
_NAME_CHARS: Final = MAX_NAME_BYTES // 4
# Number-token bytes become b"0", everything else b" ": a long run is a long token.
_NUMBER_BYTES: Final = bytes(48 if c in b"+-.0123456789Ee" else 32 for c in range(256))
_LONG_NUMBER: Final = b"0" * (MAX_NUMBER_TOKEN + 1)
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")
# Left to right over a valid document: an escaped backslash, a valid pair, or a lone half.
_ESCAPES: Final = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)
_BRACKETS: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|([\[{])|[\]}]')
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# UTF-8 lead bytes of U+E000 and above: the only code points whose order by code point
# (the stdlib's key sort) differs from their order by UTF-16 code units (RFC 8785's).
_UTF16_ORDER_DIFFERS: Final = re.compile(rb"[\xee-\xf4]")
# A tree of at most this many values breaks no depth or count bound, so one plain walk
# checks it; past a few dozen values the level-by-level survey is faster.
_SMALL_TREE: Final = 32


def _text_encoder(
    *, sort_keys: bool, escape: Callable[[str], str] = json.encoder.encode_basestring
) -> Callable[[object], str]:
    """Compact text by the stdlib's C encoder, made once: ``JSONEncoder.encode`` makes it
    anew per call, which costs more than encoding a small frame. It keeps no cycle markers:
    every tree reaches it after a survey, which refuses cycles. ``escape`` writes a string.
    """
    encoder = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), check_circular=False, sort_keys=sort_keys
    )
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # an interpreter without the C accelerator
        return encoder.encode
    c_encode = make(
        None, encoder.default, escape, None, ":", ",", sort_keys, False, True,
    )  # fmt: skip
    return lambda value: "".join(c_encode(value, 0))


# The characters the stdlib's escaper rewrites (ensure_ascii=False), likeliest first.
_ESCAPED: Final = tuple(dict.fromkeys(("\n", '"', "\\", "\t", "\r", *map(chr, range(32)))))
# A string this long is checked for them before it is escaped (see _escape_long).
_LONG_TEXT: Final = 16_384


def _escape_long(text: str) -> str:
    """A string's JSON text as the stdlib's escaper writes it; long text with nothing to
    escape (one memchr per escaped character shows it) skips its per-character loop."""
    if len(text) >= _LONG_TEXT and not any(char in text for char in _ESCAPED):
        return '"' + text + '"'
    return json.encoder.encode_basestring(text)


# Compact UTF-8 text.
_COMPACT: Final = _text_encoder(sort_keys=False)
# The same, for a tree with a string of _LONG_TEXT characters or more (a Python call per
# string costs a small tree more than the escaper saves).
_COMPACT_LONG: Final = _text_encoder(sort_keys=False, escape=_escape_long)
# The same with names sorted by code point: RFC 8785's text for a tree without floats.
_SORTED: Final = _text_encoder(sort_keys=True)
# Decoding a document this large runs with the cyclic collector paused (see loads).
_PAUSE_COLLECTOR_BYTES: Final = 1 << 20
_LITERALS: Final = {None: "null", True: "true", False: "false"}


class JSON1Error(ValueError):
    """A document or value outside FLOW JSON/1: ``reason`` names the broken rule; at most
    one of ``offset`` (the byte offset of a syntax, encoding or size problem) and
    ``pointer`` (the RFC 6901 pointer of the offending value) is set.
    """

    def __init__(self, reason: str, offset: int | None = None, pointer: str | None = None):
        super().__init__(reason, offset, pointer)
        self.reason = reason
        self.offset = offset
        self.pointer = pointer

    def __str__(self) -> str:
        if self.offset is not None:
            where = f" (at byte {self.offset})"
        elif self.pointer is not None:
            # A pointer may hold a lone surrogate; keep the message printable as UTF-8.
            pointer = self.pointer.encode(errors="backslashreplace").decode()
            where = f" (at {pointer or 'the root'})"
        else:
            where = ""
        return f"not FLOW JSON/1: {self.reason}{where}"


def loads(data: bytes | bytearray | memoryview) -> JSONValue:
    """Decode one JSON/1 document; raise :class:`JSON1Error` for anything else. Integers
    decode as ``int``, other numbers as ``float``, every negative zero as the integer ``0``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"JSON/1 documents are bytes, not {type(data).__name__}")
    raw = data.tobytes() if isinstance(data, memoryview) else data
    decode = _loads_pure if orjson is None else _loads_fast
    if len(raw) < _PAUSE_COLLECTOR_BYTES:
        return decode(raw)
    with _collector_paused():
        return decode(raw)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic collector, if it runs, for one large decode: a decoded tree holds no
    cycle, yet every container made triggers passes over all made so far, each holding the
    interpreter lock (a hostile document would stall the host's loop, even from a thread).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def dumps(value: object) -> bytes:
    """Encode a JSON/1 value as compact UTF-8 (no ASCII escaping, ``-0.0`` as ``0``, not
    canonical: see :func:`canonical`); raise :class:`JSON1Error` for anything but ``None``,
    ``bool``, ``int``, ``float``, ``str``, ``list`` and ``str``-keyed ``dict`` (no subclasses)."""
    survey = _survey(value, foreign=True)
    if survey is None:
        raise _violation(value) or JSON1Error("value outside JSON/1")
    tree = _without_negative_zero(value) if survey.negative_zero else value
    try:
        return (_COMPACT_LONG if survey.long_text else _COMPACT)(tree).encode()
    except UnicodeEncodeError:
        raise _violation(tree) or JSON1Error("lone surrogate") from None


def canonical(value: object) -> bytes:
    """The RFC 8785 (JCS) bytes of a JSON/1 value (members sorted by UTF-16 code units,
    numbers by ECMAScript's ``Number::toString``); raise :class:`JSON1Error` if it is none."""
    survey = _survey(value, foreign=True)
    if survey is None:
        raise _violation(value) or JSON1Error("value outside JSON/1")
    if not survey.floats:
        # Without floats (so without -0.0) the stdlib's sorted encoding is the RFC 8785 text
        # (same escapes, same integers), unless a name may sort differently by UTF-16 units.
        try:
            encoded = _SORTED(value).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: the writer below finds and names it
        else:
            if _UTF16_ORDER_DIFFERS.search(encoded) is None:
                return encoded
    tree = _without_negative_zero(value) if survey.negative_zero else value
    parts: list[str] = []
    _write_canonical(tree, parts)
    try:
        return "".join(parts).encode()
    except UnicodeEncodeError:
        raise _violation(tree) or JSON1Error("lone surrogate") from None


# --- decoding: fast path -------------------------------------------------------------


def _loads_fast(raw: bytes | bytearray) -> JSONValue:
    """orjson plus the survey; any doubt or rejection goes to the pure path."""
    if len(raw) > MAX_DOCUMENT_BYTES:
        return _loads_pure(raw)
    try:
        value: JSONValue = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _loads_pure(raw)
    survey = _survey(value, foreign=False)
    if survey is None or not _tokens_kept(raw, value, survey):
        del value  # a refused tree is not kept alive while the pure path builds its own
        return _loads_pure(raw)
    return _without_negative_zero(value) if survey.negative_zero else value


def _tokens_kept(raw: bytes | bytearray, value: Any, survey: _Survey) -> bool:
    """True when the document has no duplicate member name and no number token over 128
    bytes, the two things orjson does not report.

    Every member has its ``:`` and other ``:`` bytes are inside strings, so no more colons
    than kept members (or, for a small tree and no ``\\u003a`` escape, exactly the members
    plus the colons of its strings) means no member was dropped. orjson decodes an
    integer token over 17 bytes as a ``float``, so a tree without floats had no long token.
    Otherwise a document equal to the value's compact encoding holds neither; failing
    that, long tokens are runs after one ``bytes.translate``, and the encoding's colons
    are compared with the document's (a ``\\u003a`` escape leaves it to the pure path).
    """
    colons = raw.count(b":")
    if not survey.floats and (
        colons == survey.members
        or (
            survey.texts is not None
            and b"\\u003" not in raw
            and colons == survey.members + "".join(survey.texts).count(":")
        )
    ):
        return True
    encoded = _COMPACT(value).encode()
    if encoded == raw:
        return True
    if survey.floats and raw.translate(_NUMBER_BYTES).find(_LONG_NUMBER) >= 0:
        return False
    return colons == survey.members or (b"\\u003" not in raw and encoded.count(b":") == colons)


# --- decoding: pure path -------------------------------------------------------------


class _Invalid:
    """Stands in the tree for a member or number the JSON hooks refused."""

    def __init__(self, reason: str):
        self.reason = reason


def _loads_pure(raw: bytes | bytearray) -> JSONValue:
    """The reference decoder; every decoding error is raised here."""
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise JSON1Error(f"document longer than {MAX_DOCUMENT_BYTES} bytes", MAX_DOCUMENT_BYTES)
    if raw.startswith(_BOM):
        raise JSON1Error("byte order mark", 0)
    try:
        text = raw.decode()
    except UnicodeDecodeError as error:
        raise JSON1Error("invalid UTF-8", error.start) from None
    value: JSONValue = _parse(raw, text)
    _reject_lone_surrogates(raw)
    if _survey(value, foreign=False) is None:
        raise _violation(value) or JSON1Error("value outside JSON/1")
    return value


def _parse(raw: bytes | bytearray, text: str) -> Any:
    """RFC 8259 syntax via the stdlib C scanner, with byte offsets in errors."""
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as error:
        offset = len(text[: error.pos].encode())
        if not text.strip(" \t\n\r"):
            raise JSON1Error("empty document", offset) from None
        reason = "data after the value" if error.msg == "Extra data" else error.msg
        raise JSON1Error(f"not RFC 8259 JSON: {reason}", offset) from None
    except RecursionError:
        too_deep = _too_deep_at(raw)
        if too_deep is None:
            raise  # the caller's stack, not the document, is too deep
        raise JSON1Error(f"nesting deeper than {MAX_DEPTH}", too_deep) from None


def _too_deep_at(raw: bytes | bytearray) -> int | None:
    """Byte offset of the first bracket that opens nesting level 129, if any."""
    depth = 0
    for match in _BRACKETS.finditer(raw):
        if match.group(1):
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif match.group() in (b"]", b"}"):
            depth -= 1
    return None


def _reject_lone_surrogates(raw: bytes | bytearray) -> None:
    """Raw surrogates are invalid UTF-8; escaped ones are found here, in a valid document."""
    if _SURROGATE_ESCAPE.search(raw) is None:
        return
    for match in _ESCAPES.finditer(raw):
        if match.group(1):
            raise JSON1Error("lone surrogate escape", match.start())


def _object(pairs: list[tuple[str, Any]]) -> Any:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    counts = Counter(name for name, _ in pairs)
    name = next(name for name, count in counts.items() if count > 1)
    return _Invalid(f"duplicate member name {name!r}")


def _int(token: str) -> Any:
    if (
        len(token) <= MAX_NUMBER_TOKEN
        and -MAX_SAFE_INTEGER <= (value := int(token)) <= MAX_SAFE_INTEGER
    ):
        return value
    return _bad_number(token, "integer")


def _float(token: str) -> Any:
    if (
        len(token) <= MAX_NUMBER_TOKEN
        and -MAX_SAFE_INTEGER <= (value := float(token)) <= MAX_SAFE_INTEGER
    ):
        return 0 if _is_negative_zero(value) else value
    return _bad_number(token, "integral value")


def _bad_number(token: str, kind: str) -> Any:
    """Why a number token the hooks refused is outside JSON/1 (its length is checked before
    any conversion: converting a huge digit string is quadratic)."""
    if len(token) > MAX_NUMBER_TOKEN:
        return _Invalid(f"number token longer than {MAX_NUMBER_TOKEN} bytes")
    if math.isinf(float(token)):
        return _Invalid(f"number {token} overflows binary64")
    return _Invalid(f"{kind} {token} beyond ±{MAX_SAFE_INTEGER}")


def _constant(name: str) -> Any:
    return _Invalid(f"{name} is not a JSON/1 value")


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_object, parse_float=_float, parse_int=_int, parse_constant=_constant
)


# --- the bounds: a fast survey and a precise explanation -----------------------------


class _Survey(NamedTuple):
    members: int  # members in all objects
    negative_zero: bool  # any -0.0 in the tree
    floats: bool  # any float in the tree
    long_text: bool  # a string of _LONG_TEXT characters or more
    texts: list[str] | None = None  # a small tree's strings and names (see _tokens_kept)


class _TooLarge(Exception):
    """A tree with more values than :func:`_walk` takes on."""


def _survey(root: object, *, foreign: bool) -> _Survey | None:
    """Check every JSON/1 rule on a tree; None when one is broken (:func:`_violation`
    says which). Small trees take :func:`_walk`; larger ones go level by level through
    C-level ``map``/``chain``. ``foreign`` trees (to be encoded) also get their member
    names' types checked; decoded trees have ``str`` names by construction.
    """
    try:
        return _walk(root)
    except _TooLarge:
        pass
    low, high, string_chars = -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, _STRING_CHARS
    nodes = depth = 0
    negative_zero = floats = long_text = False
    dicts: list[dict[Any, Any]] = []
    lists: list[list[Any]] = [[root]]  # a wrapper at depth 0 holds the root
    all_dicts: list[dict[Any, Any]] = []
    all_lists: list[list[Any]] = []
    while dicts or lists:  # the containers at `depth`
        if depth == MAX_DEPTH and (any(dicts) or any(lists)):
            return None
        depth += 1
        nodes += sum(map(len, chain(dicts, lists)))
        if nodes > MAX_NODES:
            return None
        values = chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(lists))
        all_dicts += dicts
        all_lists += lists
        dicts, lists = [], []
        for value in values:
            kind = type(value)
            if kind is str:
                if len(value) >= _LONG_TEXT:
                    long_text = True
                    if len(value) > string_chars and _utf8_len(value) > MAX_STRING_BYTES:
                        return None
            elif kind is float:
                floats = True
                if not (value and low <= value <= high):
                    if value != 0:  # out of range, infinite or NaN
                        return None
                    negative_zero = negative_zero or _is_negative_zero(value)
            elif kind is int:
                if not low <= value <= high:
                    return None
            elif kind is dict:
                dicts.append(value)
            elif kind is list:
                lists.append(value)
            elif value is not None and kind is not bool:
                return None
    members = sum(map(len, all_dicts))
    if _containers_fit(all_dicts, all_lists, members, nodes - members, foreign):
        return _Survey(members, negative_zero, floats, long_text)
    return None


def _walk(root: object) -> _Survey | None:
    """The survey of a tree of at most :data:`_SMALL_TREE` values, which can be neither too
    deep nor too large; raises :class:`_TooLarge` for a larger one (a cycle included)."""
    low, high = -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER
    room = _SMALL_TREE - 1  # the root is one value
    members = 0
    negative_zero = floats = long_text = False
    pending: list[Any] = [root]
    texts: list[str] = []
    for value in pending:  # the list grows as containers are met: breadth first
        kind = type(value)
        if kind is str:
            texts.append(value)
            if len(value) >= _LONG_TEXT:
                long_text = True
                if len(value) > _STRING_CHARS and _utf8_len(value) > MAX_STRING_BYTES:
                    return None
        elif kind is dict:
            size = len(value)
            room -= size
            if room < 0:
                raise _TooLarge
            members += size
            for name in value:
                if type(name) is not str or (
                    len(name) > _NAME_CHARS and _utf8_len(name) > MAX_NAME_BYTES
                ):
                    return None
            texts += value
            pending += value.values()
        elif kind is list:
            room -= len(value)
            if room < 0:
                raise _TooLarge
            pending += value
        elif kind is int:
            if not low <= value <= high:
                return None
        elif kind is float:
            floats = True
            if not (value and low <= value <= high):
                if value != 0:  # out of range, infinite or NaN
                    return None
                negative_zero = negative_zero or _is_negative_zero(value)
        elif value is not None and kind is not bool:
            return None
    return _Survey(members, negative_zero, floats, long_text, texts)


def _containers_fit(
    dicts: list[dict[Any, Any]], lists: list[list[Any]], members: int, items: int, foreign: bool
) -> bool:
    """Members per object, items per array and member names, for a whole tree."""
    if members > MAX_MEMBERS and max(map(len, dicts)) > MAX_MEMBERS:
        return False
    if items > MAX_ITEMS and max(map(len, lists)) > MAX_ITEMS:
        return False
    if not members:
        return True
    if foreign and not {*map(type, chain.from_iterable(dicts))} <= {str}:
        return False
    names = set(chain.from_iterable(dicts))  # decoders share equal names: a small set
    return max(map(len, names)) <= _NAME_CHARS or all(
        _utf8_len(name) <= MAX_NAME_BYTES for name in names
    )


def _is_negative_zero(value: float) -> bool:
    return value == 0 and math.copysign(1.0, value) < 0


def _utf8_len(text: str) -> int:
    return len(text.encode(errors="surrogatepass"))


_Fault: TypeAlias = tuple[str, list[object]]  # reason, and the member name if it is at fault


def _violation(root: object) -> JSON1Error | None:
    """The first broken rule in document order, with its JSON pointer (None if none): one
    depth-first walk holding only the current path, linear and bounded on hostile input."""
    path: list[object] = []  # the keys from the root to `value`
    levels: list[Iterator[tuple[object, Any]]] = []  # the rest of each container on it
    value, nodes = root, 0
    while True:
        nodes += 1
        if nodes > MAX_NODES:
            fault: _Fault | None = (f"more than {MAX_NODES} values", [])
        elif len(path) >= MAX_DEPTH:  # the root's path is empty
            fault = (f"nesting deeper than {MAX_DEPTH}", [])
        else:
            fault = _fault(value)
        if fault is not None:
            reason, member = fault
            return JSON1Error(reason, pointer=json_pointer(path + member))
        if type(value) is dict:
            levels.append(iter(value.items()))
            path.append(None)
        elif type(value) is list:
            levels.append(enumerate(value))
            path.append(None)
        while levels:  # on to the next value in document order
            item = next(levels[-1], None)
            if item is not None:
                path[-1], value = item
                break
            levels.pop()
            path.pop()
        else:
            return None


def _fault(value: object) -> _Fault | None:
    """What is wrong with one value itself, if anything."""
    if type(value) is dict:
        return _object_fault(value)
    if type(value) is list:
        return (f"array with more than {MAX_ITEMS} items", []) if len(value) > MAX_ITEMS else None
    if type(value) is str:
        reason = _string_fault(value, MAX_STRING_BYTES, "string")
        return None if reason is None else (reason, [])
    if type(value) is int or type(value) is float:
        in_range = -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
        return None if in_range else (_number_fault(value), [])
    if isinstance(value, _Invalid):
        return value.reason, []
    if value is None or type(value) is bool:
        return None
    return f"{type(value).__name__} is not a JSON/1 type", []


def _object_fault(obj: dict[Any, Any]) -> _Fault | None:
    if len(obj) > MAX_MEMBERS:
        return f"object with more than {MAX_MEMBERS} members", []
    for name in obj:
        if type(name) is not str:
            return f"member name of type {type(name).__name__}", [name]
        reason = _string_fault(name, MAX_NAME_BYTES, "member name")
        if reason is not None:
            return reason, [name]
    return None


def _string_fault(text: str, limit: int, what: str) -> str | None:
    if _LONE_SURROGATE.search(text):
        return f"lone surrogate in {what}"
    if _utf8_len(text) > limit:
        return f"{what} longer than {limit} UTF-8 bytes"
    return None


def _number_fault(value: float) -> str:
    if not math.isfinite(value):
        return f"{value} is not a finite number"
    return f"integral value {value!r} beyond ±{MAX_SAFE_INTEGER}"


def pointer_segment(name: object) -> str:
    """One RFC 6901 reference token: a member name or an index, ``~`` and ``/`` escaped."""
    return str(name).replace("~", "~0").replace("/", "~1")


def json_pointer(path: Iterable[object]) -> str:
    """The RFC 6901 pointer of a path of member names and array indices."""
    return "".join(f"/{pointer_segment(step)}" for step in path)


# --- encoding ------------------------------------------------------------------------


def _without_negative_zero(value: Any) -> Any:
    """A copy of a tree with the integer 0 for every -0.0."""
    if type(value) is float:
        return 0 if _is_negative_zero(value) else value
    if type(value) is dict:
        return {name: _without_negative_zero(item) for name, item in value.items()}
    if type(value) is list:
        return [_without_negative_zero(item) for item in value]
    return value


def _write_canonical(value: Any, parts: list[str]) -> None:
    """Append the RFC 8785 text of a validated value."""
    kind = type(value)
    if kind is dict:
        parts.append("{")
        for index, name in enumerate(sorted(value, key=_utf16_units)):
            parts.append("," if index else "")
            parts.append(json.encoder.encode_basestring(name) + ":")
            _write_canonical(value[name], parts)
        parts.append("}")
    elif kind is list:
        parts.append("[")
        for index, item in enumerate(value):
            parts.append("," if index else "")
            _write_canonical(item, parts)
        parts.append("]")
    elif kind is str:
        parts.append(json.encoder.encode_basestring(value))
    elif kind is float:
        parts.append(_es_number(value))
    else:
        parts.append(str(value) if kind is int else _LITERALS[value])


def _utf16_units(name: str) -> bytes:
    return name.encode("utf-16-be", errors="surrogatepass")


def _es_number(value: float) -> str:
    """ECMAScript ``Number::toString`` of a finite double (RFC 8785 §3.2.2.3)."""
    if value == 0:
        return "0"
    from decimal import Decimal  # here: ~1.6 ms of a cold start that writes no float

    sign = "-" if value < 0 else ""
    # repr gives the shortest round-trip digits, as ECMAScript requires.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = int(exponent) + k  # value = 0.digits × 10^n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{mantissa}e{n - 1:+d}"
