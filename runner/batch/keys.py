"""The invocation key: what a result depends on, digested, so a changed input reruns.

The key is the sha256 of the RFC 8785 canonical JSON of :func:`key_document`: the image
*id* (not the tag: a rebuilt image under the same tag is another key), the canonical input
and settings, each read-only attachment by path and a digest of its content, each
read-write attachment by path only (it is an output), the profile's effective settings,
the command, and flow-runner's version. A flow row puts the whole host configuration and
the image ids of every configured flow in place of image, profile and command.

A read-only attachment's digest (:class:`Digests`) covers the bytes of every regular file
under it, with relative paths, modes and symlink targets, while the tree holds at most
:data:`CONTENT_LIMIT` bytes; a larger tree is digested by paths, sizes and mtimes only
(``meta:`` digests), which is cheap but trusts mtimes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import __version__, json1
from runner.config import HostConfig
from runner.json1 import JSONValue
from runner.sandbox.base import Attachment

from .manifest import Row

CONTENT_LIMIT = 64 << 20
"""Bytes of a read-only attachment tree digested by content; above it, by metadata."""


class ImageIds:
    """Tag -> image id, asked of the engine once per tag per batch (``None``: missing)."""

    def __init__(self, client: Callable[[], Any]) -> None:
        self._client = client
        self._ids: dict[str, str | None] = {}

    def __call__(self, tag: str) -> str | None:
        if tag not in self._ids:
            import docker.errors

            try:
                self._ids[tag] = str(self._client().api.inspect_image(tag)["Id"])
            except docker.errors.ImageNotFound:
                self._ids[tag] = None
        return self._ids[tag]


class Digests:
    """Content digests of read-only attachments, once per path per batch."""

    def __init__(self) -> None:
        self._digests: dict[Path, str] = {}

    def __call__(self, path: Path) -> str:
        if path not in self._digests:
            self._digests[path] = digest_path(path)
        return self._digests[path]


def digest_path(path: Path) -> str:
    """``content:<sha256>`` of a file or tree, or ``meta:<sha256>`` of a large tree."""
    entries = _walk(path)
    by_content = sum(e.size for e in entries if e.kind == "f") <= CONTENT_LIMIT
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.rel}\0{e.kind}\0{e.mode:o}\0{e.link}\0".encode(errors="surrogateescape"))
        if e.kind != "f":
            continue
        if not by_content:
            h.update(f"{e.size} {e.mtime_ns}\0".encode())
            continue
        with (path / e.rel if e.rel else path).open("rb") as file:
            while chunk := file.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return ("content:" if by_content else "meta:") + h.hexdigest()


@dataclass(frozen=True)
class _Entry:
    rel: str
    kind: str  # f file, d directory, l symlink, o other
    mode: int
    size: int = 0
    mtime_ns: int = 0
    link: str = ""


def _walk(root: Path) -> list[_Entry]:
    """Every entry of the tree (or the one file), sorted by path; links not followed."""
    out: list[_Entry] = []

    def visit(path: Path, rel: str) -> None:
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out.append(_Entry(rel, "l", mode, link=os.readlink(path)))
        elif stat.S_ISDIR(st.st_mode):
            out.append(_Entry(rel, "d", mode))
            for name in sorted(os.listdir(path)):
                visit(path / name, f"{rel}/{name}" if rel else name)
        elif stat.S_ISREG(st.st_mode):
            out.append(_Entry(rel, "f", mode, st.st_size, st.st_mtime_ns))
        else:
            out.append(_Entry(rel, "o", st.st_mode))

    visit(root, "")
    return out


def key_document(
    row: Row,
    image_ids: ImageIds,
    digests: Digests,
    config: HostConfig | None,
) -> dict[str, JSONValue]:
    """Everything the row's result depends on, as a JSON/1 object."""
    doc: dict[str, JSONValue] = {
        "flow-runner": __version__,
        "input": row.input,
        "settings": row.settings,
    }
    if row.flow is not None:
        assert config is not None
        doc["flow"] = row.flow
        doc["config"] = config.model_dump(mode="json", exclude={"base_dir"})
        doc["images"] = {
            name: image_ids(flow.image) or f"missing:{flow.image}"
            for name, flow in sorted(config.flows.items())
            if flow.image is not None
        }
        return doc
    assert row.image is not None and row.profile is not None
    doc["image"] = image_ids(row.image) or f"missing:{row.image}"
    doc["profile"] = row.profile.as_json()
    doc["command"] = list(row.command) if row.command is not None else None
    doc["attachments"] = [_attachment(att, digests) for att in row.attachments]
    return doc


def _attachment(att: Attachment, digests: Digests) -> JSONValue:
    entry: dict[str, JSONValue] = {"name": att.name, "path": str(att.host_path)}
    if att.access == "read":
        entry["digest"] = digests(att.host_path)
    else:
        entry["access"] = "read-write"
    return entry


def invocation_key(document: dict[str, JSONValue]) -> str:
    """The sha256 (hex) of the document's canonical bytes."""
    return hashlib.sha256(json1.canonical(document)).hexdigest()


def input_digest(row: Row) -> str:
    """The row's own input and settings, digested: ``diff`` matches rows across upgrades
    of image or runner by id and this, not by the key."""
    return hashlib.sha256(
        json1.canonical({"input": row.input, "settings": row.settings})
    ).hexdigest()


def shard_of(key: str, count: int) -> int:
    """The shard (1-based) a key falls in, out of ``count``: stable across machines."""
    return int(key[:16], 16) % count + 1
