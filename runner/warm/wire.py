"""Messages between a client and the warm runner: dicts with descriptors attached.

A message is a 4-byte big-endian length and that many bytes of one dict in :mod:`marshal`'s
format (strs, ints, floats, bools, None, lists and dicts; a string with surrogate escapes,
as ``os.environ`` holds bytes that are not UTF-8, comes back the same). marshal costs the
client no import, and both ends are the same interpreter (the installation key says so);
the peer is this uid's (``SO_PEERCRED``), which could as well signal the server, so its
bytes cross no trust boundary. Descriptors ride with the length (``SCM_RIGHTS``). The
client imports this on every warm command: ``_socket``, not ``socket`` (~3 ms).
"""

from __future__ import annotations

import marshal
import os
import sys
from _socket import CMSG_LEN, MSG_CTRUNC, SCM_RIGHTS, SOL_SOCKET

MAX_BODY = 16 << 20
"""Bytes of one message body: an environment and argv fit many times over."""
MAX_FDS = 250
"""Descriptors in one message (the kernel's ``SCM_MAX_FD`` is 253)."""

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    from _socket import socket
    from collections.abc import Sequence
    from typing import Any, TypeAlias

    Message: TypeAlias = dict[str, Any]


class WireError(Exception):
    """The peer sent something that is not a message, or went away in the middle of one."""


def send(sock: socket, message: Message, fds: Sequence[int] = ()) -> None:
    body = marshal.dumps(message)
    header = len(body).to_bytes(4, "big")
    if fds:
        rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)
        sent = sock.sendmsg([header], [(SOL_SOCKET, SCM_RIGHTS, rights)])
    else:
        sent = sock.send(header)
    sock.sendall(header[sent:] + body)


def receive(sock: socket, max_fds: int = 0) -> tuple[Message, list[int]]:
    """One message and the descriptors that came with it (the caller owns them)."""
    header, ancillary, flags, _ = sock.recvmsg(4, CMSG_LEN(4 * max_fds) if max_fds else 0)
    fds = [
        int.from_bytes(data[i : i + 4], sys.byteorder)
        for level, kind, data in ancillary
        if (level, kind) == (SOL_SOCKET, SCM_RIGHTS)
        for i in range(0, len(data) - 3, 4)
    ]
    try:
        if flags & MSG_CTRUNC:
            raise WireError(f"more than {max_fds} descriptors")
        if not header:
            raise WireError("closed")
        header += _exactly(sock, 4 - len(header))
        size = int.from_bytes(header, "big")
        if size > MAX_BODY:
            raise WireError(f"a message of {size} bytes")
        try:
            message = marshal.loads(_exactly(sock, size))
        except (ValueError, EOFError, TypeError, MemoryError) as exc:  # MemoryError: a huge
            raise WireError(f"not a message: {exc!r}") from None  # length claimed in the body
        if not isinstance(message, dict):
            raise WireError("not a dict")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return message, fds


def _exactly(sock: socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise WireError("closed in the middle of a message")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
