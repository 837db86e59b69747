"""FLOW.md and package files, parsed in memory: good packages and each refusal's reason."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from runner import json1
from runner.package.checks import (
    channel_contract_resolver,
    channel_ports,
    check_attachments,
    check_capability_slots,
    check_settings,
    input_failure,
    result_failure,
)
from runner.package.errors import InvocationRefused, PackageError
from runner.package.frontmatter import MAX_FRONTMATTER_BYTES, parse_flow_md
from runner.package.parse import package_digest, package_from_files
from runner.protocol.codes import OperationError
from runner.sandbox.base import Attachment

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = '"$schema": "https://flow.jig.md/schemas/schema-1.json"'
CONTRACT = (ROOT / "runner/host/capabilities/contracts/artifacts.json").read_bytes()


CLOSED = f'{{{SCHEMA}, "type": "object", "additionalProperties": false}}'.encode()
STRING_OUTPUT = f'{{{SCHEMA}, "properties": {{"output": {{"type": "string"}}}}}}'.encode()


def flow_md(front: str, body: str = "\n# body\n") -> bytes:
    return f"---\n{front}---\n{body}".encode()


GOOD = """\
name: good
description: "A package with every kind of declaration: it has a colon."
uses:
  artifacts:
    contract: ./contracts/artifacts.json
  shell:
    local: true
outcomes:
  partial: Some of the work was done.
attachments:
  source: read
  out: read-write
channels:
  progress:
    direction: send
    required: false
    schema: {type: integer, minimum: 0}
  commands:
    direction: receive
    delivery: broadcast
    start: suffix
x-team:
  owner: docs
