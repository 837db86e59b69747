"""The directory of the warm runner's sockets: only its user may enter it.

The socket runs commands as the user, so reaching it must take what the user has. It is
``$XDG_RUNTIME_DIR/flow-runner`` (an absolute ``XDG_RUNTIME_DIR``), else
``/tmp/flow-runner-<uid>``, created with mode 0700; a directory found there is used only
when it is no symbolic link, is the user's, grants nothing to group or others, and sits in
a parent nobody else can rename it in (not writable by others, or sticky). An unsafe one is
never repaired: the server refuses to start, a client runs its command in process. Paths
are strings: the client imports this on every command, and ``pathlib`` costs more.
"""

from __future__ import annotations

import fcntl
import os
import stat

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    from collections.abc import Mapping

SOCKET_PATH_MAX = 107
"""Bytes of a unix socket's path, ``sun_path`` without its terminating NUL (Linux)."""


class UnsafeDirectory(Exception):
    """The socket directory exists but others could reach or replace what is in it."""


def directory(environ: Mapping[str, str]) -> str:
    """The socket directory for this user in this environment."""
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return os.path.join(runtime, "flow-runner")
    return f"/tmp/flow-runner-{os.getuid()}"


def unsafe(path: str) -> str | None:
    """Why ``path`` must not hold a socket, or None (FileNotFoundError: no such directory)."""
    found = os.lstat(path)
    uid = os.getuid()
    if stat.S_ISLNK(found.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(found.st_mode):
        return "is not a directory"
    if found.st_uid != uid:
        return f"is owned by uid {found.st_uid}, not by {uid}"
    if found.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(found.st_mode):04o}: group or others may use it"
    parent = os.stat(os.path.dirname(path))
    if parent.st_uid not in (0, uid):
        return f"is in a directory owned by uid {parent.st_uid}"
    if parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX:
        return "is in a directory others may write without the sticky bit"
    return None


def ensure(path: str) -> None:
    """Create the directory (mode 0700) unless it exists; refuse it unless it is safe."""
    from contextlib import suppress  # not on the console script's path: servers only

    with suppress(FileExistsError):
        os.mkdir(path, 0o700)
    reason = unsafe(path)
    if reason is not None:
        raise UnsafeDirectory(
            f"{path} {reason}; remove it (or set XDG_RUNTIME_DIR to a directory of yours)"
        )


def socket_path(path: str, key: str) -> str:
    return os.path.join(path, f"{key}.sock")


def lock(path: str) -> int | None:
    """An open descriptor holding the lock file ``path`` (the server's, for its life: two
    servers never share a socket name), or None if another holds it. A holder removes the
    file before it lets go, so a lock on a file no longer at ``path`` is retried."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def unlock(path: str, fd: int) -> None:
    """Remove the lock file, then let go of it (see :func:`lock`)."""
    try:
        os.unlink(path)
    finally:
        os.close(fd)
