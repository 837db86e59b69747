"""The engine's HTTP API, spoken directly for the calls every run makes.

docker-py sends each call through requests and urllib3 in a worker thread: about 1 ms of
runner CPU per call (the environment searched for proxies and ``.netrc``, a connection
pool made per URL, which for a new container id is a new connection anyway, and the
thread's hand-off), and on a loaded machine that CPU is taken from the engine starting
the next containers. A run makes five such calls (create, attach, start, inspect,
remove). Here each is one HTTP/1.1 request on a connection of its own (``Connection:
close``), written and read in the event loop; about 0.1 ms. The attach request, whose
connection becomes the component's stdio, is made on a blocking socket in a worker
thread, as docker-py made it.

Only the transports the Docker backend supports are spoken: the engine's unix socket and
a plain ``tcp://`` address (the attach connection must be a plain socket, read with async
I/O). docker-py still makes the rare calls (``info``, an image's archive, the runner's own
container) and is the client of an address this module does not read as docker-py would
(see :func:`plain_address`); this module knows only HTTP. A process that needs no rare
call never imports docker-py (about 60 ms of a cold start): :meth:`EngineHttp.from_env`
finds the engine and negotiates the API version as ``docker.from_env()`` does.

A call runs to its end, shielded from cancellation and bounded by the client's timeout,
as a call in a worker thread did: a create whose answer is lost to a cancellation would
leave a container nobody knows the id of. What the engine said comes back as a
:class:`Reply`, whatever its status; an engine that does not answer (refused, reset,
closed early, too slow, garbled) is :class:`NoAnswer`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio

MAX_REPLY_BYTES = 64 << 20
"""Bytes of one reply read at most (an inspect document is a few KiB)."""
MAX_HEAD_BYTES = 64 << 10
"""Bytes of a reply's status line and headers read at most."""
_USER_AGENT = "flow-runner"
_HEX = b"0123456789abcdefABCDEF"
DEFAULT_SOCKET: Final = "/var/run/docker.sock"
DEFAULT_TIMEOUT: Final = 60.0
"""docker-py's ``DEFAULT_TIMEOUT_SECONDS``, the timeout of ``docker.from_env()``."""
MINIMUM_API_VERSION: Final = (1, 24)
"""docker-py's ``MINIMUM_DOCKER_API_VERSION``: an engine below it is refused."""
# The forms of DOCKER_HOST read here, matched through ``re``'s own cache: compiled only
# when DOCKER_HOST is set, not by every run's imports.
_TCP: Final = r"tcp://([A-Za-z0-9.-]+):([0-9]{1,5})"
_UNIX: Final = r"unix://(/[^?#;]*[^/?#;])"


class NoAnswer(Exception):
    """The engine did not answer the request (the message says how it failed)."""


@dataclass(frozen=True)
class Reply:
    """The engine's answer: its HTTP status and body."""

    status: int
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise NoAnswer(f"the engine's reply is not JSON ({exc})") from exc

    @property
    def message(self) -> str:
        """The engine's explanation (its ``message`` member), at most 1,000 characters."""
        text = self.body.decode("utf-8", "replace").strip()
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
            text = decoded["message"]
        return (text or f"HTTP status {self.status}")[:1000]


