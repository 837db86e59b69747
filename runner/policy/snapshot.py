"""Snapshots: what was in effect, recorded, so a later run can say what silently changed
(an engine, kernel or runtime upgrade can change what a profile enforces).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.policy.battery import Finding

FORMAT = "flow-runner-policy-snapshot/1"


class SnapshotError(ValueError):
    """A snapshot file cannot be read or is not one."""


def record(path: Path, profile: str, environment: dict[str, str], rows: list[Finding]) -> None:
    document = {
        "format": FORMAT,
        "profile": profile,
        "environment": environment,
        "rows": {row.id: {"observed": row.observed, "verdict": row.verdict} for row in rows},
    }
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"--against {path}: cannot read a snapshot ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise SnapshotError(
            f"--against {path}: not a policy snapshot (format {FORMAT!r}); write one with "
            "`flow-runner policy verify PROFILE --snapshot FILE`"
        )
    return document


def compare(
    document: dict[str, Any], environment: dict[str, str], rows: list[Finding]
) -> list[Finding]:
    """A FAIL row per observation that changed, or one PASS row when none did."""
    then_env: dict[str, str] = document.get("environment", {})
    moved = [
        f"{k} {then_env.get(k)} -> {v}" for k, v in environment.items() if then_env.get(k) != v
    ]
    context = "; ".join(moved) if moved else "same engine, kernel and runtime"
    recorded: dict[str, dict[str, str]] = document.get("rows", {})
    changed = []
    for row in rows:
        before = recorded.get(row.id)
        if before is None or before.get("observed") == row.observed:
            continue
        changed.append(Finding(
            f"snapshot.{row.id}", "snapshot", f"unchanged since the snapshot: {row.guarantee}",
            str(before.get("observed")), "-", row.observed, "FAIL", context,
            f"was {before.get('observed')} ({before.get('verdict')}), now {row.observed} "
            f"({row.verdict})",
        ))  # fmt: skip
    gone = sorted(set(recorded) - {row.id for row in rows})
    if gone:
        changed.append(Finding(
            "snapshot.rows", "snapshot", "the same rows as the snapshot", f"{len(recorded)} rows",
            "-", "", "FAIL", context, f"no longer observed: {', '.join(gone)}",
        ))  # fmt: skip
    if changed:
        return changed
    return [Finding("snapshot", "snapshot", "nothing changed since the snapshot",
                f"{len(recorded)} rows", "-", f"{len(rows)} rows", "PASS", context)]  # fmt: skip
