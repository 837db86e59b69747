"""The ``artifacts`` capability: files a flow leaves for people and for later steps,
under the ``root`` option (contract ``contracts/artifacts.json``). A path is relative,
``/``-separated and canonical, at most 1,024 bytes in 64 segments, else ``invalid-path``;
its URI (``artifact://`` and the percent-encoded path) reveals nothing of the host.

The root may lie where a component can write (an ``rw`` attachment), so no name is
trusted twice: the root is opened once (:func:`.paths.open_directory`) and every call
works relative to it; no link below it is followed; a file is read only once an
``O_PATH`` descriptor shows it regular (a fifo is refused untouched); a write renames a
new file over the name, so it is atomic and never writes through a hard link.

Budgets keep a component from filling the host's disk: ``max_file_bytes`` (default and
most 6 MiB, whose base64 is JSON/1's largest string; past it ``too-large``), and
``max_bytes`` (256 MiB) and ``max_files`` (10,000) under the root (``RESOURCE_EXHAUSTED``);
writes are one at a time, so two cannot both pass a check only one fits.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import secrets
import stat
import threading
from collections.abc import Callable, Generator, Mapping
from contextlib import suppress
from functools import partial
from typing import Final
from urllib.parse import quote

from runner.json1 import JSONValue

from .paths import CHILD_DIRECTORY, DIRECTORY, PathRefused, entry_at, open_directory
from .provider import (
    BlockingProvider,
    CapabilityError,
    InvalidInput,
    OptionReader,
    Usage,
    input_object,
    string_member,
)

MAX_ARTIFACT_BYTES: Final = 6 * 1024 * 1024
"""The most a read returns: its base64 form is JSON/1's largest string."""
DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024
DEFAULT_MAX_FILES: Final = 10_000
MAX_PATH_BYTES: Final = 1_024
MAX_SEGMENTS: Final = 64
MAX_SEGMENT_BYTES: Final = 255
TEMPORARY_PREFIX: Final = ".flow-runner-tmp-"
"""Names of in-progress writes; paths may not use it, and listings skip it."""

_REFUSED: Final = frozenset({errno.ELOOP, errno.ENOTDIR})
"""What opening a path through a link or a file fails with."""
_OPTIONS: Final = ("root", "max_bytes", "max_files", "max_file_bytes")


