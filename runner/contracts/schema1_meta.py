"""The shipped meta-schemas of Schema/1 and the Contract/1 kinds, and the dialect's shape.

``jsonschema`` checks a document against them with ECMA-262 ``pattern`` semantics:
Python's ``$`` also matches before a trailing newline, which would admit ``"get\\n"`` as
a LocalName.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from typing import Any, Final, TypeVar

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from runner import json1
from runner.json1 import JSONValue, json_pointer, pointer_segment

T = TypeVar("T")

SCHEMA_1_URI: Final = "https://flow.jig.md/schemas/schema-1.json"
"""The ``$schema`` a Schema/1 file declares at its root (and the meta-schema's ``$id``)."""

EMBEDDED_SCHEMA_URI: Final = f"{SCHEMA_1_URI}#/$defs/schema"
"""The meta-schema of one embedded schema (a contract's method, error or definition)."""

SUBSCHEMA: Final = frozenset(
    {"not", "if", "then", "else", "additionalProperties", "items", "contains"}
)
SUBSCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
SUBSCHEMA_MAPS: Final = frozenset({"properties", "dependentSchemas"})
"""Keywords whose value is one schema, a list of schemas, or a map of names to schemas."""


def map_subschemas(
    schema: dict[str, Any], apply: Callable[[Any, str], T]
) -> dict[str, T | list[T] | dict[str, T]]:
    """Keyword -> ``apply`` of each schema-valued position under ``schema`` (given the
    position's pointer relative to ``schema``), in the shape of the keyword's value: one,
    a list or a map. Keywords whose value has the wrong shape are left out."""
    mapped: dict[str, T | list[T] | dict[str, T]] = {}
    for key, value in schema.items():
        if key in SUBSCHEMA:
            mapped[key] = apply(value, f"/{key}")
        elif key in SUBSCHEMA_LISTS and isinstance(value, list):
            mapped[key] = [apply(item, f"/{key}/{index}") for index, item in enumerate(value)]
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            mapped[key] = {
                name: apply(item, f"/{key}/{pointer_segment(name)}") for name, item in value.items()
            }
    return mapped


def meta_violation(instance: JSONValue, schema_uri: str) -> tuple[str, str] | None:
    """The first way ``instance`` breaks the shipped meta-schema ``schema_uri`` names:
    (pointer, message)."""
    error = best_match(_meta_validator(schema_uri).iter_errors(instance))
    if error is None:
        return None
    return json_pointer(error.absolute_path), error.message


def _shipped_schema(name: str) -> dict[str, JSONValue]:
    """A meta-schema shipped in ``runner/contracts/schemas/`` (a spec copy)."""
    data = (resources.files(__package__) / "schemas" / name).read_bytes()
    document = json1.loads(data)
    assert isinstance(document, dict), f"shipped schema {name} is not an object"
    return document


def _keywords() -> frozenset[str]:
    """Every keyword ``schema-1.json`` admits: its root's own and its keyword object's."""
    meta = _shipped_schema("schema-1.json")
    root, defs = meta["properties"], meta["$defs"]
    assert isinstance(root, dict) and isinstance(defs, dict)
    keyword_object = defs["keyword-object"]
    assert isinstance(keyword_object, dict) and isinstance(keyword_object["properties"], dict)
    return frozenset(root) | frozenset(keyword_object["properties"])


KEYWORDS: Final = _keywords()
"""The complete Schema/1 keyword allow-list, read from the shipped ``schema-1.json``;
anything else is refused at every depth."""


def _meta_schemas() -> tuple[type[Validator], Registry[Any]]:
    """The validator class for meta-schemas, and a registry of the shipped ones, without
    ``$schema``: one would switch ``jsonschema`` to its stock class, dropping the ECMA
    ``pattern``."""
    documents = [
        _shipped_schema("schema-1.json"),
        _shipped_schema("capability-contract-1.schema.json"),
        _shipped_schema("channel-contract-1.schema.json"),
    ]
    registry: Registry[Any] = Registry().with_resources(
        (
            str(document["$id"]),
            DRAFT202012.create_resource({k: v for k, v in document.items() if k != "$schema"}),
        )
        for document in documents
    )
    keywords = {"pattern": _ecma_pattern}
    # jsonschema.validators.extend carries no annotations
    return validators.extend(Draft202012Validator, keywords), registry  # type: ignore[no-untyped-call]


@cache
def _meta_validator(schema_uri: str) -> Validator:
    validator_class, registry = _meta_schemas()
    return validator_class({"$ref": schema_uri}, registry=registry)


def _ecma_pattern(
    validator: Validator, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """The ``pattern`` keyword with ECMA-262 regular-expression semantics."""
    if isinstance(instance, str) and _ecma_regex(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_ECMA_TOKEN: Final = re.compile(r"\\.|\[(?:\\.|[^\]\\])*\]|\$", re.DOTALL)
"""An escape, a character class, or a ``$`` outside both."""


@cache
def _ecma_regex(pattern: str) -> re.Pattern[str]:
    """Compile an ECMA-262 pattern: ``$`` outside a class is the end of input (``\\Z``);
    the rest of what the shipped meta-schemas use means the same in Python."""
    return re.compile(_ECMA_TOKEN.sub(lambda m: r"\Z" if m[0] == "$" else m[0], pattern))
