"""Many invocations in one job: ``flow-runner batch`` and its Python API.

    from runner.batch import BatchOptions, run_batch
    result = anyio.run(run_batch, BatchOptions(Path("cases.jsonl"), jobs=4))
    sys.exit(result.exit_status)

A manifest (:mod:`.manifest`) is keyed (:mod:`.keys`), planned against a result store
(:mod:`.store`) and run (:mod:`.scheduler`); JUnit, reports and merges read the store back.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .merge import diff, merge  # at once: the module's name is the function's

if TYPE_CHECKING:
    from .junit import write_junit
    from .manifest import Defaults, ManifestError, Row
    from .report import print_summary, summary, write_jsonl
    from .retry import is_infrastructure_failure
    from .scheduler import BatchControl, BatchOptions, BatchResult, Halt, manifest_name, run_batch
    from .store import Store, StoreError

_MODULE = {
    "junit": ("write_junit",),
    "manifest": ("Defaults", "ManifestError", "Row"),
    "report": ("print_summary", "summary", "write_jsonl"),
    "retry": ("is_infrastructure_failure",),
    "scheduler": ("BatchControl", "BatchOptions", "BatchResult", "Halt", "manifest_name",
                  "run_batch"),
    "store": ("Store", "StoreError"),
}  # fmt: skip
"""The module of each name, imported on first use (``k8s`` needs no scheduler)."""
_WHERE = {name: module for module, names in _MODULE.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


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
