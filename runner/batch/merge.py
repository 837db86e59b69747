"""Joining shard stores (``batch merge``) and comparing two stores (``batch diff``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .store import COLUMNS, Store, StoreError


def merge(sources: list[Path], target: Path) -> int:
    """Copy every row of ``sources`` into ``target``; return the rows written.

    A row in several sources keeps one: a final result over none, then the last ended.
    A source that is no store (or is the target) is refused with the target untouched; a
    target this call created is removed again if the merge fails.
    """
    for path in sources:
        if path.resolve() == target.resolve():
            raise StoreError(f"{path}: the output must not be one of the inputs")
        Store(path, create=False).close()
    created = not target.exists()
    try:
        return _merge_into(sources, target)
    except BaseException:
        if created:
            for leftover in (target, *(Path(f"{target}{end}") for end in ("-wal", "-shm"))):
                leftover.unlink(missing_ok=True)
        raise


def _merge_into(sources: list[Path], target: Path) -> int:
    out = Store(target)
    written = 0
    placeholders = ", ".join("?" for _ in COLUMNS)
    try:
        with out.transaction():
            for path in sources:
                source = Store(path, create=False)
                try:
                    for row in source.rows():  # kept: a final result, then the last ended
                        have = out.db.execute(
                            "SELECT state, ended_at FROM runs WHERE manifest = ? AND id = ?",
                            (row["manifest"], row["id"]),
                        ).fetchone()
                        rank = (row["state"] == "done", row["ended_at"] or 0.0)
                        if have is not None and (have[0] == "done", have[1] or 0.0) >= rank:
                            continue
                        out.db.execute(
                            f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) "
                            f"VALUES ({placeholders})",
                            tuple(row[c] for c in COLUMNS),
                        )
                        written += 1
                finally:
                    source.close()
    finally:
        out.close()
    return written


def diff(old: Path, new: Path) -> Iterator[dict[str, Any]]:
    """What changed from ``old`` to ``new`` among finished rows: entries of ``kind``
    ``changed`` (status, outcome, error code or output; named in ``changed``),
    ``input-changed``, ``added`` or ``removed``. Rows are matched by id (the same
    manifest's and input's first), not by key, which changes with the image and runner.
    """
    a, b = Store(old, create=False), Store(new, create=False)
    fields = ("status", "outcome", "error_code", "output")
    try:
        for row in b.rows("state = 'done'"):
            before = a.db.execute(
                "SELECT * FROM runs WHERE id = ? AND state = 'done' "
                "ORDER BY manifest = ? DESC, input_digest = ? DESC LIMIT 1",  # the likeliest
                (row["id"], row["manifest"], row["input_digest"]),
            ).fetchone()
            if before is None:
                yield _entry("added", row, {"status": {"old": None, "new": row["status"]}})
                continue
            changed = {f: {"old": before[f], "new": row[f]} for f in fields if before[f] != row[f]}
            if before["input_digest"] != row["input_digest"]:
                inputs = {"old": before["input_digest"], "new": row["input_digest"]}
                yield _entry("input-changed", row, {"input_digest": inputs, **changed}, before)
            elif changed:
                yield _entry("changed", row, changed, before)
        seen = {row["id"] for row in b.rows("state = 'done'")}
        for row in a.rows("state = 'done'"):
            if row["id"] not in seen:
                yield _entry("removed", row, {"status": {"old": row["status"], "new": None}})
    finally:
        a.close()
        b.close()


def _entry(
    kind: str, row: Any, changed: dict[str, Any], before: Any | None = None
) -> dict[str, Any]:
    old_image = before["image_id"] if before is not None else None
    if kind == "removed":
        old_image, new_image = row["image_id"], None
    else:
        new_image = row["image_id"]
    return {"kind": kind, "manifest": row["manifest"], "id": row["id"], "changed": changed,
            "image_id": {"old": old_image, "new": new_image}}  # fmt: skip