class ArtifactsProvider(BlockingProvider):
    """Reads, writes and lists files under one root directory."""

    methods = ("write", "read", "list")

    def __init__(self, options: Mapping[str, JSONValue]) -> None:
        reader = OptionReader("artifacts", options, _OPTIONS)
        root = reader.string("root", required=True)
        assert root is not None
        self.max_file_bytes = reader.integer(
            "max_file_bytes", default=MAX_ARTIFACT_BYTES, low=0, high=MAX_ARTIFACT_BYTES
        )
        self.usage = Usage(
            reader.budget(
                "max_files", DEFAULT_MAX_FILES, "files and directories", "write to fewer paths"
            ),
            reader.budget("max_bytes", DEFAULT_MAX_BYTES, "bytes", "write less, or to fewer files"),
        )
        try:
            opened = open_directory(os.path.expanduser(root))
        except (OSError, PathRefused) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else exc
            problem = f"cannot be used as a directory ({reason}); point it at a writable directory"
            raise reader.error("root", f"= {root!r} {problem}") from None
        self.root = opened.path
        self._root = opened.descriptor
        self._writing = threading.Lock()
        self.usage.add(*self._held())

    def prepare(self, method: str, input: JSONValue) -> Callable[[], JSONValue]:
        if method == "write":
            fields = input_object(input, required={"path"}, optional={"text", "base64"})
            return partial(self._write, *_write_request(fields, self.max_file_bytes))
        path = string_member(input_object(input, required={"path"}), "path")
        return partial(self._read, path, _segments(path))

    def close(self) -> None:
        """Close the root's descriptor."""
        os.close(self._root)

    def _write(self, path: str, segments: list[str], data: bytes) -> JSONValue:
        with self._writing:
            directory = self._parent(path, segments, create=True)
            try:
                replaced = entry_at(directory, segments[-1])
                old = replaced.st_size if replaced and stat.S_ISREG(replaced.st_mode) else 0
                change = len(data) - old, 0 if replaced else 1
                self.usage.check(*change)
                _replace(directory, path, segments[-1], data)
            finally:
                os.close(directory)
            self.usage.add(*change)
        return {"uri": "artifact://" + quote(path, safe="/"), "bytes": len(data)}

    def _read(self, path: str, segments: list[str]) -> JSONValue:
        directory = self._parent(path, segments, create=False)
        try:
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC  # opens nothing, blocks on nothing
            handle = os.open(segments[-1], flags, dir_fd=directory)
        except FileNotFoundError:
            raise CapabilityError("not-found", {"path": path}) from None
        finally:
            os.close(directory)
        try:
            info = os.fstat(handle)
            if stat.S_ISLNK(info.st_mode):
                raise _invalid(
                    path, f"{path!r} is a symbolic link; links are not followed in the root"
                )
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
                raise _invalid(path, f"{path!r} is {kind}")
            # the same inode, now opened for its bytes: it can no longer be swapped
            with open(f"/proc/self/fd/{handle}", "rb") as file:
                data = file.read(MAX_ARTIFACT_BYTES + 1)
        finally:
            os.close(handle)
        if len(data) > MAX_ARTIFACT_BYTES:
            raise _too_large(path, max(info.st_size, len(data)), MAX_ARTIFACT_BYTES)
        try:
            return {"text": data.decode()}
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(data).decode()}

    def list_(self, prefix: str, limit: int) -> JSONValue:
        def wanted(inner: str) -> bool:
            within = inner.startswith(prefix) or prefix.startswith(inner)
            return within and _path_problem(inner[:-1]) is None

        found = sorted(
            path
            for path, entry in self._entries(wanted)
            if entry.is_file(follow_symlinks=False)
            and path.startswith(prefix)
            and _path_problem(path) is None
        )
        return {"paths": list(found[:limit]), "truncated": len(found) > limit}

    def _held(self) -> tuple[int, int]:
        """The bytes of the regular files under the root, and its number of entries."""
        size = count = 0
        for _, entry in self._entries(lambda inner: True):
            count += 1
            with suppress(FileNotFoundError):  # gone since it was listed
                info = entry.stat(follow_symlinks=False)
                size += info.st_size if stat.S_ISREG(info.st_mode) else 0
        return size, count

    def _entries(
        self, descend: Callable[[str], bool]
    ) -> Generator[tuple[str, os.DirEntry[str]], None, None]:
        """Every ``(path, entry)`` below the root, entering directories (not links) that
        ``descend`` accepts as ``path + "/"``."""
        pending = [("", os.open(".", DIRECTORY, dir_fd=self._root))]
        try:
            while pending:
                base, directory = pending.pop()
                try:
                    with os.scandir(directory) as entries:
                        for entry in entries:
                            path = base + entry.name
                            yield path, entry
                            if entry.is_dir(follow_symlinks=False) and descend(path + "/"):
                                child = _open_child(directory, entry.name)
                                if child is not None:
                                    pending.append((path + "/", child))
                finally:
                    os.close(directory)
        finally:
            for _, directory in pending:
                os.close(directory)

    def _parent(self, path: str, segments: list[str], *, create: bool) -> int:
        """A descriptor of the directory holding the last segment, walked to with
        ``O_NOFOLLOW``; with ``create``, missing directories are made (counted against
        ``max_files``), else they are ``not-found``; a link or file on the way is
        ``invalid-path``."""
        directory = os.open(".", DIRECTORY, dir_fd=self._root)
        try:
            for index, name in enumerate(segments[:-1]):
                try:
                    child = os.open(name, CHILD_DIRECTORY, dir_fd=directory)
                except FileNotFoundError:
                    if not create:
                        raise CapabilityError("not-found", {"path": path}) from None
                    self.usage.check(0, 1)
                    with suppress(FileExistsError):  # another process may have made it
                        os.mkdir(name, dir_fd=directory)
                        self.usage.add(0, 1)
                    child = os.open(name, CHILD_DIRECTORY, dir_fd=directory)
                except OSError as exc:
                    if exc.errno not in _REFUSED:
                        raise
                    raise _refusal(directory, name, "/".join(segments[: index + 1]), path) from None
                os.close(directory)
                directory = child
        except BaseException:
            os.close(directory)
            raise
        return directory


