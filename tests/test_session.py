"""HostSession in-process: no pipes, no processes. Fast checks and a fuzzer."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from framefuzz import Mutator, play
from rsskit import measured, peak_kib
from runner import json1
from runner.protocol.completion import Ending, judge
from runner.protocol.session import (
    CallCancelled,
    CallRequested,
    HostSession,
    RootResult,
    Violation,
)

PARAMS = {
    "protocol": "run/1",
    "input": None,
    "settings": {},
    "attachments": {},
    "scratch": "/flow/scratch",
    "deadlineUnixMs": 1_900_000_000_000,
}


def frame(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def call(rid: str, op: str = "o") -> bytes:
    params = {"operationId": op, "slot": "s", "method": "m", "input": None}
    return frame({"jsonrpc": "2.0", "id": rid, "method": "capability/call", "params": params})


def started() -> HostSession:
    session = HostSession(PARAMS)
    session.start()
    sent = b"".join(session.frames_to_send())
    assert json.loads(sent)["method"] == "flow/run"
    return session


def test_flow_run_frame_is_exact() -> None:
    session = HostSession(PARAMS)
    session.start()
    assert json.loads(b"".join(session.frames_to_send())) == {
        "jsonrpc": "2.0",
        "id": "host:1",
        "method": "flow/run",
        "params": PARAMS,
    }


def test_call_split_across_chunks_dispatches_once() -> None:
    session = started()
    data = call("c:1")
    assert session.receive_data(data[:10]) == []
    events = session.receive_data(data[10:])
    assert [type(e) for e in events] == [CallRequested]
    session.respond_encoded("c:1", json1.dumps({"value": 1}))
    assert json.loads(b"".join(session.frames_to_send())) == {
        "jsonrpc": "2.0",
        "id": "c:1",
        "result": {"value": 1},
    }
    session.respond_encoded("c:1", json1.dumps({"value": 2}))
    assert session.frames_to_send() == [], "a request is answered exactly once"


def test_component_cancel_answers_cancelled_once() -> None:
    session = started()
    session.receive_data(call("c:1"))
    cancel = {"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "c:1"}}
    assert session.receive_data(frame(cancel)) == [CallCancelled("c:1")]
    answer = json.loads(b"".join(session.frames_to_send()))
    assert answer["error"]["data"]["code"] == "CANCELLED"
    assert session.receive_data(frame(cancel)) == []
    session.respond_encoded("c:1", json1.dumps({"value": 1}))
    assert session.frames_to_send() == []


def test_root_cancel_then_owner_closed_and_first_condition_wins() -> None:
    session = started()
    assert session.cancel_root("CANCELLED")
    assert json.loads(b"".join(session.frames_to_send()))["method"] == "request/cancel"
    assert not session.cancel_root("DEADLINE_EXCEEDED")
    session.receive_data(call("c:1"))
    assert json.loads(b"".join(session.frames_to_send()))["error"]["data"]["code"] == "OWNER_CLOSED"
    assert session.condition == "CANCELLED"


def test_a_bare_lf_gets_the_best_effort_parse_error_and_closes() -> None:
    """§1: an empty payload is an invalid frame, and a complete frame that is no JSON/1
    text closes after a best-effort ``-32700`` with ``id: null`` (HOST-CASES FR-03)."""
    session = started()
    (violation,) = session.receive_data(b"\n")
    assert isinstance(violation, Violation) and session.closed
    reply = json.loads(b"".join(session.frames_to_send()))
    assert (reply["id"], reply["error"]["code"]) == (None, -32700)


def test_an_invalid_envelope_under_a_used_id_is_answered_without_it() -> None:
    """The -32600 of an invalid envelope names its request's id only when that id is
    fresh: under a used one it would be a second response to the earlier request."""
    session = started()
    unknown = {"jsonrpc": "2.0", "id": "c:1", "method": "nope", "params": {}}
    session.receive_data(frame(unknown))
    assert json.loads(b"".join(session.frames_to_send()))["error"]["code"] == -32601
    (violation,) = session.receive_data(frame({**unknown, "params": 1}))
    assert isinstance(violation, Violation)
    reply = json.loads(b"".join(session.frames_to_send()))
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    fresh = started()
    fresh.receive_data(frame({**unknown, "id": "c:2", "params": 1}))
    assert json.loads(b"".join(fresh.frames_to_send()))["id"] == "c:2"


def test_any_host_kill_after_a_recorded_condition_ends_with_that_condition() -> None:
    """§11, premature termination, rule 1, whatever the kill waited for: the cancel grace,
    the exit after stdout ended without a response, or the exit after a violation."""
    for kill in ("cancel", "lost", "violation"):
        session = started()
        assert session.cancel_root("DEADLINE_EXCEEDED")
        if kill == "violation":
            session.receive_data(b"not json\n")
            assert session.closed
        session.receive_eof()
        error = judge(session, Ending(137, kill)).error
        assert error is not None and error.code == "DEADLINE_EXCEEDED", (kill, error)
    session = started()  # without a condition, rule 2 before rule 3
    session.receive_data(b"not json\n")
    assert judge(session, Ending(137, "violation")).error.code == "PROTOCOL_ERROR"  # type: ignore[union-attr]
    session = started()  # no kill: the component's own exit decides (rule 3)
    assert session.cancel_root("CANCELLED")
    session.receive_eof()
    assert judge(session, Ending(1)).error.code == "EXECUTION_FAILED"  # type: ignore[union-attr]


def test_success_needs_clean_end_and_exit_zero() -> None:
    session = started()
    result = {"jsonrpc": "2.0", "id": "host:1", "result": {"outcome": "done", "output": 1}}
    assert session.receive_data(frame(result)) == [RootResult({"outcome": "done", "output": 1})]
    session.receive_eof()
    assert judge(session, Ending(0)).result == {"outcome": "done", "output": 1}
    assert judge(session, Ending(1)).error.code == "EXECUTION_FAILED"  # type: ignore[union-attr]


def test_message_of_unknown_method_is_bounded() -> None:
    session = started()
    long = frame({"jsonrpc": "2.0", "id": "c:1", "method": "x" * 5000, "params": {}})
    assert session.receive_data(long) == []
    answer = json.loads(b"".join(session.frames_to_send()))
    assert answer["error"]["code"] == -32601
    assert len(answer["error"]["message"]) <= 1024


VALID = [
    call("c:1"),
    call("c:2", "shared"),
    frame({"jsonrpc": "2.0", "method": "request/cancel", "params": {"requestId": "c:1"}}),
    frame({"jsonrpc": "2.0", "id": "host:1", "result": {"outcome": "done", "output": None}}),
    frame({"jsonrpc": "2.0", "id": "host:1",
           "error": {"code": -32000, "message": "x", "data": {"code": "CANCELLED"}}}),
    frame({"jsonrpc": "2.0", "id": "c:9", "method": "flow/run", "params": {}}),
    frame({"jsonrpc": "2.0", "method": "note", "params": [1]}),
]  # fmt: skip


def mutate(data: bytes, position: int, byte: int, cut: bool) -> bytes:
    if not data:
        return data
    position %= len(data)
    return data[:position] if cut else data[:position] + bytes([byte]) + data[position + 1 :]


chunks = st.one_of(
    st.sampled_from(VALID),
    st.builds(
        mutate, st.sampled_from(VALID), st.integers(0, 300), st.integers(0, 255), st.booleans()
    ),
    st.binary(max_size=40),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(chunks, max_size=12),
    st.lists(st.booleans(), max_size=12),
    st.sampled_from([None, 0, 1, 137]),
)
def test_fuzz_any_component_stream_ends_in_a_classification(
    stream: list[bytes], answers: list[bool], exit_code: int | None
) -> None:
    session = started()
    for chunk, answer in zip(stream, answers + [False] * len(stream), strict=False):
        for event in session.receive_data(chunk):
            if isinstance(event, CallRequested) and answer:
                session.respond_encoded(event.request_id, json1.dumps({"value": None}))
            assert not isinstance(event, Violation) or session.closed
        session.frames_to_send()
    session.receive_eof()
    verdict = judge(session, Ending(exit_code))
    assert (verdict.result is None) != (verdict.error is None)
    if verdict.result is not None:
        assert exit_code == 0 and not session.pending and session.violation is None


DEEP_FRAMES = r"""
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from runner import json1
from runner.protocol.completion import Ending, judge
from runner.protocol.session import CallRequested, HostSession, RootResult, Violation
from test_session import PARAMS, call, frame