"""


H = "name: a\ndescription: d\n"


def refusal(front: str) -> PackageError:
    with pytest.raises(PackageError) as caught:
        parse_flow_md(flow_md(front))
    return caught.value


# ----- good packages --------------------------------------------------------------------


def test_a_full_package_parses_with_every_declaration() -> None:
    meta = parse_flow_md(flow_md(GOOD))
    assert meta.name == "good"
    assert meta.uses == {"artifacts": "./contracts/artifacts.json", "shell": None}
    assert meta.outcomes == {"partial": "Some of the work was done."}
    assert meta.attachments == {"source": "read", "out": "read-write"}
    assert meta.channels["progress"].required is False
    assert meta.channels["progress"].schema == {"type": "integer", "minimum": 0}
    assert meta.channels["commands"].start == "suffix"
    assert meta.extensions == {"x-team": {"owner": "docs"}}
    assert meta.body == b"\n# body\n"


def test_crlf_delimiters_and_a_byte_exact_body() -> None:
    data = b"---\r\nname: crlf\r\ndescription: d\r\n---\r\nbody\r\n"
    meta = parse_flow_md(data)
    assert (meta.name, meta.body) == ("crlf", b"body\r\n")


def test_scalars_follow_the_json_schema_subset_not_yaml_1_1() -> None:
    meta = parse_flow_md(
        flow_md(
            "name: s\ndescription: d\n"
            "x-values: [null, true, false, 12, -1.5e3, yes, no, on, 0o7, ~, Null, '1', 0x1F]\n"
        )
    )
    assert meta.extensions["x-values"] == [
        None, True, False, 12, -1500.0, "yes", "no", "on", "0o7", "~", "Null", "1", "0x1F",
    ]  # fmt: skip


def test_package_files_compile_and_the_digest_follows_the_rule() -> None:
    files = {
        "FLOW.md": flow_md(GOOD),
        "contracts/artifacts.json": CONTRACT,
        "input.schema.json": CLOSED,
        "flow.py": b"print('hi')\n",
    }
    package = package_from_files(files, "sha256:img", "/flow/package")
    assert package.uses["shell"] is None
    artifacts = package.uses["artifacts"]
    assert artifacts is not None and artifacts.identity.version == "1.0.0"
    assert set(package.schemas) == {"input"}
    expected = hashlib.sha256(b"FLOW-Package/1\0" + struct.pack(">Q", 4))
    for path in sorted(files, key=str.encode):
        p, c = path.encode(), files[path]
        expected.update(b"\x01" + struct.pack(">I", len(p)) + p + struct.pack(">Q", len(c)) + c)
    assert package.digest == package_digest(files) == "sha256:" + expected.hexdigest()


def test_invocation_checks_against_the_package() -> None:
    files = {
        "FLOW.md": flow_md(
            "name: p\ndescription: d\nattachments: {src: read}\nuses: {kv: {local: true}}\n"
        ),
        "input.schema.json": CLOSED,
        "result.schema.json": STRING_OUTPUT,
    }
    package = package_from_files(files)
    check_settings(package, {})
    with pytest.raises(
        InvocationRefused, match=r"INVALID_SETTINGS.*no settings\.schema\.json.*color"
    ):
        check_settings(package, {"color": "red"})
    from pathlib import Path

    check_attachments(package, [Attachment("src", Path("/tmp"), "read")])
    with pytest.raises(InvocationRefused, match="missing src"):
        check_attachments(package, [])
    with pytest.raises(InvocationRefused, match="declared read but supplied read-write: src"):
        check_attachments(package, [Attachment("src", Path("/tmp"), "read-write")])
    with pytest.raises(InvocationRefused, match="not declared: extra"):
        check_attachments(
            package,
            [Attachment("src", Path("/tmp"), "read"), Attachment("extra", Path("/tmp"), "read")],
        )
    with pytest.raises(InvocationRefused, match=r"slot.*other.*declares: kv"):
        check_capability_slots(package, ["kv", "other"], where="flows.p.capabilities")
    assert input_failure(package, {}) is None
    failure = input_failure(package, {"x": 1})
    assert failure is not None and failure.code == "INVALID_INPUT"
    assert result_failure(package, {"outcome": "done", "output": "ok"}) is None
    failure = result_failure(package, {"outcome": "done", "output": 3})
    assert failure is not None and failure.code == "INVALID_RESULT"
    failure = result_failure(package, {"outcome": "partial", "output": "ok"})
    assert failure is not None and failure.code == "INVALID_RESULT"
    assert "neither done nor declared" in failure.message


# ----- refusals: file, key, rule ---------------------------------------------------------


def test_duplicate_yaml_key() -> None:
    error = refusal("name: a\ndescription: d\noutcomes:\n  late: x\n  late: y\n")
    assert (error.file, error.key) == ("FLOW.md", "outcomes.late")
    assert "duplicate key" in error.rule


def test_unknown_key() -> None:
    error = refusal("name: a\ndescription: d\nversion: 2\n")
    assert (error.file, error.key) == ("FLOW.md", "version")
    assert "unknown key" in error.rule
    assert str(error).startswith("invalid FLOW package: FLOW.md: version: unknown key")


def test_reserved_outcome() -> None:
    error = refusal("name: a\ndescription: d\noutcomes:\n  failed: it failed\n")
    assert (error.key, "reserved outcome" in error.rule) == ("outcomes.failed", True)


@pytest.mark.parametrize(
    "ref",
    ["../outside.json", "./../x.json", "./a//b.json", "./a/./b.json", "/abs.json",
     "./a\\\\b.json", "./a%2fb.json", "contracts/x.json"],
)  # fmt: skip
def test_references_stay_inside_the_package(ref: str) -> None:
    error = refusal(f'name: a\ndescription: d\nuses:\n  kv:\n    contract: "{ref}"\n')
    assert error.key == "uses.kv.contract"


def test_schema_with_pattern_is_refused_naming_the_file_and_pointer() -> None:
    files = {
        "FLOW.md": flow_md("name: a\ndescription: d\n"),
        "input.schema.json": (
            f'{{{SCHEMA}, "properties": {{"id": {{"type": "string", "pattern": "^a"}}}}}}'
        ).encode(),
    }
    with pytest.raises(PackageError) as caught:
        package_from_files(files)
    assert caught.value.file == "input.schema.json"
    assert caught.value.key == "/properties/id/pattern"
    assert caught.value.rule.startswith("SCHEMA_KEYWORD_UNSUPPORTED")


def test_oversize_frontmatter() -> None:
    filler = "x-pad: " + "a" * MAX_FRONTMATTER_BYTES + "\n"
    error = refusal("name: a\ndescription: d\n" + filler)
    assert error.key == "" and "262,144 bytes" in error.rule


def test_frontmatter_exactly_at_the_limit_is_accepted() -> None:
    head = "name: a\ndescription: d\nx-pad: "
    room = MAX_FRONTMATTER_BYTES - len("---\n") - len(head) - len("\n---\n")
    assert parse_flow_md(flow_md(head + "a" * room + "\n")).name == "a"
    with pytest.raises(PackageError, match="262,144"):
        parse_flow_md(flow_md(head + "a" * (room + 1) + "\n"))


@pytest.mark.parametrize(
    ("front", "key", "rule"),
    [
        ("name: a\ndescription: &d text\n", "description", "anchors"),
        (H + "x-a: {b: 1}\nx-c: *b\n", "x-c", "aliases"),
        ("name: !!str a\ndescription: d\n", "name", "tags"),
        (H + "x-m:\n  <<: {b: 1}\n", "x-m.<<", "merge keys"),
        (H + "1: x\n", "1", "keys must be strings"),
        (H + "x-k: {[1]: x}\n", "x-k", "keys must be strings"),
        ("description: d\n", "name", "required"),
        ("name: Not_Local\ndescription: d\n", "name", "LocalName"),
        ("name: a\ndescription: ''\n", "description", "1 to 16,384"),
        (H + "uses: {kv: {local: false}}\n", "uses.kv", "exactly"),
        (H + "uses: {kv: {local: true, contract: ./x.json}}\n", "uses.kv", "exactly"),
        (H + "attachments: {src: write}\n", "attachments.src", "read-write"),
        (H + "outcomes: {ok: ''}\n", "outcomes.ok", "nonempty"),
        (H + "channels: {c: {required: true}}\n", "channels.c.direction", "send"),
        (H + "channels: {c: {direction: send, start: suffix}}\n", "channels.c.start", "receive"),
        (H + "channels: {c: {direction: send, schema: {}, contract: ./c.json}}\n",
         "channels.c", "exclude"),
        (H + "channels: {c: {direction: send, schema: {format: x}}}\n",
         "channels.c.schema/format", "SCHEMA_KEYWORD_UNSUPPORTED"),
        (H + "channels: {c: {direction: up}}\n", "channels.c.direction", "send"),
        (H + "x-deep: " + "[" * 17 + "]" * 17 + "\n", "x-deep" + ".0" * 15, "deeper than 16"),
    ],
)  # fmt: skip
def test_each_violation_names_key_and_rule(front: str, key: str, rule: str) -> None:
    error = refusal(front)
    assert error.file == "FLOW.md"
    assert error.key == key, str(error)
    assert rule in error.rule, str(error)


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        (b"\xef\xbb\xbf---\nname: a\ndescription: d\n---\n", "byte order mark"),
        (b"---\nname: a\ndescription: \xff\n---\n", "not UTF-8"),
        (b"--- \nname: a\ndescription: d\n---\n", "exactly `---`"),
        (b"# title\n---\nname: a\n---\n", "exactly `---`"),
        (b"---\nname: a\ndescription: d\n", "no closing line"),
        (b"---\n---\n", "empty"),
        (b"---\nname: a\ndescription: d\n...\nname: b\n---\n", "not valid YAML"),
        (b"---\n[1, 2]\n---\n", "must be a mapping"),
        (b"---\nname: a\n  description: [\n---\n", "not valid YAML"),
    ],
)
def test_document_level_refusals(data: bytes, rule: str) -> None:
    with pytest.raises(PackageError) as caught:
        parse_flow_md(data)
    assert rule in caught.value.rule, str(caught.value)


def test_too_many_entries_and_nodes() -> None:
    entries = "".join(f"  k{i}: v\n" for i in range(257))
    assert "at most 256 entries" in refusal(f"name: a\ndescription: d\nx-big:\n{entries}").rule
    items = ", ".join(["[" + ", ".join(["1"] * 200) + "]"] * 21)
    assert "4,096 nodes" in refusal(f"name: a\ndescription: d\nx-big: [{items}]\n").rule


def test_a_missing_referenced_contract_is_refused() -> None:
    files = {"FLOW.md": flow_md("name: a\ndescription: d\nuses: {kv: {contract: ./kv.json}}\n")}
    with pytest.raises(PackageError) as caught:
        package_from_files(files)
    assert (caught.value.file, caught.value.key) == ("FLOW.md", "uses.kv.contract")
    assert "names no regular file" in caught.value.rule


PROGRESS = (ROOT / "examples" / "live-progress" / "contracts" / "progress.json").read_bytes()
PORTS = (
    H
    + """channels:
  progress: {direction: send, contract: ./contracts/progress.json, delivery: broadcast}
  items: {direction: receive, schema: {type: string}, required: false}
