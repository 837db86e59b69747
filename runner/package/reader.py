"""Reading a FLOW package out of an image, or out of a directory, without running it.

The package directory is named by the image label ``flow.package`` (``/flow/package``
when the label is absent). Its files come from the sandbox backend, which knows images
but not packages (:class:`~runner.sandbox.base.ImageSource`: the Docker backend reads them
through the engine's archive endpoint of a container that is created but never started):
no component code runs before the host has validated the metadata and compiled every
schema (PROTOCOL.md §14, §15.3 "inert inspection"). A package directory on the host (``exec
--process --package DIR``) goes through the same checks and the same parse.

An image whose package directory is missing, or holds no ``FLOW.md``, carries no
package: it runs as before, unchecked (the test images, and a bare command image).

Results are cached per image id in this process, so a run tree that starts the same image
a hundred times reads its package once; a retag that changes the image changes the id.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import struct
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import anyio

from runner import json1
from runner.json1 import JSONValue
from runner.package import FLOW_MD
from runner.package.errors import PackageError
from runner.sandbox.base import ImageEntry, ImageSource, Sandbox
from runner.sandbox.errors import FilesTooLarge

if TYPE_CHECKING:
    from runner.contracts.capability import CapabilityContract
    from runner.contracts.channel import ChannelContract
    from runner.contracts.schema1 import Schema1Validator
    from runner.package.frontmatter import Access, Port


PACKAGE_LABEL: Final = "flow.package"
DEFAULT_PACKAGE_DIR: Final = "/flow/package"
SCHEMA_FILES: Final = ("input", "settings", "result")
MAX_ARCHIVE_BYTES: Final = 256 * 1024 * 1024
"""flow-runner's bound on a package read into memory (Package/1 allows 4 GiB)."""
MAX_FILES: Final = 65_536
MAX_PATH_BYTES: Final = 1_024
MAX_SEGMENTS: Final = 64
DIGEST_DOMAIN: Final = b"FLOW-Package/1\0"


@dataclass(frozen=True)
class Package:
    """A validated package: its metadata, compiled schemas, contracts and digest."""

    image_id: str
    root: str
    """The package directory inside the image."""
    name: str
    description: str
    outcomes: dict[str, str]
    uses: dict[str, CapabilityContract | None]
    """Capability slot → its contract, or ``None`` for a ``{local: true}`` slot."""
    attachments: dict[str, Access]
    channels: dict[str, Port]
    schemas: dict[str, Schema1Validator] = field(repr=False)
    """``input`` / ``settings`` / ``result`` → validator, for the files present."""
    schema_documents: dict[str, JSONValue] = field(repr=False)
    digest: str
    file_count: int
    channel_contracts: dict[str, ChannelContract] = field(default_factory=dict, repr=False)
    """``./`` reference → Channel Contract/1 descriptor, for every port that names one."""
    json_files: dict[str, bytes] = field(default_factory=dict, repr=False)
    """Package path → bytes of each small ``.json`` file: what ``channel/create``'s
    ``contract`` may name at run time (it resolves only inside the invoking package)."""


_cache: dict[str, Package | None] = {}
_cache_lock = threading.Lock()


def forget_packages() -> None:
    """Empty the per-process cache (tests; a long-lived host after images were rebuilt)."""
    with _cache_lock:
        _cache.clear()


async def sandbox_package(sandbox: Sandbox) -> Package | None:
    """The package of the image ``sandbox`` runs, or ``None`` (no image, or no package).

    Raises :class:`PackageError` for a broken package and the backend's
    :class:`~runner.sandbox.errors.SandboxError` for a missing image or engine.
    """
    source = await sandbox.image_source()
    return None if source is None else await image_package(source)


async def image_package(source: ImageSource) -> Package | None:
    """The package of an image (cached per image id), or ``None`` when it carries none."""
    image_id = source.image_id
    with _cache_lock:
        if image_id in _cache:
            return _cache[image_id]
    root = source.labels.get(PACKAGE_LABEL) or DEFAULT_PACKAGE_DIR
    files = await _stored_files(source, root)
    package = None
    if files is not None and FLOW_MD in files:
        package = await anyio.to_thread.run_sync(package_from_files, files, image_id, root)
    with _cache_lock:
        _cache[image_id] = package
    return package


def directory_package(directory: Path) -> Package:
    """The package in a host directory (``exec --process --package DIR``), read afresh.

    Held to the rules of a package in an image: regular files and directories only, valid
    Package/1 paths, the same bounds; a directory without ``FLOW.md`` is an error here,
    since the user named it as a package.
    """
    root = str(directory)
    files = files_from_entries(_walk(directory), root)
    if FLOW_MD not in files:
        raise PackageError(FLOW_MD, "", f"missing in {directory}: a package has a root FLOW.md")
    return package_from_files(files, "", root)


