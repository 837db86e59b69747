"""Reading a FLOW package's files out of an image, or a directory, without running it.

The directory is the image label ``flow.package`` (default ``/flow/package``); the
sandbox backend reads its files (:class:`~runner.sandbox.base.ImageSource`), so no
component code runs before the package is validated (PROTOCOL.md §14, §15.3). An image
without ``FLOW.md`` there carries no package and runs unchecked. Results are cached per
image id (content-addressed, so never stale), in this process and on disk.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import threading
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import anyio

from runner.package import FLOW_MD
from runner.package.errors import PackageError
from runner.sandbox.base import ImageEntry, ImageSource, Sandbox
from runner.sandbox.errors import FilesTooLarge

if TYPE_CHECKING:
    from runner.package.parse import Package


PACKAGE_LABEL: Final = "flow.package"
DEFAULT_PACKAGE_DIR: Final = "/flow/package"
MAX_ARCHIVE_BYTES: Final = 256 * 1024 * 1024
"""flow-runner's bound on a package read into memory (Package/1 allows 4 GiB)."""
MAX_FILES: Final = 65_536
MAX_PATH_BYTES: Final = 1_024
MAX_SEGMENTS: Final = 64


_cache: dict[str, Package | None] = {}
_cache_lock = threading.Lock()


async def sandbox_package(sandbox: Sandbox) -> Package | None:
    """The package of the image ``sandbox`` runs (cached per image id), or ``None`` when it
    carries none; raises :class:`PackageError` for a broken package, ``SandboxError`` for
    a missing image or engine."""
    source = await sandbox.image_source()
    if source is None:
        return None
    image_id = source.image_id
    with _cache_lock:
        if image_id in _cache:
            return _cache[image_id]
    root = source.labels.get(PACKAGE_LABEL) or DEFAULT_PACKAGE_DIR
    files = await _stored_files(source, root)
    package = None
    if files is not None and FLOW_MD in files:
        from runner.package.parse import package_from_files

        package = await anyio.to_thread.run_sync(package_from_files, files, image_id, root)
    with _cache_lock:
        _cache[image_id] = package
    return package


def directory_package(directory: Path) -> Package:
    """The package in a host directory (``--package DIR``), read afresh and held to the
    rules of one in an image; no ``FLOW.md`` is an error, since the user named a package."""
    from runner.package.parse import package_from_files

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


async def _stored_files(source: ImageSource, root: str) -> dict[str, bytes] | None:
    """The package files of an image, from the disk cache (under ``$XDG_CACHE_HOME``) or
    else from the image (an entry is re-validated like a fresh read; an unreadable one is
    read again)."""
    key = hashlib.sha256(f"{source.image_id}\0{root}".encode()).hexdigest()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = cache / "flow-runner" / "packages" / f"{key}.pack"
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


_CACHE_MAGIC = b"flow-runner package cache 1\n"
_NO_PACKAGE = b"none\n"
_FILES = b"files\n"
_RECORD = struct.Struct(">IQ")
"""Each file of an entry: its path's length and its size, then the path and the bytes."""


def _cached(path: Path) -> dict[str, bytes] | Literal[False] | None:
    """The disk cache's entry: files, ``None`` (no package dir), or ``False`` (a miss:
    anything that does not read back whole and within the bounds). Read record by record,
    so the files are the one copy in memory."""
    try:
        with path.open("rb") as entry:
            if entry.readline(64) != _CACHE_MAGIC:
                return False
            kind = entry.readline(64)
            if kind == _NO_PACKAGE:
                return None if not entry.read(1) else False
            if kind != _FILES:
                return False
            files: dict[str, bytes] = {}
            total = 0
            while head := entry.read(_RECORD.size):
                name_size, size = _RECORD.unpack(head)
                total += size
                if name_size > MAX_PATH_BYTES or total > MAX_ARCHIVE_BYTES:
                    return False
                name = entry.read(name_size)
                data = entry.read(size)
                if len(name) != name_size or len(data) != size or len(files) == MAX_FILES:
                    return False
                files[name.decode("utf-8", "surrogateescape")] = data
            return files
    except (OSError, struct.error, UnicodeError):
        return False


def _store(path: Path, files: dict[str, bytes] | None) -> None:
    """Write the cache entry under a temporary name, then rename: a magic line, ``none``
    or ``files``, then each file as a :data:`_RECORD`, its path and its bytes."""
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("wb") as entry:
            entry.write(_CACHE_MAGIC + (_NO_PACKAGE if files is None else _FILES))
            for name, data in (files or {}).items():
                encoded = name.encode("utf-8", "surrogateescape")
                entry.write(_RECORD.pack(len(encoded), len(data)) + encoded)
                entry.write(data)
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)  # a read-only or full cache costs a re-read only


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
