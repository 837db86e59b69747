"""The component SDK against a scripted host: a real component process, frames by hand.

Each test starts ``tests/components/scenarios.py`` with the venv's Python and pipes,
plays the host's side of Run/1 frame by frame, and checks what the component writes,
when, and how it exits. No Docker; the whole file runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import runner
from runner.component import handle
from runner.component.runtime import EXIT_FATAL
from runner.component.wire import write_frame

CHECKOUT = Path(runner.__file__).resolve().parent.parent
SCENARIOS = Path(__file__).parent / "components" / "scenarios.py"
ROOT_ID = "host:1"
QUIET = 0.075  # the conformance corpus's "nothing more on the wire" window

_EOF = object()


def root_params(input: Any, **overrides: Any) -> dict[str, Any]:
    params = {
        "protocol": "run/1",
        "input": input,
        "settings": {},
        "attachments": {},
        "scratch": "/tmp/scratch",
        "deadlineUnixMs": 1_787_558_400_000,
    }
    params.update(overrides)
    return params


def request(id: str, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def cancel(target: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": target}}


def result(id: str, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": value}


def operation_error(id: str, code: str, details: Any = None) -> dict[str, Any]:
    data: dict[str, Any] = {"code": code}
    if details is not None:
        data["details"] = details
    return {"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": code, "data": data}}


class ScriptedHost:
    """The host's end of one component process: send frames, receive frames, check the end."""

    def __init__(self, script: Path = SCENARIOS, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(CHECKOUT), **(env or {})},
        )
        self.frames: queue.Queue[Any] = queue.Queue()
        self.trailing = b""
        self._stderr: list[bytes] = []
        self._drains = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for drain in self._drains:
            drain.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith(b"\n"):
                self.trailing = line
                break
            self.frames.put(json.loads(line))
        self.frames.put(_EOF)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self._stderr.extend(self.proc.stderr)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def send(self, *frames: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        for frame in frames:
            data = frame if isinstance(frame, bytes) else json.dumps(frame).encode() + b"\n"
            self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def start(self, input: Any, **overrides: Any) -> None:
        self.send(request(ROOT_ID, "flow/run", root_params(input, **overrides)))

    def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        frame = self.frames.get(timeout=timeout)
        assert frame is not _EOF, f"stdout ended; stderr:\n{self.stderr}"
        assert isinstance(frame, dict)
        return frame

    def recv_calls(self, count: int) -> list[dict[str, Any]]:
        return [self.recv() for _ in range(count)]

    def assert_quiet(self, seconds: float = QUIET) -> None:
        with pytest.raises(queue.Empty):
            frame = self.frames.get(timeout=seconds)
            pytest.fail(f"unexpected frame {frame!r}")

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def finish(self, timeout: float = 10.0) -> int:
        """Wait for exit; stdout must end on a frame boundary with no further frames."""
        status = self.proc.wait(timeout=timeout)
        for drain in self._drains:
            drain.join(timeout)
        assert self.frames.get(timeout=timeout) is _EOF
        assert self.trailing == b""
        return status

    def end_root(self, timeout: float = 10.0) -> dict[str, Any]:
        """The root response, then a clean exit 0 with nothing after it."""
        response = self.recv(timeout)
        assert response["id"] == ROOT_ID, response
        assert self.finish() == 0, self.stderr
        return response

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def host() -> Any:
    hosts: list[ScriptedHost] = []

    def launch(**kwargs: Any) -> ScriptedHost:
        hosts.append(ScriptedHost(**kwargs))
        return hosts[-1]

    yield launch
    for each in hosts:
        each.kill()


def success(output: Any, outcome: str = "done") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ROOT_ID, "result": {"outcome": outcome, "output": output}}


def root_error(response: dict[str, Any]) -> str:
    assert response["error"]["code"] == -32000, response
    code = response["error"]["data"]["code"]
    assert isinstance(code, str)
    return code


def fatal_exit(h: ScriptedHost) -> None:
    """The component closes the channel: nonzero exit and no root response."""
    assert h.finish() == EXIT_FATAL, h.stderr


# --- golden path and the context -------------------------------------------------------


