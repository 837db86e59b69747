"""A seeded mutator of Run/1 frames and one fuzz case played against a HostSession.

Shared by the suite's bounded fuzz test (tests/test_session.py) and the long runs of
bench/fuzz.py. Seeds are the conformance corpus's wire vectors plus a few frames every
session meets; each case mutates one of them, by structure (deep nesting of the shape
that crashed orjson's encoder, long strings and names, many members, duplicate names,
numbers outside JSON/1) and by bytes (flips, cuts, bad UTF-8, escaped surrogates, stray
LFs), and cuts the stream into chunks at random points. ``play`` feeds it to a fresh
session, echoes component inputs back as call results (the host then encodes a tree the
component chose) and judges the end. Any exception escaping ``play`` is a local error
raised by remote input: the bug the fuzzing looks for.
"""

from __future__ import annotations

import json
import random
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from typing import Any

from runner import json1
from runner.protocol.completion import Ending, judge
from runner.protocol.session import (
    CallCancelled,
    CallRequested,
    HostSession,
    RootError,
    RootResult,
    Violation,
)
from speckit import load_spec

PARAMS: dict[str, Any] = {
    "protocol": "run/1",
    "input": None,
    "settings": {},
    "attachments": {},
    "scratch": "/flow/scratch",
    "deadlineUnixMs": 1_900_000_000_000,
}


@dataclass(frozen=True)
class Raw:
    """A token written as is (a number JSON/1 refuses, say)."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """An object written member by member: names may repeat."""

    members: list[tuple[str, Any]]


def write(value: Any) -> str:
    """Compact JSON text of a tree that may hold :class:`Raw` and :class:`Pairs`: the
    stdlib writes it, with a marker string for each of those, replaced afterwards."""
    parts: dict[str, str] = {}

    def mark(special: object) -> str:
        if isinstance(special, Raw):
            text = special.text
        elif isinstance(special, Pairs):
            text = "{" + ",".join(f"{json.dumps(k)}:{write(v)}" for k, v in special.members)
            text += "}"
        else:
            raise TypeError(type(special).__name__)
        marker = f"\ue000{len(parts)}\ue000"
        parts[json.dumps(marker, ensure_ascii=False)] = text
        return marker

    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=mark)
    for marker, part in parts.items():
        text = text.replace(marker, part, 1)
    return text


@cache
def seeds() -> list[Any]:
    """Decoded seed messages: the corpus's vectors and frames every session meets."""
    corpus = load_spec("conformance/messages.json")
    values = [case["value"] for kind in ("valid", "invalid") for case in corpus[kind]]
    framing = load_spec("conformance/framing.json")
    for kind in ("valid", "invalid"):
        for case in framing[kind]:
            with suppress(ValueError):  # not JSON at all: its bytes are seeded below
                values.append(json.loads(bytes.fromhex(case["hex"])))
    call = {"operationId": "o", "slot": "s", "method": "m", "input": {"a": [1, "x"]}}
    values += [
        {"jsonrpc": "2.0", "id": "c:1", "method": "capability/call", "params": call},
        {"jsonrpc": "2.0", "id": "c:2", "method": "flow/run-child",
         "params": {"operationId": "p", "slot": "s", "input": [1, {"b": None}]}},
        {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "c:1"}},
        {"jsonrpc": "2.0", "id": "host:1", "result": {"outcome": "done", "output": [1, 2]}},
        {"jsonrpc": "2.0", "id": "host:1",
         "error": {"code": -32000, "message": "x", "data": {"code": "CANCELLED"}}},
        {"jsonrpc": "2.0", "id": "host:1", "error": {"code": -32603, "message": "boom"}},
    ]  # fmt: skip
    return values


@cache
def raw_seeds() -> list[bytes]:
    framing = load_spec("conformance/framing.json")
    return [bytes.fromhex(case["hex"]) for kind in ("valid", "invalid") for case in framing[kind]]


_ODD_NUMBERS = [
    "9007199254740992", "-9007199254740992", "1e16", "1e400", "-0", "-0.0", "1" * 129,
    "0." + "0" * 127 + "1", "1E+2", "NaN", "Infinity", "01", "1.", "-",
]  # fmt: skip
_BAD_BYTES = [
    b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbb\xbf", b"\\ud800",
    b"\\udc00\\ud800", b"\x00", b"\n", b"\r", b'"', b"\\", b"{", b"]",
]  # fmt: skip