"""
)


def test_channel_ports_resolve_their_contract_identity_and_schema() -> None:
    from runner.contracts.capability import domain_digest
    from runner.contracts.channel import DIGEST_DOMAIN

    files = {"FLOW.md": flow_md(PORTS), "contracts/progress.json": PROGRESS}
    ports = channel_ports(package_from_files(files))
    progress, items = ports["progress"], ports["items"]
    assert progress.identity == (
        "https://flow-runner.example/contracts/progress",
        "1.0.0",
        domain_digest(DIGEST_DOMAIN, json1.loads(PROGRESS)),
    )
    assert progress.schema is not None and progress.delivery == "broadcast"
    assert progress.schema.first_error({"item": "a", "done": 1, "result": "A"}) is None
    assert progress.schema.first_error({"item": "a"}) is not None
    assert items.identity is None and items.required is False
    assert items.schema is not None and items.schema.first_error(3) is not None


def test_a_broken_channel_contract_names_its_file_and_pointer() -> None:
    broken = json1.loads(PROGRESS)
    assert isinstance(broken, dict)
    broken["version"] = "1.0"
    files = {"FLOW.md": flow_md(PORTS), "contracts/progress.json": json1.dumps(broken)}
    with pytest.raises(PackageError) as caught:
        package_from_files(files)
    assert caught.value.file == "contracts/progress.json"
    assert caught.value.key == "/version"


def test_contracts_parsed_on_demand_are_bounded_and_parsed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The parse runs on the run's event loop: a component naming undeclared descriptors
    # one after another gets ON_DEMAND_BYTES of them parsed, each path once.
    from runner.contracts import channel
    from runner.package import checks

    broken = json1.loads(PROGRESS)
    assert isinstance(broken, dict)
    broken["version"] = "1.0"
    count = checks.ON_DEMAND_BYTES // len(PROGRESS) + 2
    files = {f"c/{index}.json": PROGRESS for index in range(count)}
    files |= {"FLOW.md": flow_md(H), "c/broken.json": json1.dumps(broken)}
    parses: list[str] = []
    real = channel.parse_channel_contract

    def counted(data: bytes, source: str) -> channel.ChannelContract:
        parses.append(source)
        return real(data, source=source)

    monkeypatch.setattr(channel, "parse_channel_contract", counted)
    resolve = channel_contract_resolver(package_from_files(files))
    for _ in range(3):
        with pytest.raises(OperationError, match="/version"):
            resolve("./c/broken.json")
    assert parses == ["c/broken.json"]  # refused once parsed, and again from memory
    resolved = 0
    with pytest.raises(OperationError, match="declare the contract on a channel port") as caught:
        for index in range(count):
            resolve(f"./c/{index}.json")
            resolved += 1
    assert caught.value.code == "INVALID_INPUT"
    assert 0 < resolved < count and len(parses) == resolved + 1
    assert resolve("./c/0.json").identity is not None  # parsed already: still resolved


def test_channel_create_resolves_contracts_only_inside_the_package() -> None:
    files = {"FLOW.md": flow_md(H), "contracts/progress.json": PROGRESS}
    resolve = channel_contract_resolver(package_from_files(files))
    assert resolve("./contracts/progress.json").identity is not None
    with pytest.raises(OperationError) as caught:
        resolve("./contracts/missing.json")
    assert caught.value.code == "INVALID_INPUT"
