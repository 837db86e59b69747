"""FLOW Schema/1 (PROTOCOL.md §15.3): the closed, bounded JSON Schema dialect of packages
and contracts, cut down and limited so every host gives every schema and instance the
same verdict at a bounded cost.

Compile time is here: :class:`Schema1Graph` refuses a schema before any code runs, with a
stable :class:`SchemaError` code (``SCHEMA_KEYWORD_UNSUPPORTED``, ``SCHEMA_REFERENCE_INVALID``,
``SCHEMA_LIMIT_EXCEEDED``, or ``SCHEMA_INVALID`` for what the shipped meta-schema rejects).
Validation under the work meter is :mod:`runner.contracts.schema1_eval`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from runner import json1
from runner.contracts.schema1_errors import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_NODES,
    SchemaError,
    SchemaErrorCode,
    show,
)
from runner.contracts.schema1_eval import (
    Node,
    Schema1Validator,
    bound_expanded_depth,
    compile_node,
)
from runner.contracts.schema1_meta import (
    EMBEDDED_SCHEMA_URI,
    KEYWORDS,
    SCHEMA_1_URI,
    map_subschemas,
    meta_violation,
)
from runner.json1 import JSONValue, pointer_segment

__all__ = [
    "KEYWORDS",
    "SCHEMA_1_URI",
    "Schema1Graph",
    "Schema1Validator",
    "SchemaError",
    "SchemaErrorCode",
    "compile_schema1",
    "compile_schema1_file",
    "meta_violation",
]

_REF: Final = re.compile(r"#/\$defs/([A-Za-z][A-Za-z0-9]{0,63})")
_DEFINITION_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")


def compile_schema1(
    schema: JSONValue, *, defs: Mapping[str, JSONValue] | None = None
) -> Schema1Validator:
    """The validator of ``schema``; a :class:`SchemaError` unless it is valid Schema/1: a
    file (declaring ``$schema``, its own ``$defs``), or with ``defs`` an embedded schema."""
    return Schema1Graph({"": schema}, defs).validator("")


def compile_schema1_file(data: bytes) -> Schema1Validator:
    """The validator of a Schema/1 file's bytes (``input.schema.json`` and the like)."""
    if len(data) > MAX_SCHEMA_BYTES:
        too_large = (
            f"the file is {len(data):,} bytes; a Schema/1 file has at most {MAX_SCHEMA_BYTES:,}"
        )
        raise SchemaError("SCHEMA_LIMIT_EXCEEDED", "", too_large)
    try:
        document = json1.loads(data)
    except json1.JSON1Error as exc:
        raise SchemaError("SCHEMA_INVALID_JSON", exc.pointer or "", str(exc)) from None
    return compile_schema1(document)


class Schema1Graph:
    """Schemas that share one definition map, checked and compiled together, so that the
    node, depth and acyclic-reference limits hold for the whole graph (an interface cannot
    evade them by spreading over many methods). ``roots``: JSON pointer -> schema;
    ``defs`` as for :func:`compile_schema1`."""

    def __init__(
        self, roots: Mapping[str, JSONValue], defs: Mapping[str, JSONValue] | None = None
    ) -> None:
        file_mode = defs is None
        if defs is None:
            defs = _file_definitions(roots[""])
        checker = _Checker(defs)
        for pointer, schema in roots.items():
            checker.walk(schema, pointer, 1, None, file_root=file_mode)
        checker.definitions(defs, depth=2 if file_mode else 1)
        order = checker.topological_order()
        referring: list[Node] = []
        definitions = {
            name: compile_node(schema, _definition_pointer(name), referring, memo=True)
            for name, schema in defs.items()
        }
        self._roots = {
            pointer: compile_node(schema, pointer, referring) for pointer, schema in roots.items()
        }
        for node in referring:  # each $ref was checked to be exactly #/$defs/<name>
            node.ref = definitions[node.schema["$ref"].removeprefix("#/$defs/")]
        for name in order:  # every definition after the ones it refers to
            bound_expanded_depth(definitions[name])
        for root in self._roots.values():
            bound_expanded_depth(root)

    def validator(self, pointer: str) -> Schema1Validator:
        """The validator of the root schema at ``pointer``."""
        return Schema1Validator(self._roots[pointer])


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
                f"a schema is an object or a boolean, not {show(schema)}",
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
        map_subschemas(
            schema,
            lambda child, at: self.walk(child, pointer + at, depth + 1, owner, file_root=False),
        )

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
                f"not {show(ref)}",
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


def _definition_pointer(name: str) -> str:
    return f"/$defs/{pointer_segment(name)}"


def _check_shape(schema: dict[str, Any], pointer: str, *, file_root: bool) -> None:
    """One schema node's keyword values against ``schema-1.json`` (``SCHEMA_INVALID``), its
    subschemas replaced by ``true``: each is checked as a node of its own, and left in place
    they make the meta-schema's ``unevaluatedProperties`` cost time exponential in depth."""
    shallow = {**schema, **map_subschemas(schema, lambda _child, _at: True)}
    if isinstance(schema.get("$defs"), dict):
        shallow["$defs"] = dict.fromkeys(schema["$defs"], True)
    found = meta_violation(shallow, SCHEMA_1_URI if file_root else EMBEDDED_SCHEMA_URI)
    if found is not None:
        where, message = found
        raise SchemaError(
            "SCHEMA_INVALID",
            pointer + where,
            f"{message} (each keyword takes the value shape JSON Schema 2020-12 gives it; "
            "const and enum take scalars only)",
        )