def test_context_carries_the_root_params(host: Any) -> None:
    h = host()
    attachments = {"source": {"path": "/in", "access": "read"}}
    grant = {"endpoint": "writer:1", "direction": "send", "delivery": "direct"}
    h.start(
        {"scenario": "echo", "x": [1, 2.5, "é"]},
        settings={"mode": "fast"},
        attachments=attachments,
        channels={"events": grant},
        deadlineUnixMs=42,
    )
    response = h.end_root()
    assert response == success(
        {
            "input": {"scenario": "echo", "x": [1, 2.5, "é"]},
            "settings": {"mode": "fast"},
            "attachments": {"source": ["/in", "read"]},
            "channels": {"events": grant},
            "scratch": "/tmp/scratch",
            "deadline": 42,
        }
    )


def test_golden_conversation(host: Any) -> None:
    h = host()
    h.send(cancel("stale:1"), cancel("stale:1"))  # stale cancels before the root: no-ops
    h.start({"scenario": "golden", "subject": "football"})
    first, second = h.recv_calls(2)
    calls = {frame["method"]: frame for frame in (first, second)}
    child, store = calls["flow/run-child"], calls["capability/call"]
    assert {child["id"], store["id"]} == {"component:1", "component:2"}
    assert child["params"] == {
        "operationId": "research:1",
        "slot": "research",
        "intent": "Find facts.",
        "input": {"scenario": "golden", "subject": "football"},
    }
    assert store["params"] == {
        "operationId": "store:1",
        "slot": "artifacts",
        "method": "write",
        "input": {"source": "r"},
    }
    h.send(result(store["id"], {"value": {"uri": "mem://1"}}))
    h.send(result(child["id"], {"outcome": "done", "output": {"answer": 42}}))
    missing = h.recv()
    assert missing["id"] == "component:3"
    assert missing["params"]["operationId"] == "missing:1"
    h.send(result(missing["id"], {"error": {"name": "not-found", "data": {"key": "k"}}}))
    assert h.end_root() == success(
        {
            "research": ["done", {"answer": 42}],
            "stored": {"uri": "mem://1"},
            "missing": ["not-found", {"key": "k"}],
        }
    )


def test_closing_stdin_after_the_root_response_is_fine(host: Any) -> None:
    h = host()
    h.start({"scenario": "echo"})
    assert h.recv()["id"] == ROOT_ID
    h.close_stdin()
    assert h.finish() == 0


def test_stray_output_goes_to_stderr(host: Any) -> None:
    h = host()
    h.start({"scenario": "stray-output"})
    assert h.end_root() == success("printed")
    for text in ("print() output", "sys.stdout output", "raw fd 1 output", "subprocess output"):
        assert text in h.stderr


# --- request bounds --------------------------------------------------------------------


def test_65_concurrent_calls_keep_64_on_the_wire(host: Any) -> None:
    h = host()
    h.start({"scenario": "fanout", "calls": 65})
    first = h.recv_calls(64)
    assert [frame["id"] for frame in first] == [f"component:{n}" for n in range(1, 65)]
    h.assert_quiet()
    h.send(result(first[0]["id"], {"value": None}))
    queued = h.recv()
    assert queued["id"] == "component:65"
    assert queued["params"]["operationId"] == "op:65"
    h.send(*(result(frame["id"], {"value": None}) for frame in [*first[1:], queued]))
    assert h.end_root() == success({"settled": 65})


def test_cancelled_queued_call_never_reaches_the_wire(host: Any) -> None:
    h = host()
    h.start({"scenario": "cancel-queued"})
    first = h.recv_calls(64)
    h.assert_quiet(0.3)  # the 65th was cancelled while queued
    h.send(*(result(frame["id"], {"value": None}) for frame in first))
    assert h.end_root() == success({"cancelled": 1})


def _serve_lifetime(h: ScriptedHost, calls: int) -> dict[str, Any]:
    """Answer the scenario's batches of 64 calls, one write per batch; return the root."""
    h.start({"scenario": "lifetime", "calls": calls})
    for first in range(1, calls + 1, 64):
        batch = h.recv_calls(min(64, calls + 1 - first))
        assert [frame["id"] for frame in batch] == [
            f"component:{n}" for n in range(first, first + len(batch))
        ]
        h.send(
            b"".join(json.dumps(result(f["id"], {"value": None})).encode() + b"\n" for f in batch)
        )
    return h.end_root()