def _walk(directory: Path) -> Iterable[ImageEntry]:
    """The entries under ``directory`` as a backend names them, without following links."""
    try:
        top = os.lstat(directory)
    except OSError as exc:
        raise PackageError(str(directory), "", f"cannot read the package: {exc.strerror}") from exc
    if not stat.S_ISDIR(top.st_mode):
        raise PackageError(str(directory), "", "not a directory; give the package's directory")
    total = 0
    for base, dirs, names in os.walk(directory, onerror=_unreadable):
        dirs.sort()
        for name in sorted(dirs + names):
            full = Path(base, name)
            rel = full.relative_to(directory).as_posix()
            mode = os.lstat(full).st_mode
            if stat.S_ISDIR(mode):
                yield ImageEntry(rel, "dir")
            elif stat.S_ISREG(mode):
                data = full.read_bytes()
                total += len(data)
                if total > MAX_ARCHIVE_BYTES:
                    bound = f"exceeds flow-runner's {MAX_ARCHIVE_BYTES:,}-byte bound"
                    raise PackageError(str(directory), "", bound)
                yield ImageEntry(rel, "file", data)
            else:
                yield ImageEntry(rel, "other")


def _unreadable(exc: OSError) -> None:
    raise PackageError(str(exc.filename), "", f"cannot read the package: {exc.strerror}") from exc