def deep(levels, after=16, item=0):  # orjson 3.13.0's encoder corrupts its heap on these
    tree = 0
    for _ in range(levels):
        tree = [tree, *[item] * after]
    return tree


batch = b"[" * 127 + b"0" + (b",0" * 16 + b"]") * 127
session = HostSession(PARAMS)
session.start()
assert len(batch) == 4319 and isinstance(session.receive_data(batch + b"\n")[0], Violation)
session.receive_eof()
assert judge(session, Ending(0)).error.code == "PROTOCOL_ERROR"

session = HostSession(PARAMS)
session.start()
(requested,) = session.receive_data(call("c:1"))
assert isinstance(requested, CallRequested)
floats = deep(12, 100, 123456789.125)
session.respond_encoded("c:1", json1.dumps({"value": floats}))  # a relayed result the host encodes
assert json.loads(b"".join(session.frames_to_send()).splitlines()[-1])["result"]["value"] == floats
(requested,) = session.receive_data(call("c:2"))
session.respond_encoded("c:2", json1.dumps({"value": deep(124)}))
sent = b"".join(session.frames_to_send())
assert json.loads(sent.splitlines()[-1])["result"]["value"] == deep(124)
output = deep(125)  # the frame is 128 levels deep: the most JSON/1 allows
result = {"jsonrpc": "2.0", "id": "host:1", "result": {"outcome": "done", "output": output}}
(event,) = session.receive_data(frame(result).replace(b" ", b""))
assert isinstance(event, RootResult), event
session.receive_eof()
verdict = judge(session, Ending(0))
assert verdict.accepted and verdict.result == {"outcome": "done", "output": output}
print("clean")
"""


def test_frames_that_crash_orjson_get_a_clean_verdict() -> None:
    """A valid 4,319-byte frame once killed the host with SIGABRT (orjson's encoder)."""
    done = subprocess.run(
        [sys.executable, "-c", DEEP_FRAMES], capture_output=True, text=True, timeout=60,
        cwd=Path(__file__).parent,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "clean\n"), done.stderr[-2000:]


def test_a_long_peer_message_is_reported_within_the_message_bound() -> None:
    """A valid -32603 root error with a 1,024-character message once made judge raise
    LocalProtocolError: the violation quoting it was longer than an error message may be."""
    session = started()
    error = {"code": -32603, "message": "m" * 1024}
    (event,) = session.receive_data(frame({"jsonrpc": "2.0", "id": "host:1", "error": error}))
    assert isinstance(event, Violation)
    session.receive_eof()
    verdict = judge(session, Ending(0))
    assert verdict.error is not None and verdict.error.code == "PROTOCOL_ERROR"
    assert len(verdict.error.message) == 1024 and verdict.error.message.endswith(" [...]")
    assert any("m" * 1024 in reason for reason in verdict.reasons), "the whole reason is kept"


DEEP_WIDE = r"""
import resource, sys, time
from fake_component import deep_wide_frame
from runner.protocol.completion import Ending, judge
from test_session import PARAMS
from runner.protocol.session import HostSession, Violation

data = deep_wide_frame() + b"\n"
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)
session = HostSession(PARAMS)
session.start()
started = time.monotonic()
events = []
for at in range(0, len(data), 1 << 16):
    events += session.receive_data(data[at : at + (1 << 16)])
print(time.monotonic() - started)
assert [type(event) for event in events] == [Violation], events
assert judge(session, Ending(0)).error.code == "PROTOCOL_ERROR"
"""


def test_a_deep_and_wide_frame_is_refused_in_bounded_memory_and_time() -> None:
    """127 nested arrays of 65,536 items (16.6 MB) once took 6 GiB and 46 s to refuse: the
    explanation copied the path for every pending sibling. Bound: 400 MiB over the
    baseline, 25 s on a loaded machine (it takes 1-5 s); address space capped at 3 GiB so
    a regression fails here instead of exhausting the machine."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "peak"
        process = subprocess.Popen(
            measured([sys.executable, "-c", DEEP_WIDE], report), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=Path(__file__).parent, preexec_fn=cap,
        )  # fmt: skip
        out, err = process.communicate()
        assert process.returncode == 0, err[-2000:]
        peak = peak_kib(report)
    baseline_kib, seconds = int(out.split()[0]), float(out.split()[1])
    assert (peak - baseline_kib) < 400 * 1024, (peak, baseline_kib)
    assert seconds < 25


def test_fuzz_mutated_conformance_frames_never_raise_a_local_error() -> None:
    """900 seeded cases of tests/framefuzz.py (the corpus's frames mutated: deep nesting
    of orjson's crash shape, long strings, many and duplicate members, odd numbers, bad
    UTF-8, split frames): each ends in events and a verdict, never an exception.
    bench/fuzz.py runs the same cases by the million."""
    mutator = Mutator(2024)
    codes = Counter(play(mutator.case(), exit_code) for exit_code in [0, 1, None] * 300)
    assert codes["PROTOCOL_ERROR"] > 600, codes
