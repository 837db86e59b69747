"""Opening a provider's host directory so that nobody but the host can redirect it.

A provider's ``root`` or ``path`` may lie in a directory a component can write (an ``rw``
attachment), where a link swapped in would turn the host's writes, as its user (often
root), into writes where the component chooses. :func:`open_directory` walks the path a
name at a time with ``O_NOFOLLOW``, following a link only where nobody but the host could
have made it, and tells (:attr:`HostDirectory.exposed`) whether anyone else could change
a name, which a provider opening names by path (SQLite) must refuse. It judges by owners
and mode bits: a component running as the host's user is the host.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from typing import Final

DIRECTORY: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
CHILD_DIRECTORY: Final = DIRECTORY | os.O_NOFOLLOW
MAX_LINKS: Final = 40
"""Links followed in one walk, as Linux's own resolution allows."""


class PathRefused(ValueError):
    """The path leads through a link that someone else could have planted."""


@dataclass(frozen=True)
class HostDirectory:
    """An open directory reached by :func:`open_directory`."""

    descriptor: int
    path: str
    """Its real path (links resolved) as the walk found it."""
    exposed: str | None
    """Why someone else could change a name on the way or in it, or ``None``."""


def open_directory(path: str) -> HostDirectory:
    """Open the directory ``path`` (relative to the working directory), creating missing
    ones; raises :class:`PathRefused` for a link someone else could have
    planted or too many links, and ``OSError`` (``NotADirectoryError`` for a file)."""
    names = deque(os.path.join(os.getcwd(), path).split("/"))
    descriptor = os.open("/", DIRECTORY)
    real, here, exposed, links = "/", os.fstat(descriptor), None, 0
    try:
        while names:
            name = names.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                step, real = os.open("..", DIRECTORY, dir_fd=descriptor), os.path.dirname(real)
            else:
                entry = _entry(descriptor, name)
                shown = os.path.join(real, name)
                if stat.S_ISLNK(entry.st_mode):
                    if not _holds(here, entry):
                        raise PathRefused(
                            f"{shown!r} is a symbolic link in a directory others can write "
                            f"({_owner(here)}); such links are never followed"
                        )
                    links += 1
                    if links > MAX_LINKS:
                        raise PathRefused(f"more than {MAX_LINKS} symbolic links on the way")
                    target = os.readlink(name, dir_fd=descriptor)
                    names.extendleft(reversed(target.split("/")))
                    if not target.startswith("/"):
                        continue
                    step, real = os.open("/", DIRECTORY), "/"
                else:
                    # ELOOP here: the name became a link since it was looked at
                    step = os.open(name, CHILD_DIRECTORY, dir_fd=descriptor)
                    if exposed is None and not _holds(here, entry):
                        exposed = f"{real!r} can be written by others ({_owner(here)})"
                    real = shown
            os.close(descriptor)
            descriptor, here = step, os.fstat(step)
        if exposed is None and _others_can_write(here):
            exposed = f"{real!r} can be written by others ({_owner(here)})"
    except BaseException:
        os.close(descriptor)
        raise
    return HostDirectory(descriptor, real, exposed)


def entry_at(directory: int, name: str) -> os.stat_result | None:
    """The entry ``name`` in ``directory`` (a link itself, not followed), or ``None``."""
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _entry(directory: int, name: str) -> os.stat_result:
    """The entry ``name`` in ``directory``, made a directory if missing."""
    entry = entry_at(directory, name)
    if entry is not None:
        return entry
    with suppress(FileExistsError):  # another process may have made it meanwhile
        os.mkdir(name, dir_fd=directory)
    return os.stat(name, dir_fd=directory, follow_symlinks=False)


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _others_can_write(directory: os.stat_result) -> bool:
    return not _trusted(directory.st_uid) or bool(directory.st_mode & 0o022)


def _holds(directory: os.stat_result, entry: os.stat_result) -> bool:
    """Whether only the host can replace ``entry`` in ``directory``: the directory is
    the host's and nobody else may write it, or it is sticky and the entry is the host's."""
    if not _others_can_write(directory):
        return True
    sticky = bool(directory.st_mode & stat.S_ISVTX)
    return _trusted(directory.st_uid) and sticky and _trusted(entry.st_uid)


def _owner(directory: os.stat_result) -> str:
    return f"owner uid {directory.st_uid}, mode {stat.S_IMODE(directory.st_mode):04o}"
