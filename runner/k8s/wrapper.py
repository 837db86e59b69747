"""``flow-runner job``: the entrypoint of a Job's pod, the component its child process.

The pod is the sandbox, so the component runs with the process backend. This module
owns what Kubernetes needs around the run: the input (an option, a ConfigMap file, an
environment variable, or an Indexed Job's row), the pod log (a header on stderr, then
one sealed result line on stdout that ``batch import`` trusts), and the report.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner import __version__, json1
from runner.host.broker import CallContext
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

HEADER_KEY = "flowRunnerJob"
"""The member naming the wrapper's header line (stderr, first line of the pod log)."""
RESULT_KEY = "job"
"""The member the wrapper adds to ``exec``'s result line."""
ROW_FIELDS = ("id", "line", "key", "inputDigest", "input", "settings", "deadline")
"""The fields of a line of the normalized manifest ``k8s batch`` puts in its ConfigMap."""


class JobUsageError(ValueError):
    """The job cannot start as configured: exit 2, the Job fails without a retry."""


@dataclass(frozen=True)
class JobRow:
    """One row of an Indexed Job: which invocation this pod runs, and what it is."""

    index: int
    id: str
    line: int
    key: str
    input_digest: str
    manifest: str
    input: JSONValue
    settings: dict[str, JSONValue]
    deadline: float | None

    def header(self) -> dict[str, JSONValue]:
        return {
            "index": self.index, "id": self.id, "line": self.line, "key": self.key,
            "inputDigest": self.input_digest, "manifest": self.manifest,
        }  # fmt: skip


def from_env(option: str, text: str) -> str:
    """``env:NAME`` is the text of environment variable NAME; any other text is itself."""
    if not text.startswith("env:"):
        return text
    name = text[4:]
    value = os.environ.get(name)
    if value is None:
        raise JobUsageError(
            f"{option} {text}: the environment has no variable {name!r}; map it in the pod "
            "spec (env / envFrom) or pass the value another way"
        )
    return value


def completion_index(text: str | None) -> int:
    """The Indexed Job's index: ``--index``, else ``JOB_COMPLETION_INDEX``."""
    if text is None:
        text = os.environ.get("JOB_COMPLETION_INDEX")
    if text is None:
        raise JobUsageError(
            "--manifest needs the row's index: give --index N, or run the pod in an "
            "Indexed Job (it sets JOB_COMPLETION_INDEX)"
        )
    if not text.isdigit() or len(text) > 9:
        raise JobUsageError(f"index {text!r} is not a non-negative integer")
    return int(text)


def read_row(path: Path, index: int, manifest_name: str) -> JobRow:
    """Line ``index`` (0-based) of the normalized manifest, read one line at a time."""
    from runner.durations import parse_duration

    try:
        with path.open("rb") as file:
            raw = next(itertools.islice(file, index, None), None)
    except OSError as exc:
        raise JobUsageError(f"--manifest {path}: cannot read it: {exc.strerror}") from exc
    if raw is None:
        raise JobUsageError(
            f"--manifest {path}: no row {index} (the manifest has {index} or fewer "
            "rows); the Job's completions must equal its rows"
        )
    where = f"--manifest {path} row {index}"
    try:
        value = json1.loads(raw.strip())
    except json1.JSON1Error as exc:
        raise JobUsageError(f"{where}: {exc}; render the manifest with `k8s batch`") from exc
    if not isinstance(value, dict) or set(value) - set(ROW_FIELDS):
        raise JobUsageError(f"{where}: not a row of `k8s batch`; fields are {ROW_FIELDS}")
    row_id, line, key = value.get("id"), value.get("line"), value.get("key")
    digest, settings = value.get("inputDigest"), value.get("settings", {})
    deadline = value.get("deadline")
    if not (isinstance(row_id, str) and isinstance(line, int) and isinstance(key, str)):
        raise JobUsageError(f"{where}: id, line and key are required")
    if not isinstance(digest, str) or not isinstance(settings, dict):
        raise JobUsageError(f"{where}: inputDigest must be a string, settings an object")
    try:
        seconds = None if deadline is None else parse_duration(str(deadline))
    except ValueError as exc:
        raise JobUsageError(f"{where}: deadline {exc}") from exc
    return JobRow(
        index, row_id, line, key, digest, manifest_name, value.get("input"), settings, seconds
    )


class PodBroker:
    """Refuses child flows, capabilities and channels (``UNAVAILABLE``): children would be
    processes of the same pod, not isolated from each other."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        raise OperationError(
            "UNAVAILABLE",
            f"{method} is refused inside a Kubernetes pod: child flows would run as "
            "processes of the same pod, not isolated from each other; run each flow as "
            "its own Job (flow-runner k8s job)",
        )


@dataclass(frozen=True)
class Seal:
    """A secret only the wrapper knows until the component is gone: the header carries
    its digest, the result line (written after the component was reaped) the seal, so
    a component writing into the pod log cannot forge a result ``batch import`` takes."""

    token: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def digest(self) -> str:
        return seal_digest(self.token)


def seal_digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def make_undumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)``, so a component of the same uid cannot read the seal
    from the wrapper's memory or fds (execve resets it for the component; without prctl,
    nothing changes)."""
    import ctypes
    from contextlib import suppress

    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def header_line(seal: Seal, row: JobRow | None, command: Sequence[str]) -> bytes:
    """The first line the wrapper writes to the pod log (stderr)."""
    header: dict[str, JSONValue] = {
        "runner": __version__,
        "sealDigest": seal.digest,
        "started": round(time.time(), 3),
        "command": list(command),
        "row": row.header() if row is not None else None,
    }
    return json1.dumps({HEADER_KEY: header}) + b"\n"


def result_line(body: dict[str, JSONValue], job: dict[str, JSONValue]) -> bytes:
    """``exec``'s result line with the wrapper's ``job`` member (the seal among it)."""
    return json1.dumps({**body, RESULT_KEY: job}) + b"\n"


def write_report(results: Path, name: str, data: bytes) -> Path:
    """Write the run report as ``results/NAME.report.json``, atomically."""
    path = results / f"{name}.report.json"
    partial = results / f".{name}.report.json.partial"
    partial.write_bytes(data)
    partial.replace(path)
    return path


def report_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
