"""``flow-runner batch import``: the pods' logs of a ``k8s batch`` Job into a result store.

A pod log mixes the wrapper's lines with the component's, which may forge results. The
first header line names the row and the seal's digest; the result is the first later
line carrying that seal. A header without one is a pod lost before it answered. Logs of
one row are its attempts: a sealed result wins over a lost pod, a later start over an
earlier one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from runner import json1
from runner.exits import EXIT_CUSTOM_OUTCOME, EXIT_DONE, EXIT_USAGE
from runner.json1 import JSONValue

from .wrapper import HEADER_KEY, RESULT_KEY, seal_digest

LOST = "POD_LOST"
"""The error code of a row whose pod ended without a sealed result line."""


class LogError(ValueError):
    """A file is not a pod log of a ``k8s batch`` Job; nothing was imported."""


@dataclass
class Attempt:
    """One pod's run of a row, as its log tells it."""

    path: Path
    started: float
    status: str
    run_id: str = ""
    outcome: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    output: str | None = None
    exit_code: int | None = None
    seconds: float = 0.0
    job: dict[str, JSONValue] = field(default_factory=dict)


@dataclass
class ImportedRun:
    """A row and every attempt of it found in the logs."""

    row: dict[str, JSONValue]
    command: list[str]
    attempts: list[Attempt]

    @property
    def final(self) -> Attempt:
        return max(self.attempts, key=lambda a: (a.status != "infra-failed", a.started))


def read_logs(paths: Iterable[Path]) -> list[ImportedRun]:
    """Every row in the logs, in manifest order; every file that is not a batch pod's log
    is listed, and nothing is imported."""
    runs: dict[str, ImportedRun] = {}
    problems: list[str] = []
    for path in paths:
        try:
            header, attempt = read_log(path)
        except LogError as exc:
            problems.append(str(exc))
            continue
        row = header["row"]
        assert isinstance(row, dict)
        key = str(row["id"])
        command = header.get("command")
        words = [str(c) for c in command] if isinstance(command, list) else []
        if key in runs and runs[key].row != row:
            problems.append(f"{path}: row {key!r} differs from another log's (another Job?)")
            continue
        runs.setdefault(key, ImportedRun(row, words, [])).attempts.append(attempt)
    if problems:
        raise LogError("nothing was imported:\n" + "\n".join(f"  {p}" for p in problems))
    return sorted(runs.values(), key=lambda r: (str(r.row["manifest"]), int(str(r.row["line"]))))


def read_log(path: Path) -> tuple[dict[str, JSONValue], Attempt]:
    """The header and the attempt of one pod's log."""
    header: dict[str, JSONValue] | None = None
    try:
        for value in _objects(path):
            if header is None:
                found = value.get(HEADER_KEY)
                if isinstance(found, dict):
                    header = _checked_header(path, found)
                continue
            job = value.get(RESULT_KEY)
            if (
                isinstance(job, dict)
                and isinstance(job.get("seal"), str)
                and seal_digest(str(job["seal"])) == header["sealDigest"]
            ):
                return header, _attempt(path, header, value, job)
    except OSError as exc:
        raise LogError(f"{path}: cannot read: {exc.strerror}") from exc
    if header is None:
        raise LogError(
            f"{path}: no flow-runner job header: not a pod log of `flow-runner job`, or the "
            "wrapper failed before it started the run (see the log's last lines)"
        )
    return header, Attempt(
        path, float(str(header["started"])), "infra-failed", error_code=LOST,
        error_message="the pod's log ends without the wrapper's sealed result: the pod was "
        "killed (out of memory, activeDeadlineSeconds, its node lost) before it answered",
    )  # fmt: skip


def _checked_header(path: Path, header: dict[str, JSONValue]) -> dict[str, JSONValue]:
    row = header.get("row")
    if row is None:
        raise LogError(f"{path}: the log of a single Job (no batch row); nothing to import")
    ok = (
        isinstance(row, dict)
        and all(isinstance(row.get(k), str) for k in ("id", "key", "inputDigest", "manifest"))
        and isinstance(row.get("line"), int)
        and isinstance(header.get("sealDigest"), str)
        and isinstance(header.get("started"), (int, float))
    )
    if not ok:
        raise LogError(f"{path}: a malformed flow-runner job header")
    return header


def _attempt(
    path: Path, header: dict[str, JSONValue], value: dict[str, JSONValue], job: dict[str, JSONValue]
) -> Attempt:
    status = job.get("exit")
    exit_code = job.get("componentExit")
    attempt = Attempt(
        path, float(str(header["started"])), "failed", run_id=str(job.get("run") or ""),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        seconds=float(str(job.get("seconds") or 0)), job=job,
    )  # fmt: skip
    if status in (EXIT_DONE, EXIT_CUSTOM_OUTCOME) and isinstance(value.get("outcome"), str):
        attempt.status = "succeeded"
        attempt.outcome = str(value["outcome"])
        attempt.output = json1.dumps(value.get("output")).decode()
        return attempt
    error = value.get("error")
    if isinstance(error, dict):
        attempt.error_code = str(error.get("code"))
        attempt.error_message = str(error.get("message"))
    if status == EXIT_USAGE and attempt.error_code is None:
        attempt.error_code = "USAGE"
    return attempt


def _objects(path: Path) -> Iterator[dict[str, JSONValue]]:
    """The JSON/1 objects of the log's lines that hold one."""
    with path.open("rb") as file:
        for line in file:
            stripped = line.strip()
            if not stripped.startswith(b"{"):
                continue
            try:
                value = json1.loads(stripped)
            except json1.JSON1Error:
                continue
            if isinstance(value, dict):
                yield value


def import_runs(runs: list[ImportedRun], store_path: Path) -> dict[str, int]:
    """Write each row with its attempts and final result into the batch result store."""
    from runner.batch.store import RowResult, Store, StoreError

    try:
        store = Store(store_path)
    except StoreError as exc:
        raise LogError(str(exc)) from exc
    counts: dict[str, int] = {}
    try:
        for run in runs:
            row, final = run.row, run.final
            row_id, manifest = str(row["id"]), str(row["manifest"])
            store.queue({
                "id": row_id, "manifest": row["manifest"], "line": row["line"],
                "key": row["key"], "input_digest": row["inputDigest"],
                "target": "k8s: " + " ".join(run.command), "image_id": None,
            })  # fmt: skip
            for attempt in sorted(run.attempts, key=lambda a: a.started):
                store.start(manifest, row_id, attempt.run_id)
            store.finish(
                manifest,
                row_id,
                RowResult(
                    final.status, outcome=final.outcome, error_code=final.error_code,
                    error_message=final.error_message, output=final.output,
                    exit_code=final.exit_code, report=json.dumps({"job": final.job}),
                ),
                seconds=final.seconds,
            )  # fmt: skip
            counts[final.status] = counts.get(final.status, 0) + 1
    finally:
        store.close()
    return counts