@dataclass(frozen=True)
class EngineHttp:
    """Where the engine listens (a unix socket path, or a TCP host and port), the API
    version negotiated by docker-py, and the client's timeout in seconds."""

    unix_path: str | None
    host: str
    port: int
    version: str
    timeout: float

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> EngineHttp | None:
        """The engine ``docker.from_env()`` would talk to, with the API version it would
        negotiate (``GET /version``, blocking); ``None`` where :func:`plain_address`
        cannot say (let docker-py read the environment). No answer is :class:`NoAnswer`;
        an engine older than docker-py accepts is too."""
        address = plain_address(environ)
        if address is None:
            return None
        unix_path, host, port = address
        probe = cls(unix_path, host, port, "", DEFAULT_TIMEOUT)
        reply = probe.call_blocking("GET", "/version", versioned=False)
        info = reply.json() if reply.status == 200 else None
        version = info.get("ApiVersion") if isinstance(info, dict) else None
        if not isinstance(version, str):
            raise NoAnswer(f"GET /version: {reply.status} {reply.message}")
        numbers = tuple(int(part) for part in version.split(".") if part.isdigit())
        if numbers < MINIMUM_API_VERSION:
            raise NoAnswer(f"the engine's API version {version} is older than 1.24")
        return cls(unix_path, host, port, version, DEFAULT_TIMEOUT)

    @classmethod
    def of(cls, api: Any) -> EngineHttp | None:
        """The address of docker-py's ``APIClient``; ``None`` if it talks TLS, ssh or
        anything else than a plain socket."""
        from docker.transport import UnixHTTPAdapter

        version, timeout = str(api.api_version), float(api.timeout)
        base_url = str(api.base_url)
        if base_url == "http+docker://localhost":
            adapter = api.get_adapter(base_url)
            if isinstance(adapter, UnixHTTPAdapter):
                return cls(adapter.socket_path, "", 0, version, timeout)
            return None
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            return None
        return cls(None, parts.hostname, parts.port or 80, version, timeout)

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: object = None,
        timeout: float | None = None,
    ) -> Reply:
        """Send one request (``body`` as JSON) and read the whole reply, within
        ``timeout`` seconds (default: the client's)."""
        request = self._request(method, path, query, body)
        limit = self.timeout if timeout is None else timeout
        try:
            with anyio.fail_after(limit, shield=True):
                return await self._exchange(request)
        except TimeoutError as exc:
            raise NoAnswer(f"no answer in {limit:.3g} s") from exc

    def call_blocking(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        versioned: bool = True,
    ) -> Reply:
        """:meth:`call`, blocking, for a caller outside the event loop (the sweep)."""
        sock = self._connect_blocking()
        try:
            sock.sendall(self._request(method, path, query, None, versioned=versioned))
            reader = ReplyReader()
            while True:
                chunk = sock.recv(1 << 16)
                reply = reader.feed(chunk) if chunk else reader.end()
                if reply is not None:
                    return reply
        except TimeoutError as exc:
            raise NoAnswer(f"no answer in {self.timeout:g} s") from exc
        except OSError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        finally:
            sock.close()

    def hijack(self, path: str, query: Mapping[str, str]) -> tuple[socket.socket | None, Reply]:
        """POST ``path`` asking to take the connection over (attach); blocking.

        Returns the connected socket (blocking, no timeout) once the engine agreed, or
        ``None`` with its refusal.
        """
        sock = self._connect_blocking()
        try:
            sock.settimeout(self.timeout)
            sock.sendall(self._request("POST", path, query, None, upgrade=True))
            reader = ReplyReader()
            while reader.status is None:
                chunk = sock.recv(MAX_HEAD_BYTES)
                if not chunk:
                    raise NoAnswer("the engine closed the connection before its reply")
                reader.feed(chunk, head_only=True)
            status = reader.status
            if status not in (101, 200):
                sock.close()
                return None, Reply(status, reader.partial())
            if reader.pending:  # the stream starts only when the container does, after this
                raise NoAnswer("the engine sent stream bytes before the container started")
            sock.settimeout(None)
            return sock, Reply(status, b"")
        except OSError as exc:
            sock.close()
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        except BaseException:
            sock.close()
            raise

    def _request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: object,
        *,
        upgrade: bool = False,
        versioned: bool = True,
    ) -> bytes:
        target = urllib.parse.quote(path, safe="/:")
        if versioned:
            target = f"/v{self.version}{target}"
        if query:
            target += "?" + urllib.parse.urlencode(query)
        lines = [f"{method} {target} HTTP/1.1", "Host: docker", f"User-Agent: {_USER_AGENT}"]
        lines += ["Connection: Upgrade", "Upgrade: tcp"] if upgrade else ["Connection: close"]
        payload = b""
        if body is not None:
            payload = json.dumps(body).encode()
            lines.append("Content-Type: application/json")
        if body is not None or method == "POST":
            lines.append(f"Content-Length: {len(payload)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload

    async def _exchange(self, request: bytes) -> Reply:
        """Write the request and read the reply on a socket of its own.

        The socket is read directly, woken by the event loop only when it is readable,
        and the reply ends where its framing says (or at the end of the connection): a
        call costs the event loop one or two wake-ups, which on a loaded machine is
        latency as much as CPU.
        """
        try:
            sock = await self._connect()
        except OSError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        try:
            view = memoryview(request)
            while view:
                try:
                    view = view[sock.send(view) :]
                except BlockingIOError:
                    await anyio.wait_writable(sock.fileno())
            reader = ReplyReader()
            while True:
                try:
                    chunk = sock.recv(1 << 16)
                except BlockingIOError:
                    await anyio.wait_readable(sock.fileno())
                    continue
                reply = reader.feed(chunk) if chunk else reader.end()
                if reply is not None:
                    return reply
        except OSError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        finally:
            sock.close()

    async def _connect(self) -> socket.socket:
        """A connected non-blocking socket to the engine."""
        if self.unix_path is None:
            address = (self.host, self.port)
            sock = await anyio.to_thread.run_sync(socket.create_connection, address, self.timeout)
            sock.setblocking(False)
            return sock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            while True:
                try:
                    sock.connect(self.unix_path)
                except BlockingIOError:  # the engine's backlog is full: wait for room
                    await anyio.wait_writable(sock.fileno())
                else:
                    return sock
        except BaseException:
            sock.close()
            raise

    def _connect_blocking(self) -> socket.socket:
        try:
            if self.unix_path is None:
                return socket.create_connection((self.host, self.port), self.timeout)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                sock.connect(self.unix_path)
            except BaseException:
                sock.close()
                raise
            return sock
        except OSError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__) from exc