def test_lifetime_budget_refuses_locally(host: Any) -> None:
    h = host(env={"FLOW_TEST_LIFETIME": "100"})
    response = _serve_lifetime(h, 100)
    assert response == success({"accepted": 100, "rejected": "RESOURCE_EXHAUSTED"})


@pytest.mark.slow
def test_lifetime_budget_of_65536_requests(host: Any) -> None:
    h = host()
    response = _serve_lifetime(h, 65_536)
    assert response == success({"accepted": 65_536, "rejected": "RESOURCE_EXHAUSTED"})


# --- cancellation ----------------------------------------------------------------------


def test_call_cancellation_waits_for_the_late_response(host: Any) -> None:
    h = host()
    h.start({"scenario": "cancel-one"})
    gate, child = sorted(h.recv_calls(2), key=lambda frame: frame["method"])
    assert child["method"] == "flow/run-child"
    h.send(result(gate["id"], {"value": None}))
    assert h.recv() == cancel(child["id"])
    h.assert_quiet()  # the tombstone holds the root response back
    h.send(result(child["id"], {"outcome": "done", "output": "late"}))
    assert h.end_root() == success("cancelled-locally")


def test_root_cancellation_cancels_calls_then_answers_cancelled(host: Any) -> None:
    h = host()
    h.start({"scenario": "wait-forever"})
    calls = h.recv_calls(2)
    h.send(cancel(ROOT_ID), cancel(ROOT_ID))
    cancels = h.recv_calls(2)
    assert sorted(frame["params"]["requestId"] for frame in cancels) == sorted(
        frame["id"] for frame in calls
    )
    h.assert_quiet()  # both calls still owe a response
    h.send(result(calls[0]["id"], {"value": 1}))
    h.assert_quiet()
    h.send(operation_error(calls[1]["id"], "CANCELLED"))
    assert root_error(h.end_root()) == "CANCELLED"


def test_root_cancellation_raises_in_the_handler(host: Any) -> None:
    h = host()
    h.start({"scenario": "sleep", "announce": True})
    h.send(result(h.recv()["id"], {"value": None}))
    h.assert_quiet()  # the handler is now asleep
    h.send(cancel(ROOT_ID))
    assert root_error(h.end_root()) == "CANCELLED"
    assert "sleep: cancelled" in h.stderr


def test_root_cancellation_wins_over_a_swallowed_cancel(host: Any) -> None:
    h = host()
    h.start({"scenario": "swallow-cancel"})
    h.send(result(h.recv()["id"], {"value": None}))
    h.assert_quiet()
    h.send(cancel(ROOT_ID))
    assert root_error(h.end_root()) == "CANCELLED"


def test_abandoned_call_fails_the_run_after_its_response(host: Any) -> None:
    h = host()
    h.start({"scenario": "abandon"})
    call = h.recv()
    assert h.recv() == cancel(call["id"])
    h.assert_quiet()
    h.send(result(call["id"], {"value": None}))
    assert root_error(h.end_root()) == "EXECUTION_FAILED"


# --- handler outcomes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "returned",
    [
        {"outcome": "Done", "output": 1},
        {"outcome": "done"},
        {"outcome": "done", "output": 1, "extra": 2},
        "done",
    ],
)
def test_invalid_result(host: Any, returned: Any) -> None:
    h = host()
    h.start({"scenario": "invalid-result", "result": returned})
    assert root_error(h.end_root()) == "INVALID_RESULT"


def test_output_outside_json1_is_an_invalid_result(host: Any) -> None:
    h = host()
    h.start({"scenario": "non-json-output"})
    assert root_error(h.end_root()) == "INVALID_RESULT"


def test_custom_outcome_passes(host: Any) -> None:
    h = host()
    h.start({"scenario": "invalid-result", "result": {"outcome": "anonymous", "output": None}})
    assert h.end_root() == success(None, outcome="anonymous")


