"""Schema/1's limits and :class:`SchemaError`, the stable error that reports breaking them.

Every part of the dialect (its checks at compile time, its evaluation under the work
meter) refuses with the codes named here, so that every host gives the same verdict.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

MAX_SCHEMA_BYTES: Final = 262_144
MAX_SCHEMA_DEPTH: Final = 64
MAX_SCHEMA_NODES: Final = 4_096
MAX_WORK_UNITS: Final = 1_000_000

MAX_REFERENCE_DEPTH: Final = 128
"""flow-runner's bound on a schema's depth with every ``$ref`` expanded in place.

Schema/1 bounds structural depth (64) and meters work, but a chain of definitions that
each refer to the next is as deep as the chain is long, and evaluation recurses that
deep. This bound keeps it well inside Python's stack; no realistic schema comes near it.
"""


SchemaErrorCode = Literal[
    "SCHEMA_INVALID_JSON",
    "SCHEMA_INVALID",
    "SCHEMA_KEYWORD_UNSUPPORTED",
    "SCHEMA_REFERENCE_INVALID",
    "SCHEMA_LIMIT_EXCEEDED",
]


class SchemaError(ValueError):
    """A schema Schema/1 refuses, or an instance whose validation exceeds the work meter.

    ``pointer`` is the RFC 6901 pointer of the offending place in the schema's document
    (for a contract, the descriptor).
    """

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
