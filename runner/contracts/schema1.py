"""FLOW Schema/1: the closed, bounded JSON Schema dialect of packages and contracts.

Schema/1 (PROTOCOL.md §15.3) is JSON Schema 2020-12 cut down to 37 keywords with hard
limits, so that every host gives every schema and every instance the same verdict at a
bounded cost. This module applies it in two steps:

* **compile time**: :class:`Schema1Graph`, :func:`check_schema1` and
  :func:`compile_schema1` refuse a schema before any code runs, with one of the stable
  codes of :class:`SchemaError`: ``SCHEMA_KEYWORD_UNSUPPORTED`` for a keyword outside the
  dialect at any depth, ``SCHEMA_REFERENCE_INVALID`` for a ``$ref`` that is not an
  existing ``#/$defs/<name>`` or that closes a cycle, ``SCHEMA_LIMIT_EXCEEDED`` for the
  depth and node limits, and ``SCHEMA_INVALID`` for everything the shipped meta-schema
  ``schema-1.json`` rejects (keyword value shapes, ``const``/``enum`` scalars only, ...);
* **validation**: :class:`Schema1Validator` evaluates an instance under the normative
  work meter (1,000,000 units; each distinct (schema, instance) pointer pair is evaluated
  once) and returns the first :class:`Violation` with its pointers.

Instances are not handed to ``jsonschema``: its evaluation is not memoised, so ``allOf``
of two references to the next definition, forty definitions deep, costs 2^40 steps, and
the spec requires the meter to be computed before a value may be called invalid.
``jsonschema`` does check each schema node's keyword values against the shipped copy of
``schema-1.json`` (one node at a time, see :func:`_check_shape`) and descriptors against
the Capability Contract/1 schema, with the ``pattern`` keyword given ECMA-262 semantics
for ``$``: Python's ``$`` also matches before a trailing newline, which would admit
``"get\\n"`` as a LocalName.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any, Final, Literal, NamedTuple

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from runner import json1
from runner.contracts.meter import Unfinished
from runner.json1 import JSONValue

SCHEMA_1_URI: Final = "https://flow.jig.md/schemas/schema-1.json"
"""The ``$schema`` a Schema/1 file declares at its root (and the meta-schema's ``$id``)."""

EMBEDDED_SCHEMA_URI: Final = f"{SCHEMA_1_URI}#/$defs/schema"
"""The meta-schema of one embedded schema (a contract's method, error or definition)."""

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

_SUBSCHEMA: Final = frozenset(
    {"not", "if", "then", "else", "additionalProperties", "items", "contains"}
)
_SUBSCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SUBSCHEMA_MAPS: Final = frozenset({"properties", "dependentSchemas"})
_NUMBER_BOUNDS: Final[tuple[tuple[str, Callable[[float, float], bool], str], ...]] = (
    ("minimum", operator.ge, "at least"),
    ("exclusiveMinimum", operator.gt, "greater than"),
    ("maximum", operator.le, "at most"),
    ("exclusiveMaximum", operator.lt, "less than"),
)
_REF: Final = re.compile(r"#/\$defs/([A-Za-z][A-Za-z0-9]{0,63})")
_DEFINITION_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")


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


class Violation(NamedTuple):
    """The first reason an instance fails its schema (Schema/1 diagnostic fields)."""

    instance_pointer: str
    schema_pointer: str
    keyword: str | None
    """The failing keyword; ``None`` when the schema at ``schema_pointer`` is ``false``."""
    message: str


def pointer_segment(name: str | int) -> str:
    """One RFC 6901 reference token."""
    return str(name).replace("~", "~0").replace("/", "~1")


def json_pointer(segments: Iterable[str | int]) -> str:
    """The RFC 6901 pointer of a path of member names and array indices."""
    return "".join(f"/{pointer_segment(segment)}" for segment in segments)


def check_schema1(schema: JSONValue, *, defs: Mapping[str, JSONValue] | None = None) -> None:
    """Refuse ``schema`` with a :class:`SchemaError` unless it is valid Schema/1.

    Without ``defs`` the schema is a Schema/1 *file*: an object declaring
    ``"$schema": SCHEMA_1_URI`` whose own root ``$defs`` is the definition map. With
    ``defs`` it is an *embedded* schema (as in a Capability Contract) that may carry neither
    ``$schema`` nor ``$defs`` and refers into ``defs``, taken to sit at ``/$defs``.
    """
    Schema1Graph({"": schema}, defs)


def compile_schema1(
    schema: JSONValue, *, defs: Mapping[str, JSONValue] | None = None
) -> Schema1Validator:
    """Check ``schema`` as :func:`check_schema1` does and return its validator."""
    return Schema1Graph({"": schema}, defs).validator("")


def compile_schema1_file(data: bytes) -> Schema1Validator:
    """The validator of a Schema/1 file's bytes (``input.schema.json`` and the like)."""
    if len(data) > MAX_SCHEMA_BYTES:
        raise SchemaError(
            "SCHEMA_LIMIT_EXCEEDED",
            "",
            f"the file is {len(data):,} bytes; a Schema/1 file has at most {MAX_SCHEMA_BYTES:,}",
        )
    try:
        document = json1.loads(data)
    except json1.JSON1Error as exc:
        raise SchemaError("SCHEMA_INVALID_JSON", exc.pointer or "", str(exc)) from None
    return compile_schema1(document)


class Schema1Graph:
    """Schemas that share one definition map, checked and compiled together.

    Schema/1's node and depth limits and its acyclic-reference rule hold for the whole
    graph, so that an interface cannot evade them by spreading over many methods.
    ``roots`` maps each schema's JSON pointer in its document to the schema; ``defs`` is
    as for :func:`check_schema1` (``None``: one root at ``""``, a Schema/1 file).
    """

    def __init__(
        self, roots: Mapping[str, JSONValue], defs: Mapping[str, JSONValue] | None = None
    ) -> None:
        file_mode = defs is None
        if defs is None:
            if list(roots) != [""]:
                raise ValueError("a Schema/1 file is a single root schema at pointer ''")
            defs = _file_definitions(roots[""])
        checker = _Checker(defs)
        for pointer, schema in roots.items():
            checker.walk(schema, pointer, 1, None, file_root=file_mode)
        checker.definitions(defs, depth=2 if file_mode else 1)
        order = checker.topological_order()
        referring: list[_Node] = []
        definitions = {
            name: _compile(schema, _definition_pointer(name), referring, memo=True)
            for name, schema in defs.items()
        }
        self._roots = {
            pointer: _compile(schema, pointer, referring) for pointer, schema in roots.items()
        }
        for node in referring:
            node.ref = definitions[_reference_name(node.schema["$ref"])]
        for name in order:  # every definition after the ones it refers to
            _bound_expanded_depth(definitions[name])
        for root in self._roots.values():
            _bound_expanded_depth(root)

    def validator(self, pointer: str) -> Schema1Validator:
        """The validator of the root schema at ``pointer``."""
        return Schema1Validator(self._roots[pointer])


class Schema1Validator:
    """Validates instances against one compiled schema, under the Schema/1 work meter.

    Obtain one from :func:`compile_schema1`, :func:`compile_schema1_file` or
    :meth:`Schema1Graph.validator`.
    """

    def __init__(self, root: _Node) -> None:
        self._root = root

    def first_error(self, instance: JSONValue, units: int = MAX_WORK_UNITS) -> Violation | None:
        """The first violation, or ``None`` when ``instance`` is valid.

        Raises :class:`SchemaError` ``SCHEMA_LIMIT_EXCEEDED`` when the evaluation needs
        more than 1,000,000 work units: the instance is then neither valid nor invalid.
        Given fewer ``units``, raises :class:`Unfinished` once they are spent: a caller
        that must not be held long (an event loop) tries a slice and, failing that,
        evaluates in full elsewhere.
        """
        failure = _Evaluation(units).evaluate(self._root, instance, ())
        if failure is None:
            return None
        path, schema_pointer, keyword, message = failure
        return Violation(json_pointer(path), schema_pointer, keyword, message)


def meta_violation(instance: JSONValue, schema_uri: str) -> tuple[str, str] | None:
    """The first way ``instance`` breaks a shipped meta-schema: (pointer, message).

    ``schema_uri`` is :data:`SCHEMA_1_URI`, :data:`EMBEDDED_SCHEMA_URI` or the
    Capability Contract/1 descriptor schema's ``$id``.
    """
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


# --- compile-time checks -----------------------------------------------------------


class _Checker:
    """One pass over a graph: closed keywords, placement, references, node and depth limits."""

    def __init__(self, defs: Mapping[str, JSONValue]) -> None:
        self.defs = defs
        self.nodes = 0
        self.references: dict[str, list[tuple[str, str]]] = {name: [] for name in defs}
        """Definition name -> (referenced definition, pointer of the ``$ref``)."""

    def walk(
        self, schema: Any, pointer: str, depth: int, owner: str | None, *, file_root: bool
    ) -> None:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise SchemaError(
                "SCHEMA_LIMIT_EXCEEDED",
                pointer,
                f"more than {MAX_SCHEMA_NODES:,} schema nodes; simplify the schema",
            )
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaError(
                "SCHEMA_LIMIT_EXCEEDED",
                pointer,
                f"schemas nest deeper than {MAX_SCHEMA_DEPTH}; move inner parts into $defs "
                "(a $ref does not add depth)",
            )
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise SchemaError(
                "SCHEMA_INVALID",
                pointer,
                f"a schema is an object or a boolean, not {_show(schema)}",
            )
        for key in schema:
            if key not in KEYWORDS:
                raise SchemaError(
                    "SCHEMA_KEYWORD_UNSUPPORTED",
                    f"{pointer}/{pointer_segment(key)}",
                    f"{key!r} is not a Schema/1 keyword; remove it (Schema/1 refuses every "
                    "keyword outside its allow-list, at any depth)",
                )
        for key in ("$schema", "$defs"):
            if key in schema and not file_root:
                raise SchemaError(
                    "SCHEMA_INVALID",
                    f"{pointer}/{key}",
                    f"{key} may appear only at the root of a Schema/1 file; nested and "
                    "embedded schemas use the root $defs of their document",
                )
        if "$ref" in schema:
            self.reference(schema["$ref"], f"{pointer}/$ref", owner)
        _check_shape(schema, pointer, file_root=file_root)
        for child, at in _subschemas(schema, pointer):
            self.walk(child, at, depth + 1, owner, file_root=False)

    def definitions(self, defs: Mapping[str, JSONValue], *, depth: int) -> None:
        for name, schema in defs.items():
            if _DEFINITION_NAME.fullmatch(name) is None:
                raise SchemaError(
                    "SCHEMA_INVALID",
                    _definition_pointer(name),
                    f"definition name {name!r} must match [A-Za-z][A-Za-z0-9]{{0,63}}",
                )
            self.walk(schema, _definition_pointer(name), depth, name, file_root=False)

    def reference(self, ref: Any, pointer: str, owner: str | None) -> None:
        match = _REF.fullmatch(ref) if isinstance(ref, str) else None
        if match is None:
            raise SchemaError(
                "SCHEMA_REFERENCE_INVALID",
                pointer,
                f"$ref must be exactly '#/$defs/<name>' (a definition of this document), "
                f"not {_show(ref)}",
            )
        name = match[1]
        if name not in self.defs:
            known = ", ".join(sorted(self.defs)) or "none"
            raise SchemaError(
                "SCHEMA_REFERENCE_INVALID",
                pointer,
                f"$ref names definition {name!r}, which $defs does not define (defined: {known})",
            )
        if owner is not None:
            self.references[owner].append((name, pointer))

    def topological_order(self) -> list[str]:
        """Definition names, each after all it refers to; refuses a reference cycle."""
        order: list[str] = []
        done: set[str] = set()
        for start in self.defs:
            if start in done:
                continue
            path = [start]
            stack = [iter(self.references[start])]
            while stack:
                for target, at in stack[-1]:
                    if target in path:
                        cycle = " -> ".join([*path[path.index(target) :], target])
                        raise SchemaError(
                            "SCHEMA_REFERENCE_INVALID",
                            at,
                            f"$ref cycle {cycle}; Schema/1 references must be acyclic",
                        )
                    if target not in done:
                        path.append(target)
                        stack.append(iter(self.references[target]))
                        break
                else:
                    stack.pop()
                    done.add(path[-1])
                    order.append(path.pop())
        return order


def _file_definitions(document: JSONValue) -> Mapping[str, JSONValue]:
    """A Schema/1 file's root ``$defs`` after the checks that must precede the walk."""
    if not isinstance(document, dict):
        raise SchemaError("SCHEMA_INVALID", "", "a Schema/1 file is a JSON object")
    if document.get("$schema") != SCHEMA_1_URI:
        raise SchemaError(
            "SCHEMA_INVALID", "/$schema", f'a Schema/1 file declares "$schema": "{SCHEMA_1_URI}"'
        )
    defs = document.get("$defs", {})
    if not isinstance(defs, dict):
        raise SchemaError("SCHEMA_INVALID", "/$defs", "$defs is an object of named schemas")
    return defs


def _subschemas(schema: dict[str, Any], pointer: str) -> Iterator[tuple[Any, str]]:
    """Each schema-valued position directly under ``schema`` (where its shape allows one)."""
    for key, value in schema.items():
        at = f"{pointer}/{key}"
        if key in _SUBSCHEMA:
            yield value, at
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            for index, item in enumerate(value):
                yield item, f"{at}/{index}"
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, item in value.items():
                yield item, f"{at}/{pointer_segment(name)}"


def _definition_pointer(name: str) -> str:
    return f"/$defs/{pointer_segment(name)}"


def _reference_name(ref: str) -> str:
    match = _REF.fullmatch(ref)
    assert match is not None, "references are checked before they are compiled"
    return match[1]


def _check_shape(schema: dict[str, Any], pointer: str, *, file_root: bool) -> None:
    """One schema node's keyword values against ``schema-1.json`` (``SCHEMA_INVALID``).

    Its subschemas are replaced by ``true``; each is checked as a node of its own. With
    them in place, ``jsonschema`` would evaluate the meta-schema's
    ``unevaluatedProperties`` again for every enclosing level: exponential in depth.
    """
    shallow = dict(schema)
    for key, value in schema.items():
        if key in _SUBSCHEMA:
            shallow[key] = True
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            shallow[key] = [True] * len(value)
        elif (key in _SUBSCHEMA_MAPS or key == "$defs") and isinstance(value, dict):
            shallow[key] = dict.fromkeys(value, True)
    found = meta_violation(shallow, SCHEMA_1_URI if file_root else EMBEDDED_SCHEMA_URI)
    if found is not None:
        where, message = found
        raise SchemaError(
            "SCHEMA_INVALID",
            pointer + where,
            f"{message} (each keyword takes the value shape JSON Schema 2020-12 gives it; "
            "const and enum take scalars only)",
        )


@cache
def _meta_schemas() -> tuple[type[Validator], Registry[Any]]:
    """The validator class for meta-schemas, and a registry of the shipped ones.

    The registry's copies lack ``$schema``: on entering a resource that declares one,
    ``jsonschema`` switches to the stock validator class of that dialect, which would
    drop the ECMA ``pattern``.
    """
    documents = [
        _shipped_schema("schema-1.json"),
        _shipped_schema("capability-contract-1.schema.json"),
        _shipped_schema("channel-contract-1.schema.json"),
    ]
    registry: Registry[Any] = Registry().with_resources(
        (str(document["$id"]), DRAFT202012.create_resource(_without_dialect(document)))
        for document in documents
    )
    keywords = {"pattern": _ecma_pattern}
    # jsonschema.validators.extend carries no annotations
    return validators.extend(Draft202012Validator, keywords), registry  # type: ignore[no-untyped-call]


@cache
def _meta_validator(schema_uri: str) -> Validator:
    validator_class, registry = _meta_schemas()
    return validator_class({"$ref": schema_uri}, registry=registry)


def _without_dialect(document: dict[str, JSONValue]) -> dict[str, JSONValue]:
    return {name: value for name, value in document.items() if name != "$schema"}


def _ecma_pattern(
    validator: Validator, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """The ``pattern`` keyword with ECMA-262 regular-expression semantics."""
    if isinstance(instance, str) and _ecma_regex(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def _ecma_regex(pattern: str) -> re.Pattern[str]:
    """Compile an ECMA-262 pattern: ``$`` outside a class is the end of input (``\\Z``).

    The shipped meta-schemas use only anchors, classes, groups, lookaheads and counted
    repetition, whose meaning is otherwise the same in Python.
    """
    out: list[str] = []
    index, in_class = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
        index += 1
    return re.compile("".join(out))


# --- compiled schemas and their evaluation ------------------------------------------


class _Node:
    """One schema of a graph with its subschemas compiled and its ``$ref`` linked."""

    __slots__ = ("children", "height", "memo", "pointer", "ref", "schema")

    def __init__(self, schema: Any, pointer: str, memo: bool) -> None:
        self.schema = schema
        self.pointer = pointer
        self.memo = memo
        """A definition: reachable from many places, so its results are memoised."""
        self.children: dict[str, Any] = {}
        """Keyword -> node, list of nodes or name -> node map."""
        self.ref: _Node | None = None
        self.height = 0
        """Depth with references expanded; set for definitions once computed."""


def _compile(schema: Any, pointer: str, referring: list[_Node], *, memo: bool = False) -> _Node:
    node = _Node(schema, pointer, memo)
    if isinstance(schema, dict):
        if "$ref" in schema:
            referring.append(node)
        for key, value in schema.items():
            at = f"{pointer}/{key}"
            if key in _SUBSCHEMA:
                node.children[key] = _compile(value, at, referring)
            elif key in _SUBSCHEMA_LISTS:
                node.children[key] = [
                    _compile(item, f"{at}/{index}", referring) for index, item in enumerate(value)
                ]
            elif key in _SUBSCHEMA_MAPS:
                node.children[key] = {
                    name: _compile(item, f"{at}/{pointer_segment(name)}", referring)
                    for name, item in value.items()
                }
    return node


def _bound_expanded_depth(node: _Node) -> None:
    node.height = _height(node)
    if node.height > MAX_REFERENCE_DEPTH:
        raise SchemaError(
            "SCHEMA_LIMIT_EXCEEDED",
            node.pointer,
            f"with its references expanded this schema nests {node.height} deep; flow-runner "
            f"evaluates at most {MAX_REFERENCE_DEPTH}: shorten the chains of $ref",
        )


def _height(node: _Node) -> int:
    deepest = node.ref.height if node.ref is not None else 0
    for child in _child_nodes(node):
        deepest = max(deepest, _height(child))
    return deepest + 1


def _child_nodes(node: _Node) -> Iterator[_Node]:
    for value in node.children.values():
        if isinstance(value, _Node):
            yield value
        elif isinstance(value, list):
            yield from value
        else:
            yield from value.values()


Path = tuple[str | int, ...]
_Failure = tuple[Path, str, str | None, str]  # instance path, schema pointer, keyword, message


class _Evaluation:
    """One instance's evaluation: the work meter and the memo of definition results."""

    def __init__(self, limit: int = MAX_WORK_UNITS) -> None:
        self.units = 0
        self.limit = min(limit, MAX_WORK_UNITS)
        self.memo: dict[tuple[int, Path], _Failure | None] = {}

    def charge(self, units: int, node: _Node, path: Path) -> None:
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

    def evaluate(self, node: _Node, value: Any, path: Path) -> _Failure | None:
        if not node.memo:
            self.charge(1, node, path)
            return self.keywords(node, value, path)
        key = (id(node), path)
        if key not in self.memo:
            self.charge(1, node, path)
            self.memo[key] = self.keywords(node, value, path)
        return self.memo[key]

    def keywords(self, node: _Node, value: Any, path: Path) -> _Failure | None:
        """Charge and evaluate every applicable keyword; return the first failure.

        Nothing short-circuits: the meter charges every branch, so every branch is walked.
        """
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

    def generic(self, node: _Node, value: Any, path: Path) -> _Failure | None:
        schema, first = node.schema, None
        if "type" in schema:
            names = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
            self.charge(len(names), node, path)
            if not any(_has_type(value, name) for name in names):
                expected = " or ".join(names)
                first = (
                    path,
                    f"{node.pointer}/type",
                    "type",
                    f"expected {expected}, found {_kind(value)}",
                )
        if "const" in schema:
            self.charge(1, node, path)
            if first is None and not _same(value, schema["const"]):
                first = (
                    path,
                    f"{node.pointer}/const",
                    "const",
                    f"must be {_show(schema['const'])}",
                )
        if "enum" in schema:
            members = schema["enum"]
            self.charge(len(members), node, path)
            if first is None and not any(_same(value, member) for member in members):
                first = (path, f"{node.pointer}/enum", "enum", f"must be one of {_show(members)}")
        return first

    def object(self, node: _Node, value: dict[str, Any], path: Path) -> _Failure | None:
        schema, children, first = node.schema, node.children, None
        declared: dict[str, _Node] = children.get("properties", {})
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
                    at = f"{node.pointer}/additionalProperties"
                    failure = (
                        (*path, name),
                        at,
                        "additionalProperties",
                        f"member {name!r} is not allowed",
                    )
                first = first or failure
        if "required" in schema:
            self.charge(len(schema["required"]), node, path)
            missing = [name for name in schema["required"] if name not in value]
            if first is None and missing:
                at = f"{node.pointer}/required"
                first = (path, at, "required", f"missing required member {missing[0]!r}")
        first = _first(first, self.bound(node, path, len(value), "minProperties", "members"))
        first = _first(first, self.bound(node, path, len(value), "maxProperties", "members"))
        for trigger, names in schema.get("dependentRequired", {}).items():
            self.charge(1, node, path)
            if trigger in value:
                self.charge(len(names), node, path)
                missing = [name for name in names if name not in value]
                if first is None and missing:
                    at = f"{node.pointer}/dependentRequired/{pointer_segment(trigger)}"
                    message = f"member {trigger!r} requires member {missing[0]!r}"
                    first = (path, at, "dependentRequired", message)
        for trigger, child in children.get("dependentSchemas", {}).items():
            self.charge(1, node, path)
            if trigger in value:
                first = _first(first, self.evaluate(child, value, path))
        return first

    def array(self, node: _Node, value: list[Any], path: Path) -> _Failure | None:
        schema, children, first = node.schema, node.children, None
        prefix: list[_Node] = children.get("prefixItems", [])
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
                at = f"{node.pointer}/contains"
                first = (
                    path,
                    at,
                    "contains",
                    f"{matches} items match 'contains'; at least {least} must",
                )
            elif first is None and most is not None and matches > most:
                at = f"{node.pointer}/maxContains"
                first = (
                    path,
                    at,
                    "maxContains",
                    f"{matches} items match 'contains'; at most {most} may",
                )
        first = _first(first, self.bound(node, path, len(value), "minItems", "items"))
        return _first(first, self.bound(node, path, len(value), "maxItems", "items"))

    def string(self, node: _Node, value: str, path: Path) -> _Failure | None:
        schema = node.schema
        if "minLength" not in schema and "maxLength" not in schema:
            return None
        self.charge(len(value), node, path)
        first = self.bound(node, path, len(value), "minLength", "characters")
        return _first(first, self.bound(node, path, len(value), "maxLength", "characters"))

    def number(self, node: _Node, value: float, path: Path) -> _Failure | None:
        schema, first = node.schema, None
        for keyword, holds, relation in _NUMBER_BOUNDS:
            if keyword in schema:
                self.charge(1, node, path)
                if first is None and not holds(value, schema[keyword]):
                    message = f"{_show(value)} is not {relation} {_show(schema[keyword])}"
                    first = (path, f"{node.pointer}/{keyword}", keyword, message)
        return first

    def bound(self, node: _Node, path: Path, size: int, keyword: str, unit: str) -> _Failure | None:
        """``min*``/``max*`` size keywords: charge 1 and compare ``size``."""
        if keyword not in node.schema:
            return None
        self.charge(1, node, path)
        limit = node.schema[keyword]
        if size < limit if keyword.startswith("min") else size > limit:
            relation = "at least" if keyword.startswith("min") else "at most"
            message = f"has {size} {unit}; {relation} {limit} allowed"
            return (path, f"{node.pointer}/{keyword}", keyword, message)
        return None

    def applicators(self, node: _Node, value: Any, path: Path) -> _Failure | None:
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
                    first = (path, f"{node.pointer}/{keyword}", keyword, message)
        if "not" in children:
            self.charge(1, node, path)
            if self.evaluate(children["not"], value, path) is None and first is None:
                message = "matches the schema under 'not', which it must not"
                first = (path, f"{node.pointer}/not", "not", message)
        if "if" in children:
            self.charge(1, node, path)
            branch = "then" if self.evaluate(children["if"], value, path) is None else "else"
            if branch in children:
                self.charge(1, node, path)
                first = _first(first, self.evaluate(children[branch], value, path))
        return first


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


def _show(value: Any) -> str:
    """A short JSON rendering of a value for a message."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