def test_exception_is_execution_failed_with_traceback(host: Any) -> None:
    h = host()
    h.start({"scenario": "explode"})
    assert root_error(h.end_root()) == "EXECUTION_FAILED"
    assert "ZeroDivisionError: kaboom" in h.stderr


def test_operation_error_passes_through(host: Any) -> None:
    h = host()
    h.start({"scenario": "operation-error", "code": "UNAVAILABLE", "message": "m", "details": [1]})
    response = h.end_root()
    assert response["error"] == {
        "code": -32000,
        "message": "m",
        "data": {"code": "UNAVAILABLE", "details": [1]},
    }


@pytest.mark.parametrize(
    "args", [{"code": "PROTOCOL_ERROR"}, {"code": "NOPE"}, {"code": "UNAVAILABLE", "message": ""}]
)
def test_operation_error_that_cannot_travel_is_execution_failed(
    host: Any, args: dict[str, Any]
) -> None:
    h = host()
    h.start({"scenario": "operation-error", **args})
    assert root_error(h.end_root()) == "EXECUTION_FAILED"


def test_call_error_propagates_to_the_root(host: Any) -> None:
    h = host()
    h.start({"scenario": "propagate"})
    call = h.recv()
    h.send(operation_error(call["id"], "UNAVAILABLE", {"slot": "store"}))
    response = h.end_root()
    assert response["error"]["data"] == {"code": "UNAVAILABLE", "details": {"slot": "store"}}


def test_bad_call_arguments_fail_locally(host: Any) -> None:
    h = host()
    h.start({"scenario": "bad-arguments"})
    response = h.end_root()  # no call frame came before the root response
    failures = response["result"]["output"]
    assert set(failures) == {"operation_id", "slot", "method", "intent", "input", "channels"}
    assert failures["input"] == "JSON1Error"


# --- the root request and host requests ------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {k: v for k, v in root_params(None).items() if k != "scratch"},
        {**root_params(None), "runId": "r"},
        root_params(None, protocol="run/2"),
        root_params(
            None, attachments={f"a{n}": {"path": "/p", "access": "read"} for n in range(257)}
        ),
        root_params(None, attachments={"a": {"path": "/p", "access": "write"}}),
        root_params(None, deadlineUnixMs=-1),
        root_params(None, settings=[]),
        {},
    ],
)
def test_invalid_root_params_get_32602_and_exit_0(host: Any, params: dict[str, Any]) -> None:
    h = host()
    h.send(request(ROOT_ID, "flow/run", params))
    response = h.recv()
    assert response["id"] == ROOT_ID and response["error"]["code"] == -32602
    assert h.finish() == 0


def test_host_requests_other_than_flow_run_get_32601(host: Any) -> None:
    h = host()
    for n, method in enumerate(["request/cancel", "flow/run-child", "capability/call"]):
        h.send(request(f"host:wrong:{n}", method, {}))
        assert h.recv()["error"] == {
            "code": -32601,
            "message": f"a component does not serve {method!r}",
        }
    h.send({"jsonrpc": "2.0", "method": "flow/run", "params": {}})  # notifications: ignored
    h.send({"jsonrpc": "2.0", "method": "unknown/event", "params": []})
    h.start({"scenario": "echo"})
    assert h.end_root()["result"]["outcome"] == "done"


def test_second_flow_run_is_fatal(host: Any) -> None:
    h = host()
    h.start({"scenario": "sleep"})
    h.send(request("host:2", "flow/run", root_params(None)))
    assert h.recv()["error"]["code"] == -32600
    fatal_exit(h)


# --- fatal conditions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reply"),
    [
        (b"\n", -32700),
        (b"\xef\xbb\xbf{}\n", -32700),
        (b'{"a":1,"a":2}\n', -32700),
        (b'{"jsonrpc":\n', -32700),
        (b"{} {}\n", -32700),
        (b"[]\n", -32600),
        (b"null\n", -32600),
        (b'{"jsonrpc":"2.0","id":"x","method":"unknown/request","params":null}\n', -32600),
        (b'{"jsonrpc":"2.0","method":"unknown/event","params":1}\n', -32600),
        (b'{"jsonrpc":"2.0","id":7,"method":"flow/run","params":{}}\n', -32600),
        (b'{"a":"\xff"}\n', None),
    ],
)
def test_bad_frames_are_fatal(host: Any, raw: bytes, reply: int | None) -> None:
    h = host()
    h.send(raw)
    if reply is not None:
        response = h.recv()
        assert response["error"]["code"] == reply
    fatal_exit(h)


