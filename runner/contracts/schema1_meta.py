"""The shipped meta-schemas of Schema/1 and the Contract/1 kinds, and the dialect's shape.

A document is judged against them here, in one pass (:func:`meta_violation`): the
meta-schemas use a small part of JSON Schema 2020-12, and every keyword of it is read below
(:data:`_KEYWORDS`; a shipped meta-schema using another fails at import). Only a document
found wanting is handed to ``jsonschema``, imported then, for its report: ``jsonschema``
and what it loads (attrs, referencing, its own meta-schemas) cost a cold ``exec`` ~55 ms,
a sixth of it, to learn that a valid package is valid. The two verdicts agree
(``tests/test_schema1_meta.py`` holds them together on every shipped example and on
mutations of them); where they did not, ``jsonschema``'s acceptance would stand.

``pattern`` has ECMA-262 semantics on both paths: Python's ``$`` also matches before a
trailing newline, which would admit ``"get\\n"`` as a LocalName.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, TypeVar

from runner import json1
from runner.json1 import JSONValue, json_pointer, pointer_segment

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

T = TypeVar("T")

SCHEMA_1_URI: Final = "https://flow.jig.md/schemas/schema-1.json"
"""The ``$schema`` a Schema/1 file declares at its root (and the meta-schema's ``$id``)."""

EMBEDDED_SCHEMA_URI: Final = f"{SCHEMA_1_URI}#/$defs/schema"
"""The meta-schema of one embedded schema (a contract's method, error or definition)."""

MAX_MESSAGE: Final = 500
"""Characters of a violation's message kept: jsonschema's quote the instance, whole."""

SUBSCHEMA: Final = frozenset(
    {"not", "if", "then", "else", "additionalProperties", "items", "contains"}
)
SUBSCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
SUBSCHEMA_MAPS: Final = frozenset({"properties", "dependentSchemas"})
"""Keywords whose value is one schema, a list of schemas, or a map of names to schemas."""

_SHIPPED: Final = (
    "schema-1.json",
    "capability-contract-1.schema.json",
    "channel-contract-1.schema.json",
)


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
    base, _, fragment = schema_uri.partition("#")
    if _evaluate(instance, _resolve(_DOCUMENTS[base], fragment), base) is not None:
        return None
    from jsonschema.exceptions import best_match

    error = best_match(_meta_validator(schema_uri).iter_errors(instance))
    if error is None:
        return None
    message = error.message  # it may quote the whole instance
    if len(message) > MAX_MESSAGE:
        message = f"{message[:MAX_MESSAGE]}... (cut at {MAX_MESSAGE} characters)"
    return json_pointer(error.absolute_path), message


def _shipped_schema(name: str) -> dict[str, JSONValue]:
    """A meta-schema shipped in ``runner/contracts/schemas/`` (a spec copy)."""
    data = (resources.files(__package__) / "schemas" / name).read_bytes()
    document = json1.loads(data)
    assert isinstance(document, dict), f"shipped schema {name} is not an object"
    return document


_DOCUMENTS: Final = {str(document["$id"]): document for document in map(_shipped_schema, _SHIPPED)}
"""The shipped meta-schemas by ``$id``."""


def _keywords() -> frozenset[str]:
    """Every keyword ``schema-1.json`` admits: its root's own and its keyword object's."""
    meta = _DOCUMENTS[SCHEMA_1_URI]
    root, defs = meta["properties"], meta["$defs"]
    assert isinstance(root, dict) and isinstance(defs, dict)
    keyword_object = defs["keyword-object"]
    assert isinstance(keyword_object, dict) and isinstance(keyword_object["properties"], dict)
    return frozenset(root) | frozenset(keyword_object["properties"])


KEYWORDS: Final = _keywords()
"""The complete Schema/1 keyword allow-list, read from the shipped ``schema-1.json``;
anything else is refused at every depth."""


# --- the verdict -----------------------------------------------------------------------

_Evaluated = frozenset[str]
"""The member names of an object instance its schema evaluated (2020-12 annotations, what
``unevaluatedProperties`` is left); empty for other instances. ``None``: invalid."""

_NONE: Final[_Evaluated] = frozenset()

_TYPES: Final[dict[str, Callable[[object], bool]]] = {
    "null": lambda value: value is None,
    "boolean": lambda value: isinstance(value, bool),
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "number": lambda value: isinstance(value, int | float) and not isinstance(value, bool),
    "integer": lambda value: (
        (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, float) and value.is_integer())
    ),
}

