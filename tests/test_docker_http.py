"""The engine's HTTP API as ``runner.sandbox.docker.http`` speaks it, against a scripted
engine on a unix socket: requests as the engine expects them, every reply shape it sends,
and every way of not answering turned into ``NoAnswer`` (never a hang, never a traceback
of the transport's own)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from runner.sandbox.docker import http
from runner.sandbox.docker.http import EngineHttp, NoAnswer, Reply

Script = Callable[[socket.socket, bytes], None]
"""What the scripted engine does with one connection, given the request head it read."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ScriptedEngine:
    """A unix socket that answers each connection with the next script; it records the
    requests (head and body) it read."""

    def __init__(self, path: Path, scripts: list[Script]) -> None:
        self.path = path
        self.scripts = scripts
        self.requests: list[bytes] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def http(self, timeout: float = 10.0) -> EngineHttp:
        return EngineHttp(str(self.path), "", 0, "1.41", timeout)

    def _serve(self) -> None:
        for script in self.scripts:
            conn, _ = self.listener.accept()
            with conn:
                request = _read_request(conn)
                self.requests.append(request)
                script(conn, request)

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            while len(body) < int(line.split(b":")[1]):
                body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def reply(data: bytes) -> Script:
    def script(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(data)

    return script


def chunked(status: str, body: bytes, size: int = 7) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces)
    head = f"HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    return head.encode() + chunks + b"0\r\n\r\n"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Callable[..., ScriptedEngine]]:
    made: list[ScriptedEngine] = []

    def make(*scripts: Script) -> ScriptedEngine:
        made.append(ScriptedEngine(tmp_path / f"e{len(made)}.sock", list(scripts)))
        return made[-1]

    yield make
    for scripted in made:
        scripted.close()


@pytest.mark.anyio
async def test_a_request_is_what_the_engine_expects_and_a_chunked_reply_is_reassembled(
    engine: Callable[..., ScriptedEngine],
) -> None:
    document = {"Id": "c" * 64, "State": {"Running": False, "ExitCode": 0}, "text": "é" * 40}
    scripted = engine(reply(chunked("201 Created", json.dumps(document).encode())))
    answer = await scripted.http().call(
        "POST", "/containers/create", query={"name": "x y"}, body={"Image": "a/b:c"}
    )
    assert answer == Reply(201, json.dumps(document).encode()) and answer.json() == document
    head, _, body = scripted.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1.41/containers/create?name=x+y HTTP/1.1"
    assert {"Host: docker", "Connection: close", "Content-Type: application/json"} <= set(lines)
    assert f"Content-Length: {len(body)}" in lines and json.loads(body) == {"Image": "a/b:c"}


