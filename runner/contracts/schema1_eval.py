"""Schema/1 evaluation: compiled schema nodes and the first violation under the work meter.

Not ``jsonschema``: it does not memoise (``allOf`` of two references, forty definitions
deep, costs 2^40 steps), and the spec charges every keyword before a value may be called
invalid. Here each distinct (definition, instance path) pair is evaluated once.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from runner.contracts.meter import Unfinished
from runner.contracts.schema1_errors import (
    MAX_REFERENCE_DEPTH,
    MAX_WORK_UNITS,
    SchemaError,
    show,
)
from runner.contracts.schema1_meta import map_subschemas
from runner.json1 import JSONValue, json_pointer, pointer_segment

_NUMBER_BOUNDS: Final[tuple[tuple[str, Callable[[float, float], bool], str], ...]] = (
    ("minimum", operator.ge, "at least"),
    ("exclusiveMinimum", operator.gt, "greater than"),
    ("maximum", operator.le, "at most"),
    ("exclusiveMaximum", operator.lt, "less than"),
)


class SchemaViolation(NamedTuple):
    """The first reason an instance fails its schema (Schema/1 diagnostic fields)."""

    instance_pointer: str
    schema_pointer: str
    keyword: str | None
    """The failing keyword; ``None`` when the schema at ``schema_pointer`` is ``false``."""
    message: str


class Schema1Validator:
    """Validates instances against one compiled schema (from ``runner.contracts.schema1``),
    under the Schema/1 work meter."""

    def __init__(self, root: Node) -> None:
        self._root = root

    def first_error(
        self, instance: JSONValue, units: int = MAX_WORK_UNITS
    ) -> SchemaViolation | None:
        """The first violation, or ``None``; raises :class:`SchemaError` past 1,000,000 work
        units (neither valid nor invalid), :class:`Unfinished` once fewer ``units`` are spent."""
        failure = Evaluation(units).evaluate(self._root, instance, ())
        if failure is None:
            return None
        path, schema_pointer, keyword, message = failure
        return SchemaViolation(json_pointer(path), schema_pointer, keyword, message)


@dataclass(slots=True, eq=False)
class Node:
    """One schema of a graph with its subschemas compiled and its ``$ref`` linked."""

    schema: Any
    pointer: str
    memo: bool
    """A definition: reachable from many places, so its results are memoised."""
    children: dict[str, Any] = field(default_factory=dict)
    """Keyword -> node, list of nodes or name -> node map."""
    ref: Node | None = None
    height: int = 0
    """Depth with references expanded; set for definitions once computed."""


def compile_node(schema: Any, pointer: str, referring: list[Node], *, memo: bool = False) -> Node:
    node = Node(schema, pointer, memo)
    if isinstance(schema, dict):
        if "$ref" in schema:
            referring.append(node)
        node.children = map_subschemas(
            schema, lambda child, at: compile_node(child, pointer + at, referring)
        )
    return node


def bound_expanded_depth(node: Node) -> None:
    node.height = _height(node)
    if node.height > MAX_REFERENCE_DEPTH:
        raise SchemaError(
            "SCHEMA_LIMIT_EXCEEDED",
            node.pointer,
            f"with its references expanded this schema nests {node.height} deep; flow-runner "
            f"evaluates at most {MAX_REFERENCE_DEPTH}: shorten the chains of $ref",
        )


def _height(node: Node) -> int:
    deepest = node.ref.height if node.ref is not None else 0
    for value in node.children.values():  # a node, a list of nodes or a map of them
        children = [value] if isinstance(value, Node) else value
        for child in children if isinstance(children, list) else children.values():
            deepest = max(deepest, _height(child))
    return deepest + 1


Path = tuple[str | int, ...]
_Failure = tuple[Path, str, str | None, str]  # instance path, schema pointer, keyword, message


class Evaluation:
    """One instance's evaluation: the work meter and the memo of definition results."""

    def __init__(self, limit: int = MAX_WORK_UNITS) -> None:
        self.units = 0
        self.limit = min(limit, MAX_WORK_UNITS)
        self.memo: dict[tuple[int, Path], _Failure | None] = {}

    def charge(self, units: int, node: Node, path: Path) -> None:
        self.units += units
        if self.units <= self.limit:
            return
        if self.limit < MAX_WORK_UNITS:
            raise Unfinished(self.limit)
        raise SchemaError(
            "SCHEMA_LIMIT_EXCEEDED",
            node.pointer,
            f"validating the value at {json_pointer(path) or 'the root'} needs more than "
            f"{MAX_WORK_UNITS:,} work units; send a smaller value or simplify the schema",
        )

    def evaluate(self, node: Node, value: Any, path: Path) -> _Failure | None:
        if not node.memo:
            self.charge(1, node, path)
            return self.keywords(node, value, path)
        key = (id(node), path)
        if key not in self.memo:
            self.charge(1, node, path)
            self.memo[key] = self.keywords(node, value, path)
        return self.memo[key]

    def keywords(self, node: Node, value: Any, path: Path) -> _Failure | None:
        """The first failure of any keyword; nothing short-circuits, since the meter charges
        every branch."""
        schema = node.schema
        if schema is True:
            return None
        if schema is False:
            return (path, node.pointer, None, "no value is allowed here (the schema is false)")
        first = self.generic(node, value, path)
        if isinstance(value, dict):
            first = _first(first, self.object(node, value, path))
        elif isinstance(value, list):
            first = _first(first, self.array(node, value, path))
        elif isinstance(value, str):
            first = _first(first, self.string(node, value, path))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            first = _first(first, self.number(node, value, path))
        return _first(first, self.applicators(node, value, path))

    def generic(self, node: Node, value: Any, path: Path) -> _Failure | None:
        schema, first = node.schema, None
        if "type" in schema:
            names = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
            self.charge(len(names), node, path)
            if not any(_has_type(value, name) for name in names):
                expected = " or ".join(names)
                first = _failure(path, node, "type", f"expected {expected}, found {_kind(value)}")
        if "const" in schema:
            self.charge(1, node, path)
            if first is None and not _same(value, schema["const"]):
                first = _failure(path, node, "const", f"must be {show(schema['const'])}")
        if "enum" in schema:
            members = schema["enum"]
            self.charge(len(members), node, path)
            if first is None and not any(_same(value, member) for member in members):
                first = _failure(path, node, "enum", f"must be one of {show(members)}")
        return first

    def object(self, node: Node, value: dict[str, Any], path: Path) -> _Failure | None:
        schema, children, first = node.schema, node.children, None
        declared: dict[str, Node] = children.get("properties", {})
        if "properties" in schema:
            self.charge(len(declared), node, path)
            for name, child in declared.items():
                if name in value:
                    first = _first(first, self.evaluate(child, value[name], (*path, name)))
        if "additionalProperties" in children:
            child = children["additionalProperties"]
            self.charge(len(value), node, path)
            for name, member in value.items():
                if name in declared:
                    continue
                failure = self.evaluate(child, member, (*path, name))
                if failure is not None and child.schema is False:
                    message = f"member {name!r} is not allowed"
                    failure = _failure((*path, name), node, "additionalProperties", message)
                first = first or failure
        if "required" in schema:
            self.charge(len(schema["required"]), node, path)
            missing = [name for name in schema["required"] if name not in value]
            if first is None and missing:
                first = _failure(path, node, "required", f"missing required member {missing[0]!r}")
        first = _first(first, self.bounds(node, path, len(value), "Properties", "members"))
        for trigger, names in schema.get("dependentRequired", {}).items():
            self.charge(1, node, path)
            if trigger in value:
                self.charge(len(names), node, path)
                missing = [name for name in names if name not in value]
                if first is None and missing:
                    message = f"member {trigger!r} requires member {missing[0]!r}"
                    at = f"/{pointer_segment(trigger)}"
                    first = _failure(path, node, "dependentRequired", message, at)
        for trigger, child in children.get("dependentSchemas", {}).items():
            self.charge(1, node, path)
            if trigger in value:
                first = _first(first, self.evaluate(child, value, path))
        return first

    def array(self, node: Node, value: list[Any], path: Path) -> _Failure | None:
        schema, children, first = node.schema, node.children, None
        prefix: list[Node] = children.get("prefixItems", [])
        if prefix:
            self.charge(len(prefix), node, path)
            for index, (child, item) in enumerate(zip(prefix, value, strict=False)):
                first = _first(first, self.evaluate(child, item, (*path, index)))
        if "items" in children:
            self.charge(1, node, path)
            for index in range(len(prefix), len(value)):
                first = _first(
                    first, self.evaluate(children["items"], value[index], (*path, index))
                )
        if "contains" in children:
            self.charge(len(value), node, path)
            matches = 0
            for index, item in enumerate(value):
                if self.evaluate(children["contains"], item, (*path, index)) is None:
                    matches += 1
            least, most = schema.get("minContains", 1), schema.get("maxContains")
            self.charge(("minContains" in schema) + ("maxContains" in schema), node, path)
            if first is None and matches < least:
                message = f"{matches} items match 'contains'; at least {least} must"
                first = _failure(path, node, "contains", message)
            elif first is None and most is not None and matches > most:
                message = f"{matches} items match 'contains'; at most {most} may"
                first = _failure(path, node, "maxContains", message)
        return _first(first, self.bounds(node, path, len(value), "Items", "items"))

    def string(self, node: Node, value: str, path: Path) -> _Failure | None:
        schema = node.schema
        if "minLength" not in schema and "maxLength" not in schema:
            return None
        self.charge(len(value), node, path)
        return self.bounds(node, path, len(value), "Length", "characters")

    def number(self, node: Node, value: float, path: Path) -> _Failure | None:
        schema, first = node.schema, None
        for keyword, holds, relation in _NUMBER_BOUNDS:
            if keyword in schema:
                self.charge(1, node, path)
                if first is None and not holds(value, schema[keyword]):
                    message = f"{show(value)} is not {relation} {show(schema[keyword])}"
                    first = _failure(path, node, keyword, message)
        return first

    def bounds(self, node: Node, path: Path, size: int, name: str, unit: str) -> _Failure | None:
        """The size keywords ``min<name>`` and ``max<name>``: charge 1 each and compare ``size``."""
        first = None
        for keyword, relation in ((f"min{name}", "at least"), (f"max{name}", "at most")):
            if keyword in node.schema:
                self.charge(1, node, path)
                limit = node.schema[keyword]
                if first is None and (size < limit if relation == "at least" else size > limit):
                    message = f"has {size} {unit}; {relation} {limit} allowed"
                    first = _failure(path, node, keyword, message)
        return first

    def applicators(self, node: Node, value: Any, path: Path) -> _Failure | None:
        children, first = node.children, None
        if node.ref is not None:
            self.charge(1, node, path)
            first = self.evaluate(node.ref, value, path)
        for child in children.get("allOf", []):
            self.charge(1, node, path)
            first = _first(first, self.evaluate(child, value, path))
        for keyword in ("anyOf", "oneOf"):
            if keyword in children:
                branches = children[keyword]
                self.charge(len(branches), node, path)
                valid = [
                    i
                    for i, child in enumerate(branches)
                    if self.evaluate(child, value, path) is None
                ]
                if first is None and (not valid if keyword == "anyOf" else len(valid) != 1):
                    which = f"alternatives {valid}" if valid else "none of the alternatives"
                    needed = "one" if keyword == "anyOf" else "exactly one"
                    message = f"matches {which} in {keyword}; {needed} must match"
                    first = _failure(path, node, keyword, message)
        if "not" in children:
            self.charge(1, node, path)
            if self.evaluate(children["not"], value, path) is None and first is None:
                message = "matches the schema under 'not', which it must not"
                first = _failure(path, node, "not", message)
        if "if" in children:
            self.charge(1, node, path)
            branch = "then" if self.evaluate(children["if"], value, path) is None else "else"
            if branch in children:
                self.charge(1, node, path)
                first = _first(first, self.evaluate(children[branch], value, path))
        return first


def _failure(path: Path, node: Node, keyword: str, message: str, at: str = "") -> _Failure:
    """A failure of ``node``'s ``keyword`` (``at``: a member of the keyword's value)."""
    return (path, f"{node.pointer}/{keyword}{at}", keyword, message)


def _first(first: _Failure | None, failure: _Failure | None) -> _Failure | None:
    """The earlier of two failures; both were computed, so every branch was charged."""
    return first if first is not None else failure


def _has_type(value: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    kinds: dict[str, type | tuple[type, ...]] = {
        "null": type(None), "boolean": bool, "string": str, "array": list, "object": dict,
    }  # fmt: skip
    return isinstance(value, kinds[name])


def _same(value: Any, scalar: Any) -> bool:
    """JSON/1 equality of a value and a ``const``/``enum`` scalar (``1 == 1.0``, ``true != 1``)."""
    if isinstance(scalar, int | float) and not isinstance(scalar, bool):
        return _has_type(value, "number") and bool(value == scalar)
    return type(value) is type(scalar) and bool(value == scalar)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "an integer"
    names = {float: "a number", str: "a string", list: "an array", dict: "an object"}
    return names.get(type(value), "null")
