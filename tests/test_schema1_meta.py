"""The meta-schema verdict (``runner.contracts.schema1_meta``) against jsonschema's.

A valid document is judged without jsonschema, which is imported only to explain an
invalid one. The two must agree on every document: where ours said valid and jsonschema
invalid, a package breaking its meta-schema would run. They are held together here on
every Schema/1 file, schema node and contract descriptor this repository ships, on each
of those with one value swapped for another at every position, and on generated
documents built from the dialect's own keywords.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import json1
from runner.contracts import schema1_meta
from runner.contracts.schema1_meta import (
    EMBEDDED_SCHEMA_URI,
    KEYWORDS,
    SCHEMA_1_URI,
    map_subschemas,
)

ROOT = Path(__file__).resolve().parents[1]
CAPABILITY_URI = "https://flow.jig.md/schemas/capability-contract-1.schema.json"
CHANNEL_URI = "https://flow.jig.md/schemas/channel-contract-1.schema.json"
URIS = (SCHEMA_1_URI, EMBEDDED_SCHEMA_URI, CAPABILITY_URI, CHANNEL_URI)

SHIPPED = sorted(
    {*ROOT.glob("examples/**/*.schema.json"), *ROOT.glob("examples/*/contracts/*.json")}
    | {*ROOT.glob("runner/host/capabilities/contracts/*.json"), *ROOT.glob("images/*/*.json")}
)
SWAPS: tuple[Any, ...] = (
    True, False, None, 0, -1, 1.0, 2.5, "", "x", "get\n", "string", "#/$defs/a",
    [], ["string"], ["string", "string"], [1, 1.0], {}, {"type": "string"}, {"nope": 1},
)  # fmt: skip
"""Values put at each position: every JSON kind, the edges the meta-schemas draw (a
negative count, a non-integral one, a name with a trailing newline, a repeated item, an
unknown keyword)."""


def agree(document: Any, uri: str) -> None:
    """Our verdict on ``document`` against ``uri`` is jsonschema's."""
    base, _, fragment = uri.partition("#")
    ours = schema1_meta._evaluate(
        document, schema1_meta._resolve(schema1_meta._DOCUMENTS[base], fragment), base
    )
    theirs = schema1_meta._meta_validator(uri).is_valid(document)
    assert (ours is not None) == theirs, (uri, json1.dumps(document)[:400])


def shipped() -> list[tuple[str, Any]]:
    return [(path.name, json1.loads(path.read_bytes())) for path in SHIPPED]


def nodes(schema: Any) -> Iterator[Any]:
    """Every schema node under a Schema/1 document, shallow as ``_check_shape`` sends it."""
    if not isinstance(schema, dict):
        return
    shallow = {**schema, **map_subschemas(schema, lambda _child, _at: True)}
    if isinstance(schema.get("$defs"), dict):
        shallow["$defs"] = dict.fromkeys(schema["$defs"], True)
        for child in schema["$defs"].values():
            yield from nodes(child)
    yield shallow
    for child in map_subschemas(schema, lambda child, _at: child).values():
        for each in (
            child.values()
            if isinstance(child, dict)
            else child
            if isinstance(child, list)
            else [child]
        ):
            yield from nodes(each)


def swapped(document: Any) -> Iterator[Any]:
    """``document`` with one value replaced, one member added or one removed, everywhere."""
    positions: list[tuple[Any, ...]] = []

    def walk(value: Any, path: tuple[Any, ...]) -> None:
        positions.append(path)
        children = (
            value.items()
            if isinstance(value, dict)
            else enumerate(value)
            if isinstance(value, list)
            else ()
        )
        for key, child in children:
            walk(child, (*path, key))

    walk(document, ())
    for path in positions:
        for swap in SWAPS:
            yield _with(document, path, lambda _old, swap=swap: copy.deepcopy(swap))
        yield _with(
            document, path, lambda old: {**old, "extra": 1} if isinstance(old, dict) else old
        )
        if path:
            yield _with(document, path[:-1], lambda parent, key=path[-1]: _without(parent, key))


def _with(document: Any, path: tuple[Any, ...], change: Any) -> Any:
    if not path:
        return change(copy.deepcopy(document))
    changed = copy.deepcopy(document)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = change(parent[path[-1]])
    return changed


def _without(parent: Any, key: Any) -> Any:
    return (
        {k: v for k, v in parent.items() if k != key}
        if isinstance(parent, dict)
        else [item for index, item in enumerate(parent) if index != key]
    )


def test_the_corpus_is_there() -> None:
    names = {name for name, _ in shipped()}
    assert {"input.schema.json", "kv.json", "progress.json"} <= names


@pytest.mark.parametrize(
    ("name", "document"), shipped(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_shipped_document_gets_jsonschemas_verdict(name: str, document: Any) -> None:
    for uri in URIS:
        agree(document, uri)
    for node in nodes(document):
        agree(node, EMBEDDED_SCHEMA_URI)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("name", "document"), shipped(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_one_value_change_gets_jsonschemas_verdict(name: str, document: Any) -> None:
    kind = CAPABILITY_URI if "flowCapabilityContract" in document else None
    kind = CHANNEL_URI if "flowChannelContract" in document else kind
    for changed in swapped(document):
        agree(changed, kind or SCHEMA_1_URI)
        if kind is None and isinstance(changed, dict):
            agree({**changed, **map_subschemas(changed, lambda _c, _a: True)}, EMBEDDED_SCHEMA_URI)


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, 1.0, -0.0, 1e15]),
    st.sampled_from(["string", "object", "integer", "a", "#/$defs/a", "#/x", "get\n", ""]),
)  # fmt: skip
_NAMES = st.sampled_from(sorted(KEYWORDS | {"id", "version", "methods", "x", "$defs"}))
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_DOCUMENTS, uri=st.sampled_from(URIS))
def test_generated_documents_get_jsonschemas_verdict(document: Any, uri: str) -> None:
    agree(document, uri)


def test_a_violation_is_explained_by_jsonschema() -> None:
    found = schema1_meta.meta_violation({"type": "strin"}, EMBEDDED_SCHEMA_URI)
    assert found is not None and found[0] == "/type"
    assert schema1_meta.meta_violation({"type": "string"}, EMBEDDED_SCHEMA_URI) is None


def test_one_of_means_exactly_one() -> None:
    # The shipped meta-schemas' oneOf branches exclude each other, so no document above can
    # tell "exactly one" from "at least one".
    both = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert schema1_meta._evaluate(1, both, SCHEMA_1_URI) is None
    assert schema1_meta._evaluate(1.5, both, SCHEMA_1_URI) is not None


def test_a_violations_message_is_bounded() -> None:
    # maxProperties' message quotes the whole object: 20,000 methods, ~230 KB.
    contract = {"$schema": CAPABILITY_URI, "flowCapabilityContract": 1, "id": "https://a.b/c",
                "version": "1.0.0", "methods": {f"m{i}": {} for i in range(20_000)}}  # fmt: skip
    found = schema1_meta.meta_violation(contract, CAPABILITY_URI)
    assert found is not None
    assert len(found[1]) < schema1_meta.MAX_MESSAGE + 40 and found[1].endswith("characters)")
