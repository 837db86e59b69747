"""The ``artifacts`` capability: files a flow leaves for people and for later steps.

Every artifact lives under one host directory, the ``root`` option (created if missing),
and is named by a confined path: relative, ``/``-separated, canonical (no empty, ``.`` or
``..`` segments), without backslashes or NUL, at most 1,024 bytes in at most 64 segments.
Symbolic links below the root are never followed, not even to places inside it:
directories are opened one segment at a time with ``O_NOFOLLOW`` relative to their
parent's descriptor, so a link planted by anyone, at any moment, cannot redirect a read
or a write outside the root. A refused path is the declared error ``invalid-path``.

Methods (contract ``runner/host/capabilities/contracts/artifacts.json``):

* ``write {path, text | base64}`` -> ``{uri, bytes}``: atomically (a temporary file in
  the same directory, flushed and renamed over the name), so readers see the old bytes or
  the new ones, never a mix;
* ``read {path}`` -> ``{text}`` for UTF-8 content, else ``{base64}``; a missing file is
  ``not-found``;
* ``list {prefix?, limit?}`` -> ``{paths, truncated}``: regular files whose path starts
  with ``prefix``, sorted by code point, at most ``limit`` (default 1,000, at most
  10,000).

An artifact's URI is ``artifact://`` followed by its percent-encoded path: the same for
the same path in every run and on every host, and it reveals nothing of the host's
layout; the file is ``<root>/<path>``. Artifacts hold at most 6 MiB (whose base64 form
is JSON/1's largest string); larger ones are ``too-large``.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Final
from urllib.parse import quote

import anyio.to_thread

from runner.json1 import JSONValue

from .provider import (
    CapabilityError,
    InvalidInput,
    OptionReader,
    ProviderConfigError,
    UnknownMethod,
    input_object,
    list_request,
    string_member,
)

MAX_ARTIFACT_BYTES: Final = 6 * 1024 * 1024
MAX_PATH_BYTES: Final = 1_024
MAX_SEGMENTS: Final = 64
MAX_SEGMENT_BYTES: Final = 255
TEMPORARY_PREFIX: Final = ".flow-runner-tmp-"
"""Names of in-progress writes; paths may not use it, and listings skip it."""

_DIRECTORY: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_CHILD_DIRECTORY: Final = _DIRECTORY | os.O_NOFOLLOW
_REFUSED: Final = frozenset({errno.ELOOP, errno.ENOTDIR})
"""What opening a path through a link or a file fails with."""


class ArtifactsProvider:
    """Reads, writes and lists files under one root directory."""

    methods: Final = ("write", "read", "list")

    def __init__(self, options: Mapping[str, JSONValue]) -> None:
        root = OptionReader("artifacts", options, {"root"}).string("root", required=True)
        assert root is not None
        try:
            Path(root).expanduser().mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProviderConfigError(
                f"capability provider 'artifacts': option 'root' = {root!r} cannot be used as "
                f"a directory ({exc.strerror}); point it at a writable directory"
            ) from None
        self.root = os.path.realpath(Path(root).expanduser())

    async def call(self, method: str, input: JSONValue) -> JSONValue:
        """Dispatch ``method``; the file system work runs in a worker thread."""
        work: Callable[[], JSONValue]
        if method == "write":
            fields = input_object(input, required={"path"}, optional={"text", "base64"})
            work = partial(self._write, *_write_request(fields))
        elif method == "read":
            path = string_member(input_object(input, required={"path"}), "path")
            work = partial(self._read, path, _segments(path))
        elif method == "list":
            work = partial(self._list, *list_request(input))
        else:
            raise UnknownMethod(method, self.methods)
        return await anyio.to_thread.run_sync(work)

    def _write(self, path: str, segments: list[str], data: bytes) -> JSONValue:
        directory = self._parent(path, segments, create=True)
        try:
            temporary = f"{TEMPORARY_PREFIX}{secrets.token_hex(8)}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                with open(os.open(temporary, flags, 0o666, dir_fd=directory), "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.rename(temporary, segments[-1], src_dir_fd=directory, dst_dir_fd=directory)
            except BaseException as exc:
                with suppress(FileNotFoundError):
                    os.unlink(temporary, dir_fd=directory)
                if isinstance(exc, OSError) and exc.errno == errno.EISDIR:
                    raise _invalid(path, f"{path!r} is a directory") from None
                raise
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
        return {"uri": artifact_uri(path), "bytes": len(data)}

    def _read(self, path: str, segments: list[str]) -> JSONValue:
        directory = self._parent(path, segments, create=False)
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            descriptor = os.open(segments[-1], flags, dir_fd=directory)
        except FileNotFoundError:
            raise CapabilityError("not-found", {"path": path}) from None
        except OSError as exc:
            if exc.errno not in _REFUSED:
                raise
            raise _refusal(directory, segments[-1], path, path) from None
        finally:
            os.close(directory)
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
                raise _invalid(path, f"{path!r} is {kind}")
            with open(descriptor, "rb", closefd=False) as file:
                data = file.read(MAX_ARTIFACT_BYTES + 1)
        finally:
            os.close(descriptor)
        if len(data) > MAX_ARTIFACT_BYTES:
            raise _too_large(path, max(info.st_size, len(data)))
        try:
            return {"text": data.decode()}
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(data).decode()}

    def _list(self, prefix: str, limit: int) -> JSONValue:
        found: list[str] = []
        pending = [("", os.open(self.root, _DIRECTORY))]
        try:
            while pending:
                base, directory = pending.pop()
                try:
                    with os.scandir(directory) as entries:
                        for entry in entries:
                            path = base + entry.name
                            if entry.is_symlink() or _path_problem(path) is not None:
                                continue
                            if entry.is_dir(follow_symlinks=False):
                                inner = path + "/"
                                if inner.startswith(prefix) or prefix.startswith(inner):
                                    child = _open_child(directory, entry.name)
                                    if child is not None:
                                        pending.append((inner, child))
                            elif entry.is_file(follow_symlinks=False) and path.startswith(prefix):
                                found.append(path)
                finally:
                    os.close(directory)
        finally:
            for _, directory in pending:
                os.close(directory)
        found.sort()
        return {"paths": list(found[:limit]), "truncated": len(found) > limit}

    def _parent(self, path: str, segments: list[str], *, create: bool) -> int:
        """A descriptor of the directory that holds the last segment.

        Walks from the root one segment at a time with ``O_NOFOLLOW``, creating missing
        directories when ``create``; a link or a file on the way is ``invalid-path``, a
        missing directory (reading) ``not-found``.
        """
        directory = os.open(self.root, _DIRECTORY)
        try:
            for index, name in enumerate(segments[:-1]):
                try:
                    child = os.open(name, _CHILD_DIRECTORY, dir_fd=directory)
                except FileNotFoundError:
                    if not create:
                        raise CapabilityError("not-found", {"path": path}) from None
                    with suppress(FileExistsError):  # another writer may have made it
                        os.mkdir(name, dir_fd=directory)
                    child = os.open(name, _CHILD_DIRECTORY, dir_fd=directory)
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


def artifact_uri(path: str) -> str:
    """``artifact://`` and the path, percent-encoded (RFC 3986) except for ``/``."""
    return "artifact://" + quote(path, safe="/")


def _write_request(fields: dict[str, JSONValue]) -> tuple[str, list[str], bytes]:
    path = string_member(fields, "path")
    segments = _segments(path)
    if ("text" in fields) == ("base64" in fields):
        raise InvalidInput("write takes exactly one of 'text' (UTF-8) and 'base64' (bytes)")
    text, encoded = fields.get("text"), fields.get("base64")
    if isinstance(text, str):
        data = text.encode()
    elif isinstance(encoded, str):
        try:
            data = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise InvalidInput(
                "member 'base64' must be standard base64 (RFC 4648 alphabet, with padding)"
            ) from None
    else:
        raise InvalidInput("member 'text' or 'base64' must be a string")
    if len(data) > MAX_ARTIFACT_BYTES:
        raise _too_large(path, len(data))
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
        return os.open(name, _CHILD_DIRECTORY, dir_fd=directory)
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


def _too_large(path: str, size: int) -> CapabilityError:
    return CapabilityError("too-large", {"path": path, "bytes": size, "limit": MAX_ARTIFACT_BYTES})
