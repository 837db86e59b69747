"""Who is at the other end of a unix socket, in the kernel's words (Linux).

``SO_PEERCRED`` (pid, uid, gid as they were at connect) and ``SO_PEERGROUPS`` cannot be
forged by the peer, so these, not anything a request says, decide who may use a warm runner.
"""

from __future__ import annotations

import _socket
import sys
from _socket import SO_PEERCRED, SOL_SOCKET, socket

SO_PEERGROUPS: int = getattr(_socket, "SO_PEERGROUPS", 59)
"""Linux 4.13+; Python does not name it (59 on the common architectures)."""
MAX_GROUPS = 256
"""Python reads at most 1,024 bytes of a socket option: 256 gids."""


def credentials(sock: socket) -> tuple[int, int, int]:
    """The peer's pid, uid and gid."""
    data = sock.getsockopt(SOL_SOCKET, SO_PEERCRED, 12)
    pid, uid, gid = (int.from_bytes(data[i : i + 4], sys.byteorder) for i in (0, 4, 8))
    return pid, uid, gid


def groups(sock: socket) -> frozenset[int]:
    """The peer's gid and supplementary groups (OSError with more than 256)."""
    data = sock.getsockopt(SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_GROUPS)
    found = {int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, len(data), 4)}
    return frozenset({credentials(sock)[2], *found})


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (Ctrl-Z, SIGSTOP, a tracer): it answers nothing
    until continued. A pid that cannot be read is not known to be stopped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            state = stat_file.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")
