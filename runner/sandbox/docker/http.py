"""The engine's HTTP API, spoken directly for the calls every run makes.

Each call is one HTTP/1.1 request on a connection of its own, read by h11 in the event
loop (docker-py costs a cold start its import and each call CPU). Only a unix socket or
a plain ``tcp://`` address is spoken: the attach connection must be a plain socket.

A call runs to its end, shielded from cancellation and bounded by a timeout: a create
whose answer is lost would leave a container nobody knows. Any status is a
:class:`Reply`; no answer (refused, reset, too slow, garbled) is :class:`NoAnswer`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import h11

MAX_REPLY_BYTES = 64 << 20
"""Bytes of one reply read at most (an inspect document is a few KiB)."""
MAX_HEAD_BYTES = 64 << 10
"""Bytes of a reply's status line and headers read at most."""
_USER_AGENT = "flow-runner"
DEFAULT_SOCKET: Final = "/var/run/docker.sock"
DEFAULT_TIMEOUT: Final = 60.0
"""docker-py's ``DEFAULT_TIMEOUT_SECONDS``, the timeout of ``docker.from_env()``."""
MINIMUM_API_VERSION: Final = (1, 24)
"""docker-py's ``MINIMUM_DOCKER_API_VERSION``: an engine below it is refused."""
# Matched through ``re``'s cache: compiled only when DOCKER_HOST is set.
_TCP: Final = r"tcp://([A-Za-z0-9.-]+):([0-9]{1,5})"
_UNIX: Final = r"unix://(/[^?#;]*[^/?#;])"


class NoAnswer(Exception):
    """The engine did not answer the request (the message says how it failed)."""


@dataclass(frozen=True)
class Reply:
    """The engine's answer: its HTTP status, body and headers (names in lower case)."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict, compare=False)

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise NoAnswer(f"the engine's reply is not JSON ({exc})") from exc

    @property
    def message(self) -> str:
        """The engine's ``message`` member (else the body), at most 1,000 characters."""
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
    """Where the engine listens (a unix socket, or a TCP host and port), its API version
    and the client's timeout in seconds."""

    unix_path: str | None
    host: str
    port: int
    version: str
    timeout: float

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> EngineHttp | None:
        """The engine ``docker.from_env()`` would talk to, with the API version it would
        negotiate (blocking); ``None`` where :func:`plain_address` cannot say;
        :class:`NoAnswer` if it does not answer or is older than docker-py accepts. The
        version is ``/_ping``'s ``Api-Version``, as the docker CLI reads it: the same
        number as ``/version``'s (asked only where the header is missing), which asks
        containerd and runs runc to answer (~7 ms)."""
        address = plain_address(environ)
        if address is None:
            return None
        unix_path, host, port = address
        probe = cls(unix_path, host, port, "", DEFAULT_TIMEOUT)
        reply = probe.ask_blocking("GET", "/_ping", versioned=False).reply()
        version = reply.headers.get("api-version")
        if version is None:  # a proxy that drops the header: ask as docker-py does
            reply = probe.ask_blocking("GET", "/version", versioned=False).reply()
            info = reply.json() if reply.status == 200 else None
            version = info.get("ApiVersion") if isinstance(info, dict) else None
        if not isinstance(version, str):
            raise NoAnswer(f"GET /version: {reply.status} {reply.message}, no API version")
        numbers = tuple(int(part) for part in version.split(".") if part.isdigit())
        if numbers < MINIMUM_API_VERSION:
            raise NoAnswer(f"the engine's API version {version} is older than 1.24")
        return cls(unix_path, host, port, version, DEFAULT_TIMEOUT)

    @classmethod
    def of(cls, api: Any) -> EngineHttp | None:
        """The address of docker-py's ``APIClient``; ``None`` unless a plain socket."""
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
        """One request (``body`` as JSON) and its reply within ``timeout`` (or the client's)."""
        exchange = self._exchange_of(method, path, query, body)
        limit = self.timeout if timeout is None else timeout
        try:
            with anyio.fail_after(limit, shield=True):
                return await self._exchange(exchange)
        except TimeoutError as exc:
            raise NoAnswer(f"no answer in {limit:.3g} s") from exc

    def ask_blocking(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: object = None,
        versioned: bool = True,
    ) -> Asked:
        """:meth:`call` for a caller outside the event loop (the sweep), in two halves: the
        request sent now, its reply read by :meth:`Asked.reply`, the engine working on it
        meanwhile."""
        sock = self._connect_blocking()
        try:
            exchange = self._exchange_of(method, path, query, body, versioned=versioned)
            sock.sendall(exchange.request)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise NoAnswer(f"no answer in {self.timeout:g} s") from exc
            if isinstance(exc, OSError):
                raise NoAnswer(str(exc) or type(exc).__name__) from exc
            raise
        return Asked(sock, exchange, self.timeout)

    def hijack(self, path: str, query: Mapping[str, str]) -> tuple[socket.socket | None, Reply]:
        """POST ``path`` taking the connection over (attach), blocking: the socket
        (blocking, no timeout) once the engine agreed, or ``None`` with its refusal."""
        sock = self._connect_blocking()
        try:
            sock.settimeout(self.timeout)
            exchange = self._exchange_of("POST", path, query, None, upgrade=True)
            sock.sendall(exchange.request)
            while exchange.status is None:
                chunk = sock.recv(MAX_HEAD_BYTES)
                exchange.feed(chunk, head_only=True) if chunk else exchange.end()
            status = exchange.status
            if status not in (101, 200):
                refusal = _reply_blocking(sock, exchange)
                sock.close()
                return None, refusal
            if exchange.pending:  # the stream starts only when the container does, after this
                raise NoAnswer("the engine sent stream bytes before the container started")
            sock.settimeout(None)
            return sock, Reply(status, b"")
        except OSError as exc:
            sock.close()
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        except BaseException:
            sock.close()
            raise

    def _exchange_of(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: object,
        *,
        upgrade: bool = False,
        versioned: bool = True,
    ) -> Exchange:
        target = urllib.parse.quote(path, safe="/:")
        if versioned:
            target = f"/v{self.version}{target}"
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = [("Host", "docker"), ("User-Agent", _USER_AGENT)]
        headers += (
            [("Connection", "Upgrade"), ("Upgrade", "tcp")]
            if upgrade
            else [("Connection", "close")]
        )
        payload = b""
        if body is not None:
            payload = json.dumps(body).encode()
            headers.append(("Content-Type", "application/json"))
        if body is not None or method == "POST":
            headers.append(("Content-Length", str(len(payload))))
        return Exchange(method, target, headers, payload)

    async def _exchange(self, exchange: Exchange) -> Reply:
        """Write the request and read the reply on a socket of its own, woken by the
        loop only when it is readable: one or two wake-ups per call."""
        try:
            sock = await self._connect()
        except OSError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        try:
            view = memoryview(exchange.request)
            while view:
                try:
                    view = view[sock.send(view) :]
                except BlockingIOError:
                    await anyio.wait_writable(sock.fileno())
            while True:
                try:
                    chunk = sock.recv(1 << 16)
                except BlockingIOError:
                    await anyio.wait_readable(sock.fileno())
                    continue
                reply = exchange.feed(chunk) if chunk else exchange.end()
                if reply is not None:
                    return reply
        except OSError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        finally:
            sock.close()

    async def _connect(self) -> socket.socket:
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


