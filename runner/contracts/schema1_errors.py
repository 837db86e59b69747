"""Schema/1's limits and :class:`SchemaError`: every part of the dialect refuses with
these codes, so that every host gives the same verdict.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

MAX_SCHEMA_BYTES: Final = 262_144
MAX_SCHEMA_DEPTH: Final = 64
MAX_SCHEMA_NODES: Final = 4_096
MAX_WORK_UNITS: Final = 1_000_000

MAX_REFERENCE_DEPTH: Final = 128
"""flow-runner's bound on a schema's depth with every ``$ref`` expanded: a chain of
definitions is as deep as it is long and evaluation recurses that deep, so this keeps it
inside Python's stack."""


SchemaErrorCode = Literal[
    "SCHEMA_INVALID_JSON",
    "SCHEMA_INVALID",
    "SCHEMA_KEYWORD_UNSUPPORTED",
    "SCHEMA_REFERENCE_INVALID",
    "SCHEMA_LIMIT_EXCEEDED",
]


class SchemaError(ValueError):
    """A schema Schema/1 refuses, or an instance whose validation exceeds the work meter;
    ``pointer`` is the offending place in the schema's document (a contract's descriptor)."""

    def __init__(self, code: SchemaErrorCode, pointer: str, message: str) -> None:
        super().__init__(code, pointer, message)
        self.code: SchemaErrorCode = code
        self.pointer = pointer
        self.message = message

    def __str__(self) -> str:
        return f"{self.code} at {self.pointer or 'the root'}: {self.message}"


def show(value: Any) -> str:
    """A short JSON rendering of a value for a message."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