class Mutator:
    """Makes fuzz cases from one seeded random generator: the same seed, the same cases."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.values = seeds()
        self.raws = raw_seeds()

    @classmethod
    def case_at(cls, seed: int, index: int) -> list[bytes]:
        """Case ``index`` of the sequence ``seed``, made alone (to replay one finding)."""
        return cls(seed << 32 | index).case()

    def case(self) -> list[bytes]:
        """The stdout chunks of one case: one or two mutated frames, cut at random."""
        rng = self.rng
        data = self.frame() + (self.frame() if rng.random() < 0.1 else b"")
        if rng.random() < 0.05:
            data = data.rstrip(b"\n")  # an incomplete frame at EOF
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randrange(4))))
        return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]

    def frame(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.05:
            data = rng.choice(self.raws)
        else:
            value = json.loads(json.dumps(rng.choice(self.values)))  # a copy
            for _ in range(rng.randrange(1, 3)):
                value = self.structural(value)
            data = write(value).encode(errors="surrogatepass") + b"\n"
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            data = self.bytewise(data)
        return data

    def structural(self, value: Any) -> Any:
        rng = self.rng
        kind = rng.choice(("deep", "deep", "string", "name", "members", "duplicate", "number"))
        if kind == "deep":
            return self.replace(value, self.deep())
        big = rng.random() < 0.02  # large values are rare: most cases stay fast
        if kind == "string":
            size = rng.choice((70_000, 300_000) if big else (3, 1024, 1025, 5000))
            return self.replace(value, rng.choice('xé😀\x00"\\') * size)
        if kind == "name":
            name = rng.choice("né") * rng.choice((255, 256, 1024, 1025, 2000))
            return self.replace(value, {name: 1})
        if kind == "members":
            count = rng.choice((65_536, 65_537) if big else (10, 300))
            return self.replace(value, {f"k{i}": i for i in range(count)})
        if kind == "duplicate":
            name = rng.choice(("a", "id", "jsonrpc", "method", "result", "\u003a"))
            return self.replace(value, Pairs([(name, 1), ("b", [2]), (name, 3)]))
        return self.replace(value, Raw(rng.choice(_ODD_NUMBERS)))

    def deep(self) -> Any:
        """Nested containers of the shapes orjson's encoder broke on (12-140 levels)."""
        rng = self.rng
        depth = rng.choice((rng.randrange(1, 64), rng.randrange(60, 141)))
        wide = rng.random() < 0.05
        width = rng.choice((64, rng.randrange(300)) if wide else (0, 1, 2, 15, 16, 17))
        shape = rng.choice(("after", "before", "objects", "mixed"))
        tree: Any = rng.choice((0, "s", [], {}, None))
        for level in range(depth):
            items = [rng.choice((0, "x", None, [], 1.5))] * width
            if shape == "after" or (shape == "mixed" and level % 2):
                tree = [tree, *items]
            elif shape == "before":
                tree = [*items, tree]
            else:
                tree = {"k": tree, **{f"m{i}": item for i, item in enumerate(items)}}
        return tree

    def replace(self, value: Any, new: Any) -> Any:
        """``value`` with one of its parts (or itself, rarely) replaced by ``new``."""
        rng = self.rng
        if rng.random() < 0.1 or not isinstance(value, dict | list) or not value:
            return new
        parent, key = value, None
        while True:
            key = (
                rng.choice(list(parent)) if isinstance(parent, dict) else rng.randrange(len(parent))
            )
            child = parent[key]
            if not isinstance(child, dict | list) or not child or rng.random() < 0.4:
                break
            parent = child
        parent[key] = new
        return value

    def bytewise(self, data: bytes) -> bytes:
        rng = self.rng
        at = rng.randrange(len(data) + 1)
        kind = rng.choice(("flip", "insert", "delete", "cut", "copy"))
        if kind == "flip" and at < len(data):
            return data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
        if kind == "insert":
            return data[:at] + rng.choice(_BAD_BYTES) + data[at:]
        if kind == "delete":
            return data[:at] + data[at + rng.randrange(1, 5) :]
        if kind == "cut":
            return data[:at]
        start = rng.randrange(len(data) + 1)
        return data[:at] + data[start : start + rng.randrange(1, 40)] + data[at:]


def play(chunks: list[bytes], exit_code: int | None = 0) -> str:
    """Feed one case to a fresh session and judge it; returns the verdict's code.

    Every event must be one of the session's events, a violation must close the channel,
    and the verdict must be a result or an error. A call is answered with its own input
    (the host encodes a tree the component built, as it does a relayed child result).
    """
    session = HostSession(PARAMS)
    session.start()
    for chunk in chunks:
        for event in session.receive_data(chunk):
            assert isinstance(
                event, CallRequested | CallCancelled | RootResult | RootError | Violation
            )
            assert not isinstance(event, Violation) or session.closed
            if isinstance(event, CallRequested):
                session.respond_encoded(
                    event.request_id, json1.dumps({"value": event.params.get("input")})
                )
        session.frames_to_send()
    assert session.receive_eof() == [] or session.closed
    verdict = judge(session, Ending(exit_code))
    if verdict.result is not None:
        assert verdict.error is None
        return "accepted"
    assert verdict.error is not None
    return verdict.error.code