def _replace(directory: int, path: str, name: str, data: bytes) -> None:
    """Write ``data`` to a new file in ``directory`` and rename it over ``name``."""
    temporary = f"{TEMPORARY_PREFIX}{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with open(os.open(temporary, flags, 0o666, dir_fd=directory), "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException as exc:
        with suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=directory)
        if isinstance(exc, OSError) and exc.errno == errno.EISDIR:
            raise _invalid(path, f"{path!r} is a directory") from None
        raise
    os.fsync(directory)  # the rename itself survives a crash


def _write_request(fields: dict[str, JSONValue], limit: int) -> tuple[str, list[str], bytes]:
    path = string_member(fields, "path")
    segments = _segments(path)
    if ("text" in fields) == ("base64" in fields):
        raise InvalidInput("write takes exactly one of 'text' (UTF-8) and 'base64' (bytes)")
    if "text" in fields:
        data = string_member(fields, "text").encode()
    else:
        try:
            data = base64.b64decode(string_member(fields, "base64"), validate=True)
        except binascii.Error:
            raise InvalidInput(
                "member 'base64' must be standard base64 (RFC 4648 alphabet, with padding)"
            ) from None
    if len(data) > limit:
        raise _too_large(path, len(data), limit)
    return path, segments, data


def _segments(path: str) -> list[str]:
    problem = _path_problem(path)
    if problem is not None:
        raise _invalid(path, problem)
    return path.split("/")


def _path_problem(path: str) -> str | None:
    """Why ``path`` is not a confined artifact path, or ``None``."""
    if not path:
        return "the path is empty"
    if "\0" in path:
        return "the path contains a NUL character"
    if "\\" in path:
        return "the path contains a backslash; separate segments with '/'"
    if path.startswith("/"):
        return "the path is absolute; artifact paths are relative to the artifact root"
    try:
        size = len(path.encode())
    except UnicodeEncodeError:  # a file name that is not UTF-8, met while listing
        return "the path is not valid UTF-8"
    if size > MAX_PATH_BYTES:
        return f"the path is longer than {MAX_PATH_BYTES:,} bytes"
    segments = path.split("/")
    if len(segments) > MAX_SEGMENTS:
        return f"the path has more than {MAX_SEGMENTS} segments"
    for segment in segments:
        if not segment:
            return "the path has an empty segment (a doubled or trailing '/')"
        if segment in (".", ".."):
            return f"the path has a {segment!r} segment; paths are canonical and stay in the root"
        if len(segment.encode()) > MAX_SEGMENT_BYTES:
            return f"a segment is longer than {MAX_SEGMENT_BYTES} bytes"
        if segment.startswith(TEMPORARY_PREFIX):
            return f"names starting with {TEMPORARY_PREFIX!r} are reserved for writes in progress"
    return None


def _open_child(directory: int, name: str) -> int | None:
    """A subdirectory's descriptor for listing; ``None`` if it vanished or became a link."""
    try:
        return os.open(name, CHILD_DIRECTORY, dir_fd=directory)
    except OSError as exc:
        if exc.errno in _REFUSED or exc.errno == errno.ENOENT:
            return None
        raise


def _refusal(directory: int, name: str, shown: str, path: str) -> CapabilityError:
    """``invalid-path`` for a link or a non-directory met at ``name`` in ``directory``."""
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        is_link = False
    if is_link:
        return _invalid(path, f"{shown!r} is a symbolic link; links are not followed in the root")
    return _invalid(path, f"{shown!r} is not a directory")


def _invalid(path: str, reason: str) -> CapabilityError:
    return CapabilityError("invalid-path", {"path": path, "reason": reason})


def _too_large(path: str, size: int, limit: int) -> CapabilityError:
    return CapabilityError("too-large", {"path": path, "bytes": size, "limit": limit})