def _head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status and the headers (names lower-cased) of a reply's head."""
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise NoAnswer(f"the engine's reply starts {status_line[:80]!r}, not an HTTP status")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(code), headers


class ReplyReader:
    """An HTTP/1.1 reply read incrementally: its head, then its body by its framing
    (``Content-Length``, chunks, or the end of the connection), each byte looked at once.
    Anything that is not such a reply, or exceeds the bounds, is :class:`NoAnswer`."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._scanned = 0
        self._size = 0
        self.status: int | None = None
        self._headers: dict[str, str] = {}
        self._body = bytearray()
        self._chunks_done = False

    @property
    def pending(self) -> bool:
        """True if bytes beyond the head were received and not yet taken as body."""
        return bool(self._data)

    def feed(self, chunk: bytes, *, head_only: bool = False) -> Reply | None:
        """Take ``chunk``; the reply once it is complete (never with ``head_only``)."""
        self._size += len(chunk)
        if self._size > MAX_REPLY_BYTES:
            raise NoAnswer(f"the engine's reply exceeds {MAX_REPLY_BYTES} bytes")
        self._data += chunk
        if self.status is None and not self._read_head():
            return None
        if head_only:
            return None
        return self._complete()

    def end(self) -> Reply:
        """The connection ended: the reply, if it was complete."""
        if self.status is None:
            raise NoAnswer("the engine closed the connection before its reply")
        reply = self._complete()
        if reply is not None:
            return reply
        if self._length() is None and not self._chunked():
            return Reply(self.status, bytes(self._data))  # the body ends with the connection
        raise NoAnswer("the engine's reply ended before its body did")

    def partial(self) -> bytes:
        """What body was received so far (for a refusal's message)."""
        self._complete()
        return bytes(self._body) if self._chunked() else bytes(self._data)

    def _read_head(self) -> bool:
        end = self._data.find(b"\r\n\r\n", max(0, self._scanned - 3))
        if end < 0:
            self._scanned = len(self._data)
            if self._scanned > MAX_HEAD_BYTES:
                raise NoAnswer(f"the engine's reply head exceeds {MAX_HEAD_BYTES} bytes")
            return False
        self.status, self._headers = _head(bytes(self._data[:end]))
        del self._data[: end + 4]
        return True

    def _length(self) -> int | None:
        length = self._headers.get("content-length")
        if length is None:
            return None
        if not length.isdigit():
            raise NoAnswer(f"the engine's reply has Content-Length {length[:40]!r}")
        return int(length)

    def _chunked(self) -> bool:
        return "chunked" in self._headers.get("transfer-encoding", "").lower()

    def _complete(self) -> Reply | None:
        assert self.status is not None
        if self.status < 200 or self.status in (204, 304):
            return Reply(self.status, b"")
        if self._chunked():
            return Reply(self.status, bytes(self._body)) if self._dechunk() else None
        length = self._length()
        if length is None or len(self._data) < length:
            return None
        return Reply(self.status, bytes(self._data[:length]))

    def _dechunk(self) -> bool:
        """Move whole chunks from the received bytes to the body; True at the last one."""
        while not self._chunks_done:
            end = self._data.find(b"\r\n")
            if end < 0:
                return False
            size_text = bytes(self._data[:end]).split(b";", 1)[0].strip()
            if not size_text or size_text.strip(_HEX) or len(size_text) > 16:
                raise NoAnswer(f"the engine's reply has chunk size {size_text[:40]!r}")
            size = int(size_text, 16)
            if len(self._data) < end + 2 + size + 2:
                return False
            self._body += self._data[end + 2 : end + 2 + size]
            del self._data[: end + 2 + size + 2]
            self._chunks_done = size == 0
        return True


def plain_address(environ: Mapping[str, str]) -> tuple[str | None, str, int] | None:
    """Where ``docker.from_env(environment=environ)`` connects, if that is certain without
    docker-py: a unix socket path, or a TCP host and port, with no TLS. ``None`` for
    anything else (a TLS setting, another form of ``DOCKER_HOST``, a Docker CLI context
    other than ``default``), which is docker-py's to read.

    As docker-py: a non-empty ``DOCKER_HOST`` is the address; else the context named by
    ``DOCKER_CONTEXT``, else by ``currentContext`` in the first Docker CLI configuration
    file that exists, whose ``default`` is the local socket. A test holds this to
    docker-py's reading of the same environments.
    """
    if environ.get("DOCKER_CERT_PATH") or environ.get("DOCKER_TLS_VERIFY", "") != "":
        return None
    host = (environ.get("DOCKER_HOST") or "").strip()
    if not host:
        return (DEFAULT_SOCKET, "", 0) if _context_name(environ) == "default" else None
    if host == "unix://":
        return DEFAULT_SOCKET, "", 0
    unix = re.fullmatch(_UNIX, host)
    if unix is not None:
        return unix[1], "", 0
    tcp = re.fullmatch(_TCP, host)
    if tcp is not None and 0 < int(tcp[2]) < 65536:
        return None, tcp[1].lower(), int(tcp[2])
    return None


def _context_name(environ: Mapping[str, str]) -> str | None:
    """The Docker CLI context docker-py would use; ``None`` if it cannot be told."""
    name = environ.get("DOCKER_CONTEXT")
    if name:
        return name
    home = os.path.expanduser("~")
    config_dir = os.environ.get("DOCKER_CONFIG")  # docker-py's own environment, as it reads it
    candidates = [os.path.join(config_dir, "config.json")] if config_dir else []
    candidates += [os.path.join(home, ".docker", "config.json"), os.path.join(home, ".dockercfg")]
    for path in candidates:
        if os.path.exists(path):
            try:
                with open(path) as file:
                    current = json.load(file).get("currentContext", "default")
            except Exception:  # docker-py's reading: an unreadable file means "default"
                return "default"
            return current if isinstance(current, str) else None
    return "default"
