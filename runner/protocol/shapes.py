"""The small predicates every Run/1 message check shares.

Member sets, integers as JSON/1 has them, and a peer's member names shown bounded in a
reason (the names come from the peer, so a reason never carries more than a prefix).
"""

from __future__ import annotations

from collections.abc import Callable

from runner.json1 import JSONValue

JSONObject = dict[str, JSONValue]
JSONArray = list[JSONValue]


def is_integer_in(value: object, low: int, high: int) -> bool:
    # JSON/1 numbers are values, so 1.0 is the integer 1 (as for the schema's
    # "integer"); bool is a JSON literal, never a number.
    if isinstance(value, int):
        return not isinstance(value, bool) and low <= value <= high
    return isinstance(value, float) and value.is_integer() and low <= value <= high


def show(name: str) -> str:
    """A member name for a reason string, bounded (names come from the peer)."""
    return repr(name) if len(name) <= 40 else repr(name[:40]) + "…"


def members(obj: JSONObject, required: frozenset[str], allowed: frozenset[str]) -> str | None:
    keys = obj.keys()
    if not keys <= allowed:
        return f"unknown member {show(min(keys - allowed))}"
    if not required <= keys:
        return f"missing member {min(required - keys)!r}"
    return None


def nested(
    value: JSONValue,
    label: str,
    required: frozenset[str],
    allowed: frozenset[str],
    not_object: str,
) -> str | None:
    """The reason ``value``, the member ``label``, is not an object of these members."""
    if not isinstance(value, dict):
        return not_object
    reason = members(value, required, allowed)
    return None if reason is None else f"{label}: {reason}"


def exactly(
    allowed: frozenset[str], name: str, test: Callable[[object], bool], failure: str
) -> Callable[[JSONObject], str | None]:
    """A check of an object with exactly ``allowed`` members whose ``name`` passes ``test``."""

    def check(obj: JSONObject) -> str | None:
        return members(obj, allowed, allowed) or (None if test(obj[name]) else failure)

    return check