@pytest.mark.parametrize(
    ("reply", "invalid"),
    [
        ({"jsonrpc": "2.0", "id": "component:1", "error": {"code": -32603, "message": "m"}}, False),
        ({"jsonrpc": "2.0", "id": "component:1", "result": {"outcome": "done"}}, False),
        ({"jsonrpc": "2.0", "id": "component:1", "result": {"value": 1, "error": 2}}, False),
        (operation_error("component:1", "NOT_A_CODE"), True),
        ({"jsonrpc": "2.0", "id": "component:unknown", "result": {"value": 1}}, False),
    ],
)
def test_bad_replies_to_calls_are_fatal(host: Any, reply: dict[str, Any], invalid: bool) -> None:
    """A reply outside the §1.2 envelope shapes (an unknown wire code) earns the best-effort
    ``-32600`` with ``id: null`` that the host's envelope step also sends; a well-formed
    reply that does not fit the call ends the channel with no frame."""
    h = host()
    h.start({"scenario": "propagate"})
    assert h.recv()["id"] == "component:1"
    h.send(reply)
    if invalid:
        assert h.recv() == {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600,
            "message": "Invalid Request: error.data.code is not one of the 13 wire codes",
        }}  # fmt: skip
    fatal_exit(h)


def test_duplicate_response_is_fatal(host: Any) -> None:
    h = host()
    h.start({"scenario": "fanout", "calls": 2})
    first, _ = h.recv_calls(2)
    h.send(result(first["id"], {"value": 1}), result(first["id"], {"value": 1}))
    fatal_exit(h)


def test_malformed_root_cancel_is_fatal(host: Any) -> None:
    h = host()
    h.start({"scenario": "sleep"})
    h.send({"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": ROOT_ID, "x": 1}})
    # The envelope step (the host's own) answers it as an invalid envelope, best-effort.
    assert h.recv()["error"] == {
        "code": -32600,
        "message": "Invalid Request: malformed request/cancel: unknown member 'x'",
    }
    fatal_exit(h)


def test_stdin_eof_while_pending_is_fatal(host: Any) -> None:
    h = host()
    h.start({"scenario": "sleep"})
    h.close_stdin()
    fatal_exit(h)
    assert "CHANNEL_LOST" in h.stderr


def test_partial_frame_at_eof_is_a_protocol_error(host: Any) -> None:
    h = host()
    h.start({"scenario": "sleep"})
    h.send(b"{}")
    h.close_stdin()
    fatal_exit(h)
    assert "PROTOCOL_ERROR" in h.stderr


def test_reused_host_request_id_is_fatal(host: Any) -> None:
    h = host()
    h.send(request("host:x", "unknown/request", {}))
    assert h.recv()["error"]["code"] == -32601
    h.send(request("host:x", "unknown/request", {}))
    fatal_exit(h)


@pytest.mark.slow
def test_65537th_host_request_is_fatal(host: Any) -> None:
    h = host()
    h.send(
        b"".join(
            b'{"jsonrpc":"2.0","id":"host:%d","method":"unknown/request","params":{}}\n' % n
            for n in range(1, 65_538)
        )
    )
    for n in range(1, 65_537):
        assert h.recv()["id"] == f"host:{n}"
    fatal_exit(h)


def test_frame_of_exactly_16_mib_is_accepted_and_one_more_byte_is_not(host: Any) -> None:
    input = {"scenario": "invalid-result", "result": {"outcome": "done", "output": None}}
    frame = json.dumps(request(ROOT_ID, "flow/run", root_params(input))).encode()
    exact = frame + b" " * (16_777_216 - len(frame))
    h = host()
    h.send(exact + b"\n")
    assert h.end_root() == success(None)
    h = host()
    h.send(exact + b" \n")
    fatal_exit(h)