@pytest.mark.anyio
async def test_a_sized_or_empty_reply_and_the_engines_explanation(
    engine: Callable[..., ScriptedEngine],
) -> None:
    refusal = json.dumps({"message": "No such container: abc"}).encode()
    scripted = engine(
        reply(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n" % len(refusal) + refusal),
        reply(b"HTTP/1.1 204 No Content\r\n\r\n"),
        reply(b"HTTP/1.1 500 Server Error\r\nContent-Length: 5\r\n\r\noops!"),
    )
    missing = await scripted.http().call("GET", "/containers/abc/json")
    assert (missing.status, missing.message) == (404, "No such container: abc")
    assert await scripted.http().call("POST", "/containers/abc/start") == Reply(204, b"")
    assert (await scripted.http().call("DELETE", "/containers/abc")).message == "oops!"
    assert scripted.requests[1].startswith(b"POST /v1.41/containers/abc/start HTTP/1.1\r\n")
    assert b"Content-Length: 0\r\n" in scripted.requests[1]  # a POST without a body


def closed_early(conn: socket.socket, _request: bytes) -> None:
    conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"Id":')


def reset(conn: socket.socket, _request: bytes) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


@pytest.mark.parametrize(
    ("script", "said"),
    [
        (reply(b""), "closed the connection before its reply"),
        (reset, "closed the connection before its reply|reset|Connection"),
        (closed_early, "ended before its body did"),
        (reply(b"SSH-2.0-OpenSSH\r\n\r\n"), "not an HTTP status"),
        (reply(chunked("200 OK", b"x" * 50)[:-5]), "ended before its body did"),
        (reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n"),
         "chunk header"),
        (reply(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnot json"), "not JSON"),
        (reply(b"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 2\r\n\r\n{}"),
         "not an HTTP status and head"),
        (reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
         "not an HTTP status and head"),
    ],
)  # fmt: skip
@pytest.mark.anyio
async def test_every_way_of_not_answering_is_no_answer(
    engine: Callable[..., ScriptedEngine], script: Script, said: str
) -> None:
    scripted = engine(script)
    with pytest.raises(NoAnswer, match=said):
        (await scripted.http().call("GET", "/containers/abc/json")).json()


@pytest.mark.anyio
async def test_a_reply_ends_where_its_framing_says_not_where_the_connection_does(
    engine: Callable[..., ScriptedEngine],
) -> None:
    closing = threading.Event()

    def linger(body: bytes) -> Script:
        def script(conn: socket.socket, _request: bytes) -> None:
            conn.sendall(body)
            closing.wait(10)

        return script

    sized = b'HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{"a": 1}'
    sized_engine = engine(linger(sized))
    chunked_engine = engine(linger(chunked("200 OK", b'{"b": [1, 2, 3]}', size=3)))
    try:  # a call waiting for the end of the connection would time out: NoAnswer
        assert (await sized_engine.http(timeout=5).call("GET", "/a")).json() == {"a": 1}
        assert (await chunked_engine.http(timeout=5).call("GET", "/b")).json() == {"b": [1, 2, 3]}
    finally:
        closing.set()


@pytest.mark.anyio
async def test_a_reply_past_the_bound_is_refused_not_held(
    engine: Callable[..., ScriptedEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "MAX_REPLY_BYTES", 1 << 16)

    def flood(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
        with contextlib.suppress(OSError):  # the client goes away once it has enough
            for _ in range(64):
                conn.sendall(b"x" * 4096)

    with pytest.raises(NoAnswer, match="exceeds 65536 bytes"):
        await engine(flood).http().call("GET", "/containers/abc/json")


@pytest.mark.anyio
async def test_no_engine_and_an_engine_that_never_answers_are_no_answer(
    engine: Callable[..., ScriptedEngine], tmp_path: Path
) -> None:
    nobody = EngineHttp(str(tmp_path / "nobody.sock"), "", 0, "1.41", 10.0)
    with pytest.raises(NoAnswer):
        await nobody.call("GET", "/version")
    release = threading.Event()
    scripted = engine(lambda _conn, _request: release.wait(10))
    try:
        with pytest.raises(NoAnswer, match=r"no answer in 0\.2 s"):
            await scripted.http(timeout=0.2).call("GET", "/containers/abc/json")
    finally:
        release.set()


@pytest.mark.anyio
async def test_a_call_runs_to_its_end_when_its_caller_is_cancelled(
    engine: Callable[..., ScriptedEngine],
) -> None:
    """A create cancelled half-way would leave a container nobody knows the id of."""
    requested, release = threading.Event(), threading.Event()

    def slow(conn: socket.socket, _request: bytes) -> None:
        requested.set()
        release.wait(10)
        conn.sendall(b'HTTP/1.1 201 Created\r\nContent-Length: 10\r\n\r\n{"Id":"c"}')

    scripted = engine(slow)
    answers: list[Reply] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def create() -> None:
                answers.append(await scripted.http().call("POST", "/containers/create"))

            tg.start_soon(create)
            await anyio.to_thread.run_sync(requested.wait, 10)
            scope.cancel()
            release.set()
    assert scope.cancelled_caught and answers == [Reply(201, b'{"Id":"c"}')]


def test_the_attach_connection_is_taken_over_only_once_agreed(
    engine: Callable[..., ScriptedEngine],
) -> None:
    upgraded = b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"

    def agree(conn: socket.socket, _request: bytes) -> None:
        conn.sendall(upgraded)
        conn.sendall(conn.recv(5))  # the stream: our stdin back

    refusal = b'{"message":"No such container: abc"}'
    scripted = engine(
        agree,
        reply(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n" % len(refusal) + refusal),
        reply(upgraded + b"early"),
    )
    query = {"stdin": "1", "stream": "1"}
    sock, answer = scripted.http().hijack("/containers/abc/attach", query)
    assert sock is not None and answer.status == 101
    with sock:
        assert sock.gettimeout() is None
        sock.sendall(b"hello")
        assert sock.recv(5) == b"hello"
    head = scripted.requests[0].decode()
    assert head.startswith("POST /v1.41/containers/abc/attach?stdin=1&stream=1 HTTP/1.1\r\n")
    assert "Connection: Upgrade\r\n" in head and "Upgrade: tcp\r\n" in head
    refused, answer = scripted.http().hijack("/containers/abc/attach", query)
    assert refused is None and (answer.status, answer.message) == (404, "No such container: abc")
    with pytest.raises(NoAnswer, match="stream bytes before the container started"):
        scripted.http().hijack("/containers/abc/attach", query)


def test_only_a_plain_socket_is_spoken_to() -> None:
    import docker

    unix = docker.APIClient(base_url="unix:///run/some.sock", version="1.41", timeout=7)
    assert EngineHttp.of(unix) == EngineHttp("/run/some.sock", "", 0, "1.41", 7.0)
    tcp = docker.APIClient(base_url="tcp://127.0.0.1:2375", version="1.41")
    assert EngineHttp.of(tcp) == EngineHttp(None, "127.0.0.1", 2375, "1.41", 60.0)
    tls = docker.APIClient(base_url="tcp://127.0.0.1:2376", version="1.41", tls=True)
    assert EngineHttp.of(tls) is None


@pytest.mark.anyio
async def test_a_client_over_tls_is_refused_before_any_container_is_made() -> None:
    import docker

    from runner.sandbox.base import LaunchRequest
    from runner.sandbox.docker.sandbox import DockerSandbox
    from runner.sandbox.errors import DockerSandboxError
    from runner.sandbox.profiles import load_profile

    client = docker.DockerClient(base_url="tcp://127.0.0.1:9", version="1.41", tls=True)
    sandbox = DockerSandbox(
        "flow-runner/fake-component:latest", load_profile("default"), client=client
    )
    with pytest.raises(DockerSandboxError, match=r"not a plain socket.*unset DOCKER_HOST"):
        async with sandbox.launch(LaunchRequest()):
            pytest.fail("launched over TLS")


def test_the_api_version_is_the_one_the_engine_announces_on_ping(
    engine: Callable[..., ScriptedEngine],
) -> None:
    """One cheap ``/_ping`` (not ``/version``, which asks containerd and runs runc): its
    ``Api-Version`` is the version every later call names. Where the header is missing (a
    proxy), ``/version``'s ``ApiVersion``, as docker-py reads it; neither, or one below
    docker-py's minimum, is no answer, not a guess."""
    ping = "HTTP/1.1 200 OK\r\n{}Content-Length: 2\r\nConnection: close\r\n\r\nOK"
    version = json.dumps({"ApiVersion": "1.41"}).encode()
    scripted = engine(
        reply(ping.format("Api-Version: 1.43\r\n").encode()),
        reply(ping.format("").encode()),
        reply(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(version), version)),
        reply(ping.format("").encode()),
        reply(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
        reply(ping.format("Api-Version: 1.23\r\n").encode()),
    )
    environ = {"DOCKER_HOST": f"unix://{scripted.path}"}
    found = EngineHttp.from_env(environ)
    assert found is not None and found.version == "1.43"
    assert scripted.requests[0].startswith(b"GET /_ping HTTP/1.1\r\n")
    found = EngineHttp.from_env(environ)
    assert found is not None and found.version == "1.41"
    assert scripted.requests[2].startswith(b"GET /version HTTP/1.1\r\n")
    with pytest.raises(NoAnswer, match="no API version"):
        EngineHttp.from_env(environ)
    with pytest.raises(NoAnswer, match=r"older than 1\.24"):
        EngineHttp.from_env(environ)