_ANNOTATIONS: Final = frozenset(
    {"$schema", "$id", "$defs", "$comment", "title", "description", "examples", "default"}
)
_KEYWORDS: Final = _ANNOTATIONS | frozenset(
    {
        "$ref", "type", "const", "enum", "allOf", "anyOf", "oneOf", "not", "if", "then",
        "else", "properties", "additionalProperties", "unevaluatedProperties",
        "propertyNames", "required", "minProperties", "maxProperties", "items", "minItems",
        "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "minimum",
    }
)  # fmt: skip
"""What :func:`_evaluate` reads; a shipped meta-schema with another keyword fails below."""


def _resolve(document: JSONValue, fragment: str) -> JSONValue:
    """The schema at JSON pointer ``fragment`` in ``document``."""
    node = document
    for segment in fragment.split("/")[1:]:
        assert isinstance(node, dict), f"#{fragment} in a shipped meta-schema"
        node = node[segment.replace("~1", "/").replace("~0", "~")]
    return node


def _same(a: JSONValue, b: JSONValue) -> bool:
    """JSON equality: ``1`` is ``1.0``, ``true`` is not ``1``, members in any order."""
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return type(a) is type(b) and json1.canonical(a) == json1.canonical(b)
    return isinstance(a, bool) is isinstance(b, bool) and a == b


def _unique(items: list[JSONValue]) -> bool:
    """No two items equal as JSON: linear, by canonical bytes."""
    seen = {json1.canonical(item) for item in items}
    return len(seen) == len(items)


def _evaluate(instance: JSONValue, schema: Any, base: str) -> _Evaluated | None:
    """``instance`` against ``schema`` (a shipped meta-schema's, so trusted) of the document
    ``base``: the names it evaluated (valid) or ``None`` (invalid). One pass, each
    subschema once per instance position, so ``unevaluatedProperties`` takes no second."""
    if isinstance(schema, bool):
        return _NONE if schema else None
    evaluated: set[str] = set()
    if "$ref" in schema:
        found = _evaluate(instance, _resolve(_DOCUMENTS[base], schema["$ref"][1:]), base)
        if found is None:
            return None
        evaluated |= found
    for keyword in ("allOf", "anyOf", "oneOf"):
        if keyword in schema:
            branches = schema[keyword]
            valid = [f for b in branches if (f := _evaluate(instance, b, base)) is not None]
            least = len(branches) if keyword == "allOf" else 1
            if len(valid) < least or (keyword == "oneOf" and len(valid) > 1):
                return None
            evaluated.update(*valid)
    if "not" in schema and _evaluate(instance, schema["not"], base) is not None:
        return None
    if "if" in schema:
        condition = _evaluate(instance, schema["if"], base)
        found = _evaluate(
            instance, schema.get("then" if condition is not None else "else", True), base
        )
        if found is None:
            return None
        evaluated |= found | (condition or _NONE)
    if not _scalar_keywords(instance, schema):
        return None
    if isinstance(instance, dict) and not _object(instance, schema, base, evaluated):
        return None
    if isinstance(instance, list) and not _array(instance, schema, base):
        return None
    return frozenset(evaluated)


def _scalar_keywords(instance: JSONValue, schema: Any) -> bool:
    """``type``, ``const``, ``enum`` and the string and number keywords."""
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[kind](instance) for kind in kinds):
            return False
    if "const" in schema and not _same(instance, schema["const"]):
        return False
    if "enum" in schema and not any(_same(instance, option) for option in schema["enum"]):
        return False
    if isinstance(instance, str):
        pattern = schema.get("pattern")
        return _within(len(instance), schema, "minLength", "maxLength") and (  # code points
            pattern is None or _ecma_regex(pattern).search(instance) is not None
        )
    if isinstance(instance, int | float) and not isinstance(instance, bool):
        return "minimum" not in schema or instance >= schema["minimum"]
    return True


