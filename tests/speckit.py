"""The machine-readable spec data the tests read, from the repository's own ``spec/``.

The repository stands alone: ``spec/`` holds copies of the Run/1 message schema, the
error registry and the conformance corpus's wire vectors, and the runner ships the
Schema/1 and contract meta-schemas as package data. ``tests/test_spec_drift.py`` compares
every copy with the upstream files (``../shared``) where those exist.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec"
SHIPPED_SCHEMAS = ROOT / "runner" / "contracts" / "schemas"

COPIES: dict[Path, str] = {
    SPEC / "run-1.schema.json": "spec/run-1.schema.json",
    SPEC / "run-1-errors.json": "spec/run-1-errors.json",
    SPEC / "conformance" / "framing.json": "conformance/fixtures/framing.json",
    SPEC / "conformance" / "messages.json": "conformance/fixtures/messages.json",
    SHIPPED_SCHEMAS / "schema-1.json": "spec/schema-1.json",
    SHIPPED_SCHEMAS / "capability-contract-1.schema.json": "spec/capability-contract-1.schema.json",
    SHIPPED_SCHEMAS / "channel-contract-1.schema.json": "spec/channel-contract-1.schema.json",
}
"""Each data file in this repository -> where its upstream original lies in ``../shared``."""


def load_spec(relative: str) -> Any:
    """A JSON file under ``spec/``, decoded."""
    return json.loads((SPEC / relative).read_text(encoding="utf-8"))
