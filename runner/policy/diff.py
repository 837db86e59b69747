"""Two profiles side by side: the rows whose observations differ, and which side gives more.

A row is looser where it fails and the other side passes; judged alike, the larger
number (a limit, a size) is looser; else no side is named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runner.policy.battery import Finding
from runner.sandbox.profiles import SandboxProfile

Side = Literal["A", "B", "?"]
_RANK = {"PASS": 0, "SKIP": 1, "ERROR": 1, "FAIL": 2}


@dataclass(frozen=True)
class Difference:
    """One row that differs; ``looser`` is the more permissive side ('?' if unclear)."""

    id: str
    guarantee: str
    a: Finding
    b: Finding
    looser: Side


def differences(a_rows: list[Finding], b_rows: list[Finding]) -> list[Difference]:
    """The rows present on both sides whose observation or verdict differ, in A's order."""
    b_by_id = {row.id: row for row in b_rows}
    found = []
    for a in a_rows:
        b = b_by_id.get(a.id)
        if b is None or (a.observed, a.verdict) == (b.observed, b.verdict):
            continue
        found.append(Difference(a.id, a.guarantee, a, b, _looser(a, b)))
    return found


def _looser(a: Finding, b: Finding) -> Side:
    ranks = _RANK[a.verdict], _RANK[b.verdict]
    if {a.verdict, b.verdict} == {"PASS", "FAIL"}:
        return "A" if ranks[0] > ranks[1] else "B"
    if a.verdict == b.verdict:
        x, y = _number(a), _number(b)
        if x is not None and y is not None and x != y:
            return "A" if x > y else "B"
    return "?"


def _number(row: Finding) -> float | None:
    for text in (row.observed, row.declared):
        try:
            return float(text)
        except ValueError:
            continue
    return None


def b_is_weaker(found: list[Difference]) -> bool:
    return any(d.looser == "B" for d in found)


def static(a: SandboxProfile, b: SandboxProfile) -> list[tuple[str, object, object]]:
    """The effective settings (defaults filled in) that differ: (key, A's, B's)."""
    left, right = a.as_json(), b.as_json()
    return [(key, left[key], right[key]) for key in left if left[key] != right[key]]