def cache_dir() -> Path:
    """Where package files read from images are kept (``$XDG_CACHE_HOME/flow-runner``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flow-runner" / "packages"


async def _stored_files(source: ImageSource, root: str) -> dict[str, bytes] | None:
    """The package files of an image, from the disk cache or else from the image.

    An image id is the digest of the image's content, so an entry never goes stale; the
    cache saves each new process the create/get_archive/remove round trip (about 60 ms).
    Entries are re-validated like a fresh read; an unreadable entry is simply read again.
    """
    key = hashlib.sha256(f"{source.image_id}\0{root}".encode()).hexdigest()
    path = cache_dir() / f"{key}.json"
    cached = await anyio.to_thread.run_sync(_cached, path)
    if cached is not False:
        return cached
    try:
        entries = await source.files(root, max_bytes=MAX_ARCHIVE_BYTES)
    except FilesTooLarge as exc:
        raise PackageError(
            root, "", f"the package exceeds flow-runner's {MAX_ARCHIVE_BYTES:,}-byte bound"
        ) from exc
    files = None if entries is None else files_from_entries(entries, root)
    await anyio.to_thread.run_sync(_store, path, files)
    return files


def _cached(path: Path) -> dict[str, bytes] | Literal[False] | None:
    """The disk cache's entry: files, ``None`` (no package dir), or ``False`` (a miss)."""
    try:
        stored = json.loads(path.read_bytes())
        if stored is None:
            return None
        return {name: base64.b64decode(data) for name, data in stored.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def _store(path: Path, files: dict[str, bytes] | None) -> None:
    encoded = None if files is None else {n: base64.b64encode(d).decode() for n, d in files.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(encoded))
        os.replace(partial, path)
    except OSError:
        pass  # a read-only or full cache only costs the next process a re-read


def files_from_entries(entries: Iterable[ImageEntry], root: str) -> dict[str, bytes]:
    """Package path → bytes of every regular file, held to the Package/1 path rules."""
    files: dict[str, bytes] = {}
    folded: dict[str, str] = {}
    for entry in entries:
        path = entry.path
        if entry.kind == "dir":
            continue
        if entry.kind != "file":
            raise PackageError(
                path,
                "",
                "symlinks, hard links and special files are not allowed in a package; "
                "copy the file in instead",
            )
        _check_path(path)
        fold = unicodedata.normalize("NFC", path).casefold()
        if fold in folded:
            raise PackageError(path, "", f"collides with {folded[fold]!r} (case or NFC)")
        folded[fold] = path
        if len(files) == MAX_FILES:
            raise PackageError(root, "", f"a package holds at most {MAX_FILES:,} files")
        files[path] = entry.data
    return files


def _check_path(path: str) -> None:
    encoded = path.encode("utf-8", "surrogateescape")
    segments = path.split("/")
    if (
        len(encoded) > MAX_PATH_BYTES
        or len(segments) > MAX_SEGMENTS
        or any(s in ("", ".", "..") or len(s.encode()) > 255 for s in segments)
        or "\\" in path
        or "\0" in path
        or unicodedata.normalize("NFC", path) != path
    ):
        raise PackageError(
            path, "", "not a valid Package/1 path (NFC, `/`, ≤64 segments, ≤1,024 bytes)"
        )


def package_digest(files: dict[str, bytes]) -> str:
    """``sha256:<hex>`` of the file tree by the Package/1 digest rule (§14)."""
    digest = hashlib.sha256(DIGEST_DOMAIN + struct.pack(">Q", len(files)))
    for path in sorted(files, key=lambda p: p.encode()):
        name, content = path.encode(), files[path]
        digest.update(b"\x01" + struct.pack(">I", len(name)) + name)
        digest.update(struct.pack(">Q", len(content)) + content)
    return "sha256:" + digest.hexdigest()


def package_from_files(files: dict[str, bytes], image_id: str = "", root: str = "") -> Package:
    """Validate a package's files: FLOW.md, its references and the root schemas.

    The YAML, contract and Schema/1 machinery is imported here, not with the module: a
    run of an image without a package (or with a cached absence) never pays for it.
    """
    from runner.contracts.capability import (
        MAX_CONTRACT_BYTES,
        ContractError,
        parse_contract,
    )
    from runner.contracts.channel import parse_channel_contract
    from runner.contracts.schema1 import SchemaError, compile_schema1_file
    from runner.package.frontmatter import parse_flow_md

    if FLOW_MD not in files:
        raise PackageError(FLOW_MD, "", "missing: every package has a root FLOW.md")
    meta = parse_flow_md(files[FLOW_MD])
    uses: dict[str, CapabilityContract | None] = {}
    for slot, ref in meta.uses.items():
        if ref is None:
            uses[slot] = None
            continue
        data = _referenced(files, ref, f"uses.{slot}.contract")
        try:
            uses[slot] = parse_contract(data, source=ref[2:])
        except ContractError as exc:
            raise PackageError(ref[2:], exc.pointer, f"{exc.code}: {exc.message}") from None
    channel_contracts: dict[str, ChannelContract] = {}
    for port, decl in meta.channels.items():
        if decl.contract is not None:
            data = _referenced(files, decl.contract, f"channels.{port}.contract")
            try:
                channel_contracts[decl.contract] = parse_channel_contract(
                    data, source=decl.contract[2:]
                )
            except ContractError as exc:
                raise PackageError(
                    decl.contract[2:], exc.pointer, f"{exc.code}: {exc.message}"
                ) from None
    schemas: dict[str, Schema1Validator] = {}
    documents: dict[str, JSONValue] = {}
    for kind in SCHEMA_FILES:
        name = f"{kind}.schema.json"
        if name in files:
            try:
                schemas[kind] = compile_schema1_file(files[name])
            except SchemaError as exc:
                raise PackageError(name, exc.pointer or "/", f"{exc.code}: {exc.message}") from None
            documents[kind] = json1.loads(files[name])
    return Package(
        image_id=image_id,
        root=root,
        name=meta.name,
        description=meta.description,
        outcomes=meta.outcomes,
        uses=uses,
        attachments=meta.attachments,
        channels=meta.channels,
        schemas=schemas,
        schema_documents=documents,
        digest=package_digest(files),
        file_count=len(files),
        channel_contracts=channel_contracts,
        json_files={
            path: data
            for path, data in files.items()
            if path.endswith(".json") and len(data) <= MAX_CONTRACT_BYTES
        },
    )


def _referenced(files: dict[str, bytes], ref: str, key: str) -> bytes:
    data = files.get(ref[2:])
    if data is None:
        raise PackageError(
            FLOW_MD, key, f"{ref!r} names no regular file in the package (exact case)"
        )
    return data


def summary(package: Package) -> dict[str, JSONValue]:
    """What ``flow-runner inspect`` shows: declarations, contract identities, schemas."""
    uses: dict[str, JSONValue] = {}
    for slot, contract in package.uses.items():
        uses[slot] = (
            {"local": True}
            if contract is None
            else {
                "contract": contract.identity.id,
                "version": contract.identity.version,
                "digest": contract.identity.digest,
            }
        )
    channels: dict[str, JSONValue] = {
        name: {
            key: value
            for key, value in {
                "direction": port.direction,
                "required": port.required,
                "contract": _channel_contract(package, port.contract),
                "delivery": port.delivery,
                "start": port.start,
                "schema": _schema_summary(port.schema) if port.schema is not None else None,
            }.items()
            if value is not None
        }
        for name, port in package.channels.items()
    }
    return {
        "image": package.image_id,
        "name": package.name,
        "description": package.description,
        "outcomes": dict(package.outcomes),
        "uses": uses,
        "attachments": dict(package.attachments),
        "channels": channels,
        "schemas": {
            kind: _schema_summary(document) for kind, document in package.schema_documents.items()
        },
        "digest": package.digest,
        "files": package.file_count,
    }


def _channel_contract(package: Package, ref: str | None) -> JSONValue:
    """A port's contract as inspect shows it: where it is and its identity."""
    if ref is None:
        return None
    identity = package.channel_contracts[ref].identity
    return {"path": ref, "id": identity.id, "version": identity.version, "digest": identity.digest}


def _schema_summary(document: JSONValue) -> JSONValue:
    """A schema's top level: type, required and property names."""
    if not isinstance(document, dict):
        return document
    out: dict[str, JSONValue] = {}
    for key in ("type", "required", "properties", "additionalProperties"):
        if key in document:
            value = document[key]
            names: list[JSONValue] = list(sorted(value)) if isinstance(value, dict) else []
            out[key] = names if key == "properties" else value
    return out
