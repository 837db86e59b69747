"""The invocation key: the sha256 of the RFC 8785 canonical JSON of what a result depends
on (:meth:`Keys.document`), so a changed input, image id, attachment, profile, command or
flow-runner version reruns. Read-only attachments count by content (:func:`digest_path`),
read-write ones by path only (they are outputs); a flow row's key holds its host
configuration as its files say it (:func:`config_document`) and every flow's image id.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner import __version__, json1
from runner.json1 import JSONValue
from runner.sandbox.base import Attachment
from runner.sandbox.errors import SandboxError
from runner.sandbox.registry import SandboxEngine, SandboxSpec, load_spec_profile

from .manifest import Row

if TYPE_CHECKING:
    from runner.config import HostConfig

Digests = Callable[[Path], str]
"""A read-only attachment's content digest, once per path per batch."""
CONTENT_LIMIT = 64 << 20
"""Bytes of a read-only attachment tree digested by content; above it, by metadata."""


class ImageIds:
    """Tag -> image id, asked of the engine once per tag per batch (``None``: missing)."""

    def __init__(self, engine: SandboxEngine) -> None:
        self._engine = engine
        self._ids: dict[str, str | None] = {}

    def __call__(self, tag: str) -> str | None:
        if tag not in self._ids:
            self._ids[tag] = self._engine.image_id(tag)
        return self._ids[tag]

    def planned(self, tag: str) -> str:
        """The id ``tag`` was resolved to (never asking the engine), else the tag itself."""
        return self._ids.get(tag) or tag


def digest_path(path: Path) -> str:
    """``content:<sha256>`` of a file or tree (paths, modes, link targets and bytes), or
    for a tree over :data:`CONTENT_LIMIT` bytes ``meta:<sha256>`` of paths, sizes and
    mtimes (cheap, but it trusts mtimes). Links are not followed."""
    entries: list[_Entry] = []

    def visit(at: Path, rel: str) -> None:
        st = os.lstat(at)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            entries.append(_Entry(rel, "l", mode, link=os.readlink(at)))
        elif stat.S_ISDIR(st.st_mode):
            entries.append(_Entry(rel, "d", mode))
            for name in sorted(os.listdir(at)):
                visit(at / name, f"{rel}/{name}" if rel else name)
        elif stat.S_ISREG(st.st_mode):
            entries.append(_Entry(rel, "f", mode, st.st_size, st.st_mtime_ns))
        else:
            entries.append(_Entry(rel, "o", st.st_mode))

    visit(path, "")
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


class Keys:
    """Each row's invocation key, for one batch.

    The bytes are those of ``json1.canonical(keys.document(row))``, built from the
    members' canonical bytes so that what rows share (a profile, the configuration) is
    encoded once per batch, and an input near JSON/1's bounds still gets a key although
    the whole document would exceed them.
    """

    def __init__(self, image_ids: ImageIds, config: HostConfig | None) -> None:
        self._image_ids = image_ids
        self._digests: Digests = functools.cache(digest_path)
        self._config = config
        self._shared: dict[int, tuple[object, JSONValue]] = {}
        """id of what rows share -> (it, its JSON value)."""
        self._encoded: dict[int, tuple[JSONValue, bytes]] = {}
        """id of a shared JSON value (kept alive above) -> (it, its canonical bytes)."""

    def __call__(self, row: Row) -> str:
        """The sha256 (hex) of the canonical bytes of the row's key document."""
        members = {}
        for name, value in self.document(row).items():
            shared = self._encoded.get(id(value))
            members[name] = shared[1] if shared and shared[0] is value else json1.canonical(value)
        parts = (
            json1.canonical(name) + b":" + members[name]
            for name in sorted(members, key=lambda name: name.encode("utf-16-be"))
        )
        return hashlib.sha256(b"{" + b",".join(parts) + b"}").hexdigest()

    def document(self, row: Row) -> dict[str, JSONValue]:
        """Everything the row's result depends on, as a JSON/1 object."""
        if row.flow is not None:
            config = self._config
            assert config is not None
            doc = _run_document(row.input, row.settings, row.deadline)
            doc["flow"] = row.flow
            doc["config"] = self._share(config, lambda: config_document(config, self._digests))
            doc["images"] = {
                name: self._image_ids(flow.image) or f"missing:{flow.image}"
                for name, flow in sorted(config.flows.items())
                if flow.image is not None
            }
            return doc
        assert row.image is not None and row.profile is not None
        profile = row.profile
        seccomp = profile.seccomp_json
        return image_document(
            self._image_ids(row.image) or f"missing:{row.image}",
            self._share(profile, profile.as_json),
            None if seccomp is None else self._share(seccomp, lambda: _seccomp_digest(seccomp)),
            row.command, [_attachment(att, self._digests) for att in row.attachments],
            row.input, row.settings, row.deadline,
        )  # fmt: skip

    def _share(self, owner: object, value: Callable[[], JSONValue]) -> JSONValue:
        """``owner``'s JSON value, made and encoded on first use; ``owner`` is kept so its
        id stays its own."""
        shared = self._shared.get(id(owner))
        if shared is None:
            made = value()
            shared = self._shared[id(owner)] = (owner, made)
            self._encoded[id(made)] = (made, json1.canonical(made))
        return shared[1]


