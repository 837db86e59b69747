"""Many invocations in one job: ``flow-runner batch`` and its Python API.

    from runner.batch import BatchOptions, run_batch
    result = anyio.run(run_batch, BatchOptions(Path("cases.jsonl"), jobs=4))
    sys.exit(result.exit_status)

A JSON Lines manifest (:mod:`.manifest`) is checked whole, keyed (:mod:`.keys`), planned
against a SQLite result store (:mod:`.store`) and run by one scheduler
(:mod:`.scheduler`); only infrastructure failures are retried (:mod:`.retry`). JUnit
(:mod:`.junit`), JSON Lines and summaries (:mod:`.report`), shard merges and regression
diffs (:mod:`.merge`) read the store back.
"""

from __future__ import annotations

from .junit import write_junit
from .manifest import Defaults, ManifestError, Row
from .merge import diff, merge
from .report import print_summary, summary, write_jsonl
from .retry import is_infrastructure_failure
from .scheduler import BatchControl, BatchOptions, BatchResult, Halt, manifest_name, run_batch
from .store import Store, StoreError

__all__ = [
    "BatchControl",
    "BatchOptions",
    "BatchResult",
    "Defaults",
    "Halt",
    "ManifestError",
    "Row",
    "Store",
    "StoreError",
    "diff",
    "is_infrastructure_failure",
    "manifest_name",
    "merge",
    "print_summary",
    "run_batch",
    "summary",
    "write_jsonl",
    "write_junit",
]  # fmt: skip
