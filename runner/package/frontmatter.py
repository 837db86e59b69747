"""``FLOW.md`` (PROTOCOL.md §14): the frontmatter split, the strict YAML subset, Metadata/1.

The frontmatter is YAML 1.2's JSON-schema subset with string keys, built from PyYAML's
*events*, never its constructors: they resolve scalars as YAML 1.1 (``yes`` is true) and
keep the last of two duplicate keys silently. Any tag, anchor, alias, merge key,
non-string or duplicate key is refused with a :class:`PackageError` naming its place.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final, Literal, cast

import yaml  # type: ignore[import-untyped,unused-ignore]

from runner import json1
from runner.contracts.schema1 import SchemaError, compile_schema1
from runner.json1 import JSONValue
from runner.package import FLOW_MD
from runner.package.errors import PackageError
from runner.protocol.names import is_local_name

MAX_FRONTMATTER_BYTES: Final = 262_144
MAX_DEPTH: Final = 16
MAX_NODES: Final = 4_096
MAX_ENTRIES: Final = 256
MAX_DESCRIPTION_SCALARS: Final = 16_384
RESERVED_OUTCOMES: Final = frozenset({"done", "failed", "cancelled", "error"})
METADATA_KEYS: Final = frozenset(
    {"name", "description", "uses", "outcomes", "attachments", "channels"}
)
PORT_KEYS: Final = frozenset({"direction", "required", "schema", "contract", "delivery", "start"})

_JSON_NUMBER: Final = re.compile(r"\A-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\Z")
_BOM: Final = b"\xef\xbb\xbf"

Access = Literal["read", "read-write"]


@dataclass(frozen=True)
class Port:
    """A channel port declaration (PROTOCOL.md §15.2); a requirement, not a grant."""

    direction: Literal["send", "receive"]
    required: bool = True
    schema: JSONValue = None
    """The inline Schema/1 item schema, or ``None`` for a generic port."""
    contract: str | None = None
    """The package-local ``./`` reference to a Channel Contract/1 descriptor."""
    delivery: Literal["direct", "broadcast"] | None = None
    start: Literal["beginning", "suffix"] | None = None


@dataclass(frozen=True)
class Metadata:
    """FLOW.md's validated frontmatter and its byte-exact Markdown body."""

    name: str
    description: str
    uses: dict[str, str | None] = field(default_factory=dict)
    """Capability slot → ``./`` contract reference, or ``None`` for ``{local: true}``."""
    outcomes: dict[str, str] = field(default_factory=dict)
    attachments: dict[str, Access] = field(default_factory=dict)
    channels: dict[str, Port] = field(default_factory=dict)
    extensions: dict[str, JSONValue] = field(default_factory=dict)
    body: bytes = b""


def parse_flow_md(data: bytes, *, file: str = FLOW_MD) -> Metadata:
    """Parse and validate the bytes of ``FLOW.md``; raise :class:`PackageError`."""
    text, body = split_frontmatter(data, file=file)
    return parse_metadata(load_frontmatter(text, file=file), body, file=file)


def split_frontmatter(data: bytes, *, file: str = FLOW_MD) -> tuple[str, bytes]:
    """The frontmatter text between the exact ``---`` lines, and the body after them."""
    if data.startswith(_BOM):
        raise PackageError(file, "", "starts with a byte order mark; save it as UTF-8 without BOM")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PackageError(
            file, "", f"is not UTF-8 (bad byte at offset {exc.start}); save it as UTF-8"
        ) from None
    lines = iter(io.BytesIO(data))
    opener = next(lines, b"")
    if opener not in (b"---\n", b"---\r\n"):
        raise PackageError(
            file, "", "must start with a line that is exactly `---` (the frontmatter opener)"
        )
    pos = len(opener)
    for line in lines:
        end = pos + len(line)
        if end > MAX_FRONTMATTER_BYTES:
            raise PackageError(
                file,
                "",
                f"the frontmatter (through its closing `---`) exceeds {MAX_FRONTMATTER_BYTES:,} "
                "bytes; move long text into the Markdown body",
            )
        if line.removesuffix(b"\n").removesuffix(b"\r") == b"---":
            return data[len(opener) : pos].decode("utf-8"), data[end:]
        pos = end
    raise PackageError(
        file, "", "the frontmatter has no closing line that is exactly `---`; add one"
    )