def _object(instance: dict[str, JSONValue], schema: Any, base: str, evaluated: set[str]) -> bool:
    """The object keywords; ``evaluated`` grows by the names they evaluate."""
    if any(name not in instance for name in schema.get("required", ())):
        return False
    if not _within(len(instance), schema, "minProperties", "maxProperties"):
        return False
    names = schema.get("propertyNames", True)
    if any(_evaluate(name, names, base) is None for name in instance):
        return False
    properties = schema.get("properties", {})
    for name, value in instance.items():
        subschema = properties.get(name, schema.get("additionalProperties"))
        if subschema is not None:
            if _evaluate(value, subschema, base) is None:
                return False
            evaluated.add(name)
    if "unevaluatedProperties" in schema:
        rest = schema["unevaluatedProperties"]
        left = [value for name, value in instance.items() if name not in evaluated]
        if any(_evaluate(value, rest, base) is None for value in left):
            return False
        evaluated.update(instance)
    return True


def _array(instance: list[JSONValue], schema: Any, base: str) -> bool:
    """The array keywords."""
    if not _within(len(instance), schema, "minItems", "maxItems"):
        return False
    if schema.get("uniqueItems") is True and not _unique(instance):
        return False
    items = schema.get("items", True)
    return all(_evaluate(item, items, base) is not None for item in instance)


def _within(size: int, schema: Any, low: str, high: str) -> bool:
    return bool(schema.get(low, 0) <= size) and (high not in schema or size <= schema[high])


def _unknown_keywords(schema: JSONValue) -> Iterator[str]:
    """Keywords of a shipped meta-schema that :func:`_evaluate` does not read."""
    if not isinstance(schema, dict):
        return
    yield from set(schema) - _KEYWORDS
    for key, value in schema.items():
        if key in ("properties", "$defs"):
            assert isinstance(value, dict)
            for child in value.values():
                yield from _unknown_keywords(child)
        elif key in ("allOf", "anyOf", "oneOf"):
            assert isinstance(value, list)
            for child in value:
                yield from _unknown_keywords(child)
        elif key not in ("const", "enum", "required", "type") and key not in _ANNOTATIONS:
            yield from _unknown_keywords(value)


for _document in _DOCUMENTS.values():
    _unread = sorted(_unknown_keywords(_document))
    assert not _unread, f"{_document['$id']}: keywords the meta-schema check lacks: {_unread}"


# --- the report, by jsonschema -----------------------------------------------------------


@cache
def _meta_validator(schema_uri: str) -> Validator:
    """jsonschema's validator of ``schema_uri``: Draft 2020-12 with ECMA ``pattern``, the
    shipped meta-schemas registered without ``$schema`` (one would switch ``jsonschema``
    to its stock class, dropping the ECMA ``pattern``)."""
    from jsonschema import Draft202012Validator, validators
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    registry: Registry[Any] = Registry().with_resources(
        (uri, DRAFT202012.create_resource({k: v for k, v in doc.items() if k != "$schema"}))
        for uri, doc in _DOCUMENTS.items()
    )
    # jsonschema.validators.extend carries no annotations
    validator_class = validators.extend(Draft202012Validator, {"pattern": _ecma_pattern})  # type: ignore[no-untyped-call]
    return validator_class({"$ref": schema_uri}, registry=registry)  # type: ignore[no-any-return]


def _ecma_pattern(
    validator: Validator, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """The ``pattern`` keyword with ECMA-262 regular-expression semantics."""
    from jsonschema import ValidationError

    if isinstance(instance, str) and _ecma_regex(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_ECMA_TOKEN: Final = re.compile(r"\\.|\[(?:\\.|[^\]\\])*\]|\$", re.DOTALL)
"""An escape, a character class, or a ``$`` outside both."""


@cache
def _ecma_regex(pattern: str) -> re.Pattern[str]:
    """Compile an ECMA-262 pattern: ``$`` outside a class is the end of input (``\\Z``);
    the rest of what the shipped meta-schemas use means the same in Python."""
    return re.compile(_ECMA_TOKEN.sub(lambda m: r"\Z" if m[0] == "$" else m[0], pattern))