class Asked:
    """A request sent on a blocking socket of its own, its reply not read yet."""

    def __init__(self, sock: socket.socket, exchange: Exchange, timeout: float) -> None:
        self._sock = sock
        self._exchange = exchange
        self._timeout = timeout

    def reply(self, timeout: float | None = None) -> Reply:
        """The reply (blocking, within ``timeout`` seconds, else the client's); the socket
        is closed after."""
        limit = self._timeout if timeout is None else timeout
        try:
            self._sock.settimeout(limit)
            return _reply_blocking(self._sock, self._exchange)
        except TimeoutError as exc:
            raise NoAnswer(f"no answer in {limit:g} s") from exc
        except OSError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__) from exc
        finally:
            self._sock.close()

    def close(self) -> None:
        """Leave the reply unread."""
        self._sock.close()


def _reply_blocking(sock: socket.socket, exchange: Exchange) -> Reply:
    """The rest of ``exchange``'s reply, read from a blocking socket."""
    while True:
        chunk = sock.recv(1 << 16)
        reply = exchange.feed(chunk) if chunk else exchange.end()
        if reply is not None:
            return reply


class Exchange:
    """One request and its reply, read by h11 (head, then body by its framing). Anything
    that is not such a reply, or exceeds the bounds, is :class:`NoAnswer`."""

    def __init__(
        self, method: str, target: str, headers: list[tuple[str, str]], payload: bytes
    ) -> None:
        self._connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        events: list[h11.Request | h11.Data] = [
            h11.Request(method=method, target=target, headers=headers)
        ]
        events += [h11.Data(data=payload)] if payload else []
        self.request: bytes = b"".join(
            self._connection.send(event) or b"" for event in [*events, h11.EndOfMessage()]
        )
        """The request's bytes, to write before reading the reply."""
        self.status: int | None = None
        self._headers: dict[str, str] = {}
        self._size = 0
        self._body = bytearray()

    @property
    def pending(self) -> bool:
        """True if bytes beyond the reply's head were received and not yet taken."""
        return bool(self._connection.trailing_data[0])

    def feed(self, chunk: bytes, *, head_only: bool = False) -> Reply | None:
        """Take ``chunk``; the reply once it is complete (never with ``head_only``)."""
        self._size += len(chunk)
        if self._size > MAX_REPLY_BYTES:
            raise NoAnswer(f"the engine's reply exceeds {MAX_REPLY_BYTES} bytes")
        self._connection.receive_data(chunk)
        return self._next(head_only)

    def end(self) -> Reply:
        """The connection ended: the reply, if it was complete."""
        if self.status is None and not self._connection.trailing_data[0]:
            raise NoAnswer("the engine closed the connection before its reply")
        self._connection.receive_data(b"")
        reply = self._next(False, ended=True)
        assert reply is not None  # at the end of the input h11 finishes or refuses
        return reply

    def _next(self, head_only: bool, *, ended: bool = False) -> Reply | None:
        try:
            while True:
                event = self._connection.next_event()
                if isinstance(event, h11.Response) or (
                    isinstance(event, h11.InformationalResponse) and event.status_code == 101
                ):
                    self.status = event.status_code
                    self._headers = {
                        k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers
                    }
                    if head_only or self.status == 101:
                        return None
                elif isinstance(event, h11.Data):
                    self._body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    assert self.status is not None
                    return Reply(self.status, bytes(self._body), self._headers)
                elif not isinstance(event, h11.InformationalResponse):
                    return None  # NEED_DATA, or PAUSED after a switch of protocols
        except h11.RemoteProtocolError as exc:
            if self.status is None:
                what = "is not an HTTP status and head"
            elif ended:
                what = "ended before its body did"
            else:
                what = "has a malformed body"
            raise NoAnswer(f"the engine's reply {what} ({exc})") from exc


def plain_address(environ: Mapping[str, str]) -> tuple[str | None, str, int] | None:
    """Where ``docker.from_env(environment=environ)`` connects, read as docker-py reads
    it: a unix socket path, or a TCP host and port. ``None`` for anything else (TLS,
    another ``DOCKER_HOST`` form, a CLI context other than ``default``)."""
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