def load_frontmatter(text: str, *, file: str = FLOW_MD) -> JSONValue:
    """The frontmatter's JSON/1 value under the strict YAML subset."""
    try:
        events = iter(list(yaml.parse(text, Loader=yaml.SafeLoader)))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at frontmatter line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PackageError(
            file, "", f"the frontmatter is not valid YAML: {problem}{where}"
        ) from None
    next(events)  # StreamStartEvent
    event = next(events)
    if isinstance(event, yaml.StreamEndEvent):
        raise PackageError(
            file, "", "the frontmatter is empty; `name` and `description` are required"
        )
    if isinstance(event, yaml.DocumentStartEvent) and (
        event.explicit or event.tags or event.version
    ):
        raise PackageError(file, "", "the frontmatter may not carry YAML directives or `---`")
    value = _Builder(file).node(next(events), events, [], 1)
    next(events)  # DocumentEndEvent
    if not isinstance(next(events), yaml.StreamEndEvent):
        raise PackageError(file, "", "the frontmatter holds more than one YAML document")
    try:
        json1.dumps(value)
    except json1.JSON1Error as exc:
        raise PackageError(
            file, exc.pointer or "", f"the frontmatter is not JSON/1: {exc.reason}"
        ) from None
    return value


class _Builder:
    """Turns PyYAML events into a JSON/1 value, refusing what the subset excludes."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.nodes = 0

    def fail(self, path: list[str], rule: str) -> PackageError:
        return PackageError(self.file, ".".join(path), rule)

    def node(
        self, event: yaml.Event, events: Iterator[yaml.Event], path: list[str], depth: int
    ) -> JSONValue:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(path, f"the frontmatter has more than {MAX_NODES:,} nodes")
        if isinstance(event, yaml.AliasEvent):
            raise self.fail(
                path, f"YAML aliases (*{event.anchor}) are not allowed; write the value out"
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise self.fail(path, f"YAML anchors (&{anchor}) are not allowed; remove it")
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise self.fail(path, f"YAML tags ({tag}) are not allowed; remove it")
        if isinstance(event, yaml.ScalarEvent):
            return _scalar(event)
        if depth > MAX_DEPTH:
            raise self.fail(path, f"the frontmatter nests deeper than {MAX_DEPTH} levels")
        if isinstance(event, yaml.SequenceStartEvent):
            items: list[JSONValue] = []
            while not isinstance(item := next(events), yaml.SequenceEndEvent):
                if len(items) == MAX_ENTRIES:
                    raise self.fail(path, f"a sequence may hold at most {MAX_ENTRIES} items")
                items.append(self.node(item, events, [*path, str(len(items))], depth + 1))
            return items
        assert isinstance(event, yaml.MappingStartEvent)
        members: dict[str, JSONValue] = {}
        while not isinstance(key_event := next(events), yaml.MappingEndEvent):
            key = self.key(key_event, path)
            if key in members:
                raise self.fail([*path, key], "duplicate key; each key may appear once")
            if len(members) == MAX_ENTRIES:
                raise self.fail(path, f"a mapping may hold at most {MAX_ENTRIES} entries")
            members[key] = self.node(next(events), events, [*path, key], depth + 1)
        return members

    def key(self, event: yaml.Event, path: list[str]) -> str:
        if not isinstance(event, yaml.ScalarEvent):
            raise self.fail(path, "mapping keys must be strings, not collections or aliases")
        if event.anchor is not None or event.tag is not None:
            raise self.fail(path, "mapping keys may carry no anchor or tag")
        key = _scalar(event)
        if not isinstance(key, str):
            raise self.fail(
                [*path, event.value], "mapping keys must be strings; quote it to use it as text"
            )
        if key == "<<" and event.style is None:
            raise self.fail([*path, key], "YAML merge keys (<<) are not allowed")
        return key


def _scalar(event: yaml.ScalarEvent) -> JSONValue:
    """A scalar by the JSON-schema subset: only plain scalars may be non-strings."""
    value: str = event.value
    if event.style is not None:
        return value
    if value == "null":
        return None
    if value in ("true", "false"):
        return value == "true"
    if _JSON_NUMBER.match(value):
        return json1.loads(value.encode())
    return value


# ----- Metadata/1 -----------------------------------------------------------------------


def parse_metadata(value: JSONValue, body: bytes = b"", *, file: str = FLOW_MD) -> Metadata:
    """Hold the frontmatter value to the closed Metadata/1 vocabulary."""
    if not isinstance(value, dict):
        raise PackageError(file, "", "the frontmatter must be a mapping of keys to values")
    extensions: dict[str, JSONValue] = {}
    for key in value:
        if key.startswith("x-") and is_local_name(key[2:]):
            extensions[key] = value[key]
        elif key not in METADATA_KEYS:
            raise PackageError(
                file,
                key,
                "unknown key; Metadata/1 allows name, description, uses, outcomes, "
                "attachments, channels and x-<name> extensions",
            )
    name = value.get("name")
    if "name" not in value:
        raise PackageError(file, "name", "required; give the package a LocalName label")
    if not is_local_name(name):
        raise PackageError(
            file, "name", f"{name!r} is not a LocalName (a-z, 0-9, single dashes, ≤64)"
        )
    description = value.get("description")
    if not isinstance(description, str):
        raise PackageError(file, "description", "required: a text of 1 to 16,384 characters")
    if not 1 <= len(description) <= MAX_DESCRIPTION_SCALARS:
        raise PackageError(
            file,
            "description",
            f"must be 1 to {MAX_DESCRIPTION_SCALARS:,} characters, not {len(description):,}",
        )
    uses: dict[str, str | None] = {}
    for slot, spec in _local_map(value, "uses", file).items():
        key = f"uses.{slot}"
        if spec == {"local": True}:
            uses[slot] = None
        elif isinstance(spec, dict) and set(spec) == {"contract"}:
            uses[slot] = check_reference(spec["contract"], file=file, key=f"{key}.contract")
        else:
            raise PackageError(
                file, key, 'must be exactly {contract: "./path.json"} or {local: true}'
            )
    outcomes = _local_map(value, "outcomes", file)
    for outcome, text in outcomes.items():
        if outcome in RESERVED_OUTCOMES:
            raise PackageError(
                file,
                f"outcomes.{outcome}",
                "reserved outcome (done, failed, cancelled, error); choose another name",
            )
        if not isinstance(text, str) or not text:
            raise PackageError(file, f"outcomes.{outcome}", "must be a nonempty description")
    attachments = _local_map(value, "attachments", file)
    for att, access in attachments.items():
        if access not in ("read", "read-write"):
            raise PackageError(file, f"attachments.{att}", "must be `read` or `read-write`")
    channels = {
        port: _port(spec, f"channels.{port}", file)
        for port, spec in _local_map(value, "channels", file).items()
    }
    checked = cast("dict[str, str]", outcomes), cast("dict[str, Access]", attachments)
    return Metadata(name, description, uses, *checked, channels, extensions, body)


def _local_map(value: dict[str, JSONValue], key: str, file: str) -> dict[str, JSONValue]:
    members = value.get(key, {})
    if not isinstance(members, dict):
        raise PackageError(file, key, "must be a mapping of LocalNames")
    for name in members:
        if not is_local_name(name):
            raise PackageError(
                file, f"{key}.{name}", "not a LocalName (a-z, 0-9, single dashes, ≤64 characters)"
            )
    return members


def _port(spec: JSONValue, key: str, file: str) -> Port:
    if not isinstance(spec, dict):
        raise PackageError(file, key, "a port declaration is a mapping with at least `direction`")
    for member in spec:
        if member not in PORT_KEYS:
            raise PackageError(
                file,
                f"{key}.{member}",
                "unknown key; a port has direction, required, schema, contract, delivery, start",
            )
    direction = spec.get("direction")
    if direction not in ("send", "receive"):
        raise PackageError(file, f"{key}.direction", "required: `send` or `receive`")
    required = spec.get("required", True)
    if not isinstance(required, bool):
        raise PackageError(file, f"{key}.required", "must be true or false")
    if "schema" in spec and "contract" in spec:
        raise PackageError(file, key, "`schema` and `contract` exclude each other; keep one")
    schema = spec.get("schema")
    if "schema" in spec:
        try:
            compile_schema1(schema, defs={})
        except SchemaError as exc:
            raise PackageError(
                file, f"{key}.schema{exc.pointer}", f"{exc.code}: {exc.message}"
            ) from None
    contract = spec.get("contract")
    if contract is not None:
        contract = check_reference(contract, file=file, key=f"{key}.contract")
    delivery = spec.get("delivery")
    if delivery is not None and delivery not in ("direct", "broadcast"):
        raise PackageError(file, f"{key}.delivery", "must be `direct` or `broadcast`")
    start = spec.get("start")
    if start is not None:
        if direction != "receive":
            raise PackageError(file, f"{key}.start", "only a receive port has a start")
        if start not in ("beginning", "suffix"):
            raise PackageError(file, f"{key}.start", "must be `beginning` or `suffix`")
    return Port(direction, required, schema, contract, delivery, start)  # type: ignore[arg-type]


def check_reference(ref: JSONValue, *, file: str, key: str) -> str:
    """An author reference ``./a/b.json`` confined to the package; return it unchanged."""
    rule = None
    if not isinstance(ref, str) or not ref.startswith("./"):
        rule = "must be a package-local reference starting with `./`"
    elif "\\" in ref or "%" in ref or "\0" in ref:
        rule = "may not contain backslashes, percent-encoding or NUL"
    elif any(segment in ("", ".", "..") for segment in ref[2:].split("/")):
        rule = "must name a file inside the package: no empty, `.` or `..` segments"
    if rule is not None:
        raise PackageError(file, key, f"{ref!r} {rule}")
    assert isinstance(ref, str)
    return ref
