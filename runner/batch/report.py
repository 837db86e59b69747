"""Reading a store back: the summary table (``batch report``) and JSON Lines results."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from runner.outputs import write_output

from .store import Store

PHASES = (
    "create", "attach", "start", "pool_wait", "first_byte", "response", "exit", "run", "cleanup",
    "total",
)  # fmt: skip
"""The order the report shows the phase timings in; a timing not named here follows them."""
_RANK = {name: rank for rank, name in enumerate(PHASES)}
_RESULT_FIELDS = (
    "id", "manifest", "key", "state", "status", "outcome", "error_code", "error_message",
    "exit_code", "attempts", "seconds", "image_id",
)  # fmt: skip


def write_jsonl(store: Store, path: Path, manifest: str | None = None) -> None:
    """One result per line, in manifest order, written whole or not at all
    (:func:`runner.outputs.write_output`); the output decoded, the run report left in the
    store."""
    where, params = ("manifest = ?", (manifest,)) if manifest is not None else ("1", ())
    lines = []
    for row in store.rows(where, params):
        result = {name: row[name] for name in _RESULT_FIELDS}
        result["output"] = json.loads(row["output"]) if row["output"] is not None else None
        lines.append(json.dumps(result, ensure_ascii=False) + "\n")
    write_output(path, "".join(lines).encode())


def summary(store: Store) -> dict[str, Any]:
    """Counts by status per manifest, and the rows that did not succeed."""
    manifests: dict[str, dict[str, int]] = {}
    problems: list[dict[str, Any]] = []
    seconds = 0.0
    for row in store.rows():
        status = row["status"] if row["state"] == "done" else (row["status"] or row["state"])
        counts = manifests.setdefault(row["manifest"], {})
        counts[status] = counts.get(status, 0) + 1
        counts["total"] = counts.get("total", 0) + 1
        seconds += row["seconds"] or 0
        if status != "succeeded":
            problems.append({
                "manifest": row["manifest"], "id": row["id"], "status": status,
                "error_code": row["error_code"],
                "message": (row["error_message"] or "").strip().partition("\n")[0][:200],
            })  # fmt: skip
    return {
        "manifests": manifests,
        "not_succeeded": problems,
        "run_seconds": round(seconds, 3),
        "phases": phase_stats(run_timings(store)),
    }


def run_timings(store: Store) -> Iterator[dict[str, float]]:
    """The ``timings`` of each run report the store keeps (a row refused before launch
    has none)."""
    found = store.db.execute(
        "SELECT json_extract(report, '$.timings') FROM runs WHERE report IS NOT NULL"
    )
    for (timings,) in found:
        yield json.loads(timings or "{}")


def phase_stats(reports: Iterable[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Seconds of each timing the reports' ``timings`` carry: ``rows`` (how many carry
    it), ``p50``, ``p95`` and ``max`` (nearest rank), in :data:`PHASES` order, then the
    others by name."""
    values: dict[str, list[float]] = {}
    for timings in reports:
        for name, seconds in timings.items():
            values.setdefault(name, []).append(seconds)
    order = sorted(values, key=lambda name: (_RANK.get(name, len(PHASES)), name))
    return {name: _stats(sorted(values[name])) for name in order}


def _stats(ordered: list[float]) -> dict[str, float]:
    def rank(share: float) -> float:
        return ordered[max(0, math.ceil(share * len(ordered)) - 1)]

    return {"rows": len(ordered), "p50": rank(0.5), "p95": rank(0.95), "max": ordered[-1]}


def print_summary(info: dict[str, Any], out: TextIO) -> None:
    """The summary as a table for people."""
    columns = ("total", "succeeded", "failed", "infra-failed", "interrupted", "pending", "running")
    print(f"{'manifest':24} " + " ".join(f"{c:>12}" for c in columns), file=out)
    for name, counts in info["manifests"].items():
        cells = " ".join(f"{counts.get(c, 0):>12}" for c in columns)
        print(f"{name[:24]:24} {cells}", file=out)
    if info["not_succeeded"]:
        print("\nnot succeeded:", file=out)
        for p in info["not_succeeded"]:
            print(f"  {p['manifest']}/{p['id']:20} {p['status']:13} {p['error_code'] or ''}"
                  f" {p['message']}", file=out)  # fmt: skip
    if info["phases"]:
        print(f"\n{'phase (s)':24} " + " ".join(f"{c:>12}" for c in ("rows", "p50", "p95", "max")),
              file=out)  # fmt: skip
        for name, stats in info["phases"].items():
            cells = " ".join(f"{stats[c]:>12.3f}" for c in ("p50", "p95", "max"))
            print(f"{name[:24]:24} {stats['rows']:>12} {cells}", file=out)
