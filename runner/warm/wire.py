"""Messages between a client and the warm runner: JSON objects with descriptors attached.

A message is a 4-byte big-endian length and that many bytes of one ASCII JSON object (a
string with surrogate escapes, as ``os.environ`` holds bytes that are not UTF-8, travels
as ``\\udcXX`` and comes back the same). Descriptors ride with the length (``SCM_RIGHTS``).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence

MAX_BODY = 16 << 20
"""Bytes of one message body: an environment and argv fit many times over."""
MAX_FDS = 250
"""Descriptors in one message (the kernel's ``SCM_MAX_FD`` is 253)."""

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    Message: TypeAlias = dict[str, Any]


class WireError(Exception):
    """The peer sent something that is not a message, or went away in the middle of one."""


def send(sock: socket.socket, message: Message, fds: Sequence[int] = ()) -> None:
    body = json.dumps(message, separators=(",", ":")).encode("ascii")
    header = len(body).to_bytes(4, "big")
    sent = socket.send_fds(sock, [header], list(fds)) if fds else sock.send(header)
    sock.sendall(header[sent:] + body)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[Message, list[int]]:
    """One message and the descriptors that came with it (the caller owns them)."""
    if max_fds:
        header, fds, flags, _ = socket.recv_fds(sock, 4, max_fds)
    else:
        header, fds, flags = sock.recv(4), [], 0
    try:
        if flags & socket.MSG_CTRUNC:
            raise WireError(f"more than {max_fds} descriptors")
        if not header:
            raise WireError("closed")
        header += _exactly(sock, 4 - len(header))
        size = int.from_bytes(header, "big")
        if size > MAX_BODY:
            raise WireError(f"a message of {size} bytes")
        try:
            message = json.loads(_exactly(sock, size))
        except ValueError as exc:
            raise WireError(f"not JSON: {exc}") from None
        if not isinstance(message, dict):
            raise WireError("not a JSON object")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return message, fds


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise WireError("closed in the middle of a message")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
