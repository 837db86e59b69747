"""The result store: one SQLite database (WAL), one row per (manifest, id).

Every state change is its own commit, so ``kill -9`` loses at most the runs in flight
(left ``running``, run again on resume); ``synchronous = NORMAL`` keeps commits across a
crash of the process with no fsync per row.

States: ``pending`` (to run; status ``interrupted`` if stopped), ``running``, ``done``
with status ``succeeded``, ``failed`` (a Run error or a refusal before launch) or
``infra-failed`` (the infrastructure failed every attempt).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COLUMNS = (
    "id", "manifest", "line", "key", "input_digest", "target", "image_id", "state", "status",
    "outcome", "error_code", "error_message", "output", "exit_code", "run_id", "attempts",
    "queued_at", "started_at", "ended_at", "seconds", "stderr_tail", "report",
)  # fmt: skip
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT NOT NULL,
    manifest TEXT NOT NULL,
    line INTEGER NOT NULL,
    key TEXT NOT NULL,
    input_digest TEXT NOT NULL,
    target TEXT NOT NULL,
    image_id TEXT,
    state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'done')),
    status TEXT,
    outcome TEXT,
    error_code TEXT,
    error_message TEXT,
    output TEXT,
    exit_code INTEGER,
    run_id TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    queued_at REAL,
    started_at REAL,
    ended_at REAL,
    seconds REAL,
    stderr_tail TEXT,
    report TEXT,
    PRIMARY KEY (manifest, id)
);
"""
SUCCEEDED, FAILED, INFRA_FAILED, INTERRUPTED = "succeeded", "failed", "infra-failed", "interrupted"


class StoreError(ValueError):
    """The results file is not a batch store (or cannot be opened); says which and why."""


@dataclass(frozen=True)
class RowResult:
    """A run's final (or interrupted) result, as the store keeps it."""

    status: str
    outcome: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    output: str | None = None
    exit_code: int | None = None
    stderr_tail: str | None = None
    report: str | None = None


class Store:
    """The batch's SQLite database; every method commits what it changed."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        if not create and not path.is_file():
            raise StoreError(f"{path}: no such results file")
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute("PRAGMA busy_timeout = 5000")
            self.db.executescript(SCHEMA)
            self.db.execute("SELECT id FROM runs LIMIT 1").fetchall()
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: not a flow-runner results database ({exc})") from exc
        self.db.row_factory = sqlite3.Row
        self.path = path
        self._claim: int | None = None

    def claim(self) -> None:
        """Hold the store for one batch until :meth:`close`; :class:`StoreError` if
        another batch holds it (both would run the rows neither has finished).

        An ``flock`` on the file, which SQLite's POSIX record locks do not meet; readers
        (report, diff, merge) take none.
        """
        import fcntl

        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(
                f"{self.path}: another batch is running on this results file; wait for it "
                "to end, or give this one its own with --results"
            ) from None
        self._claim = fd

    def close(self) -> None:
        self.db.close()
        if self._claim is not None:
            os.close(self._claim)  # the flock goes with it
            self._claim = None

    def known(self, manifest: str, row_id: str) -> sqlite3.Row | None:
        """The row's ``key``, ``state`` and ``status``, if the store has it."""
        return self.db.execute(  # type: ignore[no-any-return]
            "SELECT key, state, status FROM runs WHERE manifest = ? AND id = ?", (manifest, row_id)
        ).fetchone()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction around many writes (the planning pass, a migration)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def queue(self, entry: dict[str, Any]) -> None:
        """Make a row pending (new, changed or rerun), clearing any earlier result; a row
        resumed with the same key keeps its count of attempts."""
        self.db.execute(
            "INSERT INTO runs (id, manifest, line, key, input_digest, target, image_id, "
            "state, attempts, queued_at) VALUES (:id, :manifest, :line, :key, "
            ":input_digest, :target, :image_id, 'pending', 0, :now) "
            "ON CONFLICT (manifest, id) DO UPDATE SET "
            "line = excluded.line, key = excluded.key, "
            "input_digest = excluded.input_digest, target = excluded.target, "
            "image_id = excluded.image_id, state = 'pending', status = NULL, "
            "outcome = NULL, error_code = NULL, error_message = NULL, output = NULL, "
            "exit_code = NULL, run_id = NULL, queued_at = excluded.queued_at, "
            "attempts = CASE WHEN runs.key = excluded.key AND runs.state != 'done' "
            "THEN runs.attempts ELSE 0 END, "
            "started_at = NULL, ended_at = NULL, seconds = NULL, stderr_tail = NULL, "
            "report = NULL",
            {**entry, "now": time.time()},
        )

    def start(self, manifest: str, row_id: str, run_id: str) -> None:
        """Record an attempt starting (the row admitted, before its ``flow/run``)."""
        self.db.execute(
            "UPDATE runs SET state = 'running', run_id = ?, attempts = attempts + 1, "
            "started_at = ? WHERE manifest = ? AND id = ?",
            (run_id, time.time(), manifest, row_id),
        )

    def finish(self, manifest: str, row_id: str, final: RowResult, *, seconds: float) -> None:
        """Commit a result: ``done``, or ``pending`` again if it was interrupted."""
        state = "pending" if final.status == INTERRUPTED else "done"
        self.db.execute(
            "UPDATE runs SET state = ?, status = ?, outcome = ?, error_code = ?, "
            "error_message = ?, output = ?, exit_code = ?, stderr_tail = ?, report = ?, "
            "ended_at = ?, seconds = ? WHERE manifest = ? AND id = ?",
            (
                state, final.status, final.outcome, final.error_code, final.error_message,
                final.output, final.exit_code, final.stderr_tail, final.report, time.time(),
                seconds, manifest, row_id,
            ),
        )  # fmt: skip

    def rows(self, where: str = "1", params: tuple[Any, ...] = ()) -> Iterator[sqlite3.Row]:
        """Rows in manifest order (``where`` is SQL written here, never a user's text)."""
        yield from self.db.execute(
            f"SELECT * FROM runs WHERE {where} ORDER BY manifest, line", params
        )

    def _migrate(self) -> None:
        """Key a store's rows by manifest and id where they were keyed by id alone, every
        row copied as it was."""
        if self._keyed_by_id():
            with self.transaction():
                if self._keyed_by_id():  # another process may have migrated it meanwhile
                    columns = ", ".join(COLUMNS)
                    self.db.execute("ALTER TABLE runs RENAME TO runs_by_id")
                    self.db.execute(SCHEMA)
                    self.db.execute(
                        f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs_by_id"
                    )
                    self.db.execute("DROP TABLE runs_by_id")

    def _keyed_by_id(self) -> bool:
        key = [row[1] for row in self.db.execute("PRAGMA table_info(runs)") if row[5]]
        return key == ["id"]