# --- transports ------------------------------------------------------------------------


def test_component_over_a_socket_pair() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        proc = subprocess.Popen(
            [sys.executable, str(SCENARIOS)],
            stdin=theirs.fileno(),
            stdout=theirs.fileno(),
            env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
        )
        ours.sendall(json.dumps(request(ROOT_ID, "flow/run", root_params(None))).encode() + b"\n")
        with ours.makefile("rb") as replies:
            response = json.loads(replies.readline())
        assert response["id"] == ROOT_ID and response["result"]["outcome"] == "done"
        assert proc.wait(timeout=10) == 0


def test_write_frame_loops_over_short_and_blocked_writes() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # a full pipe now answers EAGAIN instead of waiting
    payload = b"x" * (1 << 20)
    writer = threading.Thread(target=write_frame, args=(write_end, payload))
    writer.start()
    received = bytearray()
    with os.fdopen(read_end, "rb") as pipe:
        while len(received) < len(payload) + 1:
            received += pipe.read1(4096)
    writer.join()
    os.close(write_end)
    assert received == payload + b"\n"


def test_handle_refuses_a_running_loop() -> None:
    async def inside() -> None:
        handle(lambda ctx: None)  # type: ignore[arg-type,return-value]

    with pytest.raises(RuntimeError, match="running asyncio loop"):
        asyncio.run(inside())


# --- the SDK needs nothing but the standard library -------------------------------------

_BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"anyio", "docker", "orjson", "pydantic", "typer", "jsonschema"}:
            raise ImportError(f"third-party import of {name} in a component image")
sys.meta_path.insert(0, Block())
"""


def test_sdk_imports_with_the_standard_library_alone(tmp_path: Path) -> None:
    image = tmp_path / "lib" / "runner"
    image.mkdir(parents=True)
    (image / "__init__.py").write_bytes((CHECKOUT / "runner" / "__init__.py").read_bytes())
    (image / "json1.py").write_bytes((CHECKOUT / "runner" / "json1.py").read_bytes())
    for package in ("component", "protocol"):  # what images/*/Dockerfile copy
        (image / package).mkdir(parents=True)
        for module in (CHECKOUT / "runner" / package).glob("*.py"):
            (image / package / module.name).write_bytes(module.read_bytes())
    program = _BLOCKER + textwrap.dedent(
        """
        sys.path.insert(0, sys.argv[1])
        import runner.component
        assert runner.component.__file__.startswith(sys.argv[1])
        from runner.component import handle, RunContext, RunResult, OperationError
        print(sorted(m for m in sys.modules if m.split(".")[0] == "runner"))
        """
    )
    # -I: no user site, no PYTHONPATH; -S: no site-packages (so no venv packages) at all.
    completed = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program, str(tmp_path / "lib")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "runner.component.runtime" in completed.stdout


# --- what stdin is -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pipe", "socket", "file"])
def test_stdin_of_every_kind_is_read(kind: str, tmp_path: Path) -> None:
    # A pipe or a socket is read in the component's event loop; a regular file (which
    # the loop cannot watch) by the reader thread. Each must deliver the frame.
    frame = json.dumps(request(ROOT_ID, "flow/run", {})).encode() + b"\n"
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    command = [sys.executable, str(SCENARIOS)]
    if kind == "file":
        path = tmp_path / "stdin"
        path.write_bytes(frame)
        with path.open("rb") as stdin:
            ran = subprocess.run(command, stdin=stdin, capture_output=True, env=env, timeout=30)
    elif kind == "socket":
        ours, theirs = socket.socketpair()
        with ours, theirs:
            ours.sendall(frame)
            ran = subprocess.run(command, stdin=theirs, capture_output=True, env=env, timeout=30)
    else:
        ran = subprocess.run(command, input=frame, capture_output=True, env=env, timeout=30)
    (line,) = ran.stdout.splitlines()
    response = json.loads(line)
    assert (response["id"], response["error"]["code"]) == (ROOT_ID, -32602), ran.stderr
    assert ran.returncode == 0, ran.stderr