def image_document(
    image: str,
    profile: JSONValue,
    seccomp: JSONValue,
    command: tuple[str, ...] | None,
    attachments: list[JSONValue],
    value: JSONValue,
    settings: dict[str, JSONValue],
    deadline: float,
) -> dict[str, JSONValue]:
    """The key document of a run of an image (its id where an engine has it)."""
    doc = _run_document(value, settings, deadline)
    doc["image"] = image
    doc["profile"] = profile
    if seccomp is not None:  # the profile names its file; this is what the file says
        doc["seccomp"] = seccomp
    doc["command"] = list(command) if command is not None else None
    doc["attachments"] = attachments
    return doc


def _run_document(
    value: JSONValue, settings: dict[str, JSONValue], deadline: float
) -> dict[str, JSONValue]:
    return {
        "flow-runner": __version__,
        "input": value,
        "settings": settings,
        "deadline": deadline,  # a row that ran out of time may finish with more
    }


def _seccomp_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _attachment(att: Attachment, digests: Digests) -> JSONValue:
    entry: dict[str, JSONValue] = {"name": att.name, "path": str(att.host_path)}
    if att.access == "read":
        entry["digest"] = digests(att.host_path)
    else:
        entry["access"] = "read-write"
    return entry


def config_document(config: HostConfig, digests: Digests) -> JSONValue:
    """The configuration as a key sees it: its values, each sandboxed flow's effective
    profile and seccomp digest, and the digest of every file a flow names (read-only
    attachments, package, contracts, command arguments). A file that cannot be read or a
    profile that does not load is named as such: the run itself reports it."""
    doc = config.model_dump(mode="json", exclude={"base_dir"})
    for name, flow in config.flows.items():
        entry = doc["flows"][name]
        if flow.sandbox_backend != "process":
            entry["profile"] = _profile(config, flow.sandbox_backend, flow.profile)
        if flow.package is not None:
            entry["package"] = _digest(config.resolve(flow.package), digests)
        for slot, spec in flow.attachments.items():
            path, sep, mode = spec.rpartition(":")
            if not sep or mode not in ("ro", "rw"):
                path, mode = spec, "ro"
            if mode == "ro":
                entry["attachments"][slot] = {
                    "path": spec, "digest": _digest(config.resolve(path), digests)
                }  # fmt: skip
        for slot, binding in flow.capabilities.items():
            if binding.contract is not None:
                contract = _digest(config.resolve(binding.contract), digests)
                entry["capabilities"][slot]["contract"] = contract
        if flow.command is not None:
            entry["files"] = {
                arg: _digest(config.resolve(arg), digests)
                for arg in flow.command
                if _names_file(config.base_dir / arg)
            }
    return doc


def _profile(config: HostConfig, backend: str, profile: str) -> JSONValue:
    try:
        loaded = load_spec_profile(SandboxSpec(backend, profile=profile, base_dir=config.base_dir))
    except SandboxError as exc:
        return {"unloadable": str(exc)}
    seccomp = loaded.seccomp_json
    return {
        "settings": loaded.as_json(),
        "seccomp": _seccomp_digest(seccomp) if seccomp is not None else None,
    }


def _names_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for a path, say: an argument, not a file
        return False


def _digest(path: Path, digests: Digests) -> str:
    try:
        return digests(path)
    except OSError as exc:
        return f"unreadable:{exc.strerror or exc}"


def input_digest(row: Row) -> str:
    """The digest of the row's input and settings: ``diff`` matches rows across image or
    runner upgrades by id and this, not by the key."""
    return hashlib.sha256(
        json1.canonical({"input": row.input, "settings": row.settings})
    ).hexdigest()


def shard_of(key: str, count: int) -> int:
    """The shard (1-based) a key falls in, out of ``count``: stable across machines."""
    return int(key[:16], 16) % count + 1
