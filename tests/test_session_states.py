"""HostSession's state machine on its own: every legal move of ``_MOVES`` lands where the
table says, every other (state, step) pair raises ``LocalProtocolError`` and leaves the
state as it was, and ``_ADMITS`` decides what the component may ask for in each state.
Then the host-side misuses of STYLE.md practice 2: a second ``start``, a cancel before
``start``, an answer to a request id the session never admitted."""

from __future__ import annotations

import json

import pytest

from runner import json1
from runner.protocol.codes import LocalProtocolError, OperationError
from runner.protocol.names import COMPONENT_TO_HOST_METHODS
from runner.protocol.session import (
    _ADMITS,
    _MOVES,
    CallRequested,
    HostSession,
    SessionState,
    Step,
)

pytestmark = pytest.mark.timeout(60)

PARAMS = {
    "protocol": "run/1",
    "input": None,
    "settings": {},
    "attachments": {},
    "scratch": "/flow/scratch",
    "deadlineUnixMs": 1_900_000_000_000,
}
S = SessionState


def frame(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def call(rid: str) -> bytes:
    params = {"operationId": "o", "slot": "s", "method": "m", "input": None}
    return frame({"jsonrpc": "2.0", "id": rid, "method": "capability/call", "params": params})


ROOT_RESULT = frame({"jsonrpc": "2.0", "id": "host:1", "result": {"outcome": "done", "output": 1}})


def reach(state: SessionState) -> HostSession:
    """A session brought to ``state`` through its public methods only."""
    session = HostSession(PARAMS)
    if state is S.NOT_STARTED:
        return session
    session.start()
    if state is S.CANCELLING:
        assert session.cancel_root("CANCELLED")
    elif state is S.RESPONDED:
        session.receive_data(ROOT_RESULT)
    elif state is S.ENDED:
        session.receive_eof()
    elif state is S.CLOSED:
        session.receive_data(b"not json\n")
    assert session.state is state
    return session


def test_public_methods_follow_the_table() -> None:
    """Each move the driver makes lands where ``_MOVES`` says."""
    session = HostSession(PARAMS)
    assert session.state is S.NOT_STARTED
    session.start()
    assert session.state is _MOVES[S.NOT_STARTED, Step.START] is S.RUNNING
    assert session.cancel_root("DEADLINE_EXCEEDED")
    assert session.state is _MOVES[S.RUNNING, Step.CANCEL] is S.CANCELLING
    assert session.receive_data(ROOT_RESULT) != []
    assert session.state is _MOVES[S.CANCELLING, Step.RESPONSE] is S.RESPONDED
    assert session.receive_eof() == []
    assert session.state is _MOVES[S.RESPONDED, Step.EOF] is S.ENDED
    truncated = reach(S.RUNNING)
    truncated.receive_data(b'{"jsonrpc"')
    truncated.receive_eof()
    assert truncated.state is S.CLOSED and truncated.violation is not None


@pytest.mark.parametrize("state", list(SessionState))
@pytest.mark.parametrize("step", list(Step))
def test_every_pair_moves_by_the_table_or_raises_unchanged(state: SessionState, step: Step) -> None:
    session = reach(state)
    if (state, step) in _MOVES:
        session._move(step)
        assert session.state is _MOVES[state, step]
        assert session.closed is (session.state is S.CLOSED)
    else:
        with pytest.raises(LocalProtocolError, match=f"{step.value}.*{state.name}"):
            session._move(step)
        assert session.state is state


def test_no_move_leaves_a_terminal_state_but_cancel_after_a_clean_end() -> None:
    """CLOSED is final; ENDED takes only the host's cancel (the condition still decides a
    kill's verdict, §11), and nothing but stdout's end brings a session to ENDED."""
    assert {new for (old, _), new in _MOVES.items() if old is S.CLOSED} == {S.CLOSED}
    assert {step for (old, step) in _MOVES if old is S.ENDED} == {Step.CANCEL, Step.VIOLATION}
    assert {step for (old, step), new in _MOVES.items() if new is S.ENDED} == {
        Step.EOF,
        Step.CANCEL,
    }


def test_each_state_admits_what_its_row_says() -> None:
    """Every component method while RUNNING, channel settlement alone while CANCELLING
    (PROTOCOL.md §10), nothing in any other state: the rest is OWNER_CLOSED."""
    assert _ADMITS[S.RUNNING] == COMPONENT_TO_HOST_METHODS
    assert _ADMITS[S.CANCELLING] == {"channel/close", "channel/release"}
    requests = {
        "capability/call": {"operationId": "o", "slot": "s", "method": "m", "input": None},
        "channel/close": {"endpoint": "e"},
        "channel/release": {"endpoint": "e"},
    }
    for state in (S.NOT_STARTED, S.RUNNING, S.CANCELLING):
        for method, params in requests.items():
            session = reach(state)
            session.frames_to_send()
            request = {"jsonrpc": "2.0", "id": "c:1", "method": method, "params": params}
            events = session.receive_data(frame(request))
            answer = b"".join(session.frames_to_send())
            if method in _ADMITS[state]:
                assert [type(e) for e in events] == [CallRequested], (state, method)
            else:
                assert events == [] and b"OWNER_CLOSED" in answer, (state, method)


def test_a_second_start_raises_and_changes_nothing() -> None:
    session = reach(S.RUNNING)
    session.frames_to_send()
    with pytest.raises(LocalProtocolError, match="start is not allowed in session state RUNNING"):
        session.start()
    assert session.state is S.RUNNING and session.frames_to_send() == []


def test_cancel_before_start_raises() -> None:
    session = HostSession(PARAMS)
    with pytest.raises(LocalProtocolError, match="flow/run was never sent"):
        session.cancel_root("CANCELLED")
    assert session.state is S.NOT_STARTED and session.condition is None


@pytest.mark.parametrize("state", [S.CANCELLING, S.RESPONDED, S.CLOSED])
def test_a_cancel_that_races_the_end_is_refused_quietly(state: SessionState) -> None:
    session = reach(state)
    condition = session.condition
    assert not session.cancel_root("DEADLINE_EXCEEDED")
    assert session.state is state and session.condition == condition


@pytest.mark.parametrize("how", ["respond", "respond_error", "respond_encoded"])
def test_an_answer_to_an_id_never_admitted_raises(how: str) -> None:
    """A driver bug is not dropped like a late answer: it raises, and queues nothing."""
    session = reach(S.RUNNING)
    session.frames_to_send()
    answers = {
        "respond": lambda rid: session.respond_encoded(rid, json1.dumps({"value": 1})),
        "respond_error": lambda rid: session.respond_error(rid, OperationError("UNAVAILABLE", "x")),
        "respond_encoded": lambda rid: session.respond_encoded(rid, b'{"value":1}'),
    }
    with pytest.raises(LocalProtocolError, match="request 'c:9' was never admitted"):
        answers[how]("c:9")
    # A refused request (methods not admitted once cancelling) was never admitted either.
    assert session.cancel_root("CANCELLED")
    session.receive_data(call("c:2"))
    assert b"OWNER_CLOSED" in b"".join(session.frames_to_send())
    with pytest.raises(LocalProtocolError, match="never admitted"):
        answers[how]("c:2")
    assert session.frames_to_send() == []


@pytest.mark.parametrize("how", ["respond", "respond_encoded"])
def test_an_answer_to_a_settled_id_is_a_quiet_no_op(how: str) -> None:
    """Answered, cancelled by the component, or cleared by a violation: a real race."""
    session = reach(S.RUNNING)
    (event,) = session.receive_data(call("c:1"))
    assert isinstance(event, CallRequested)

    def answer() -> None:
        if how == "respond":
            session.respond_encoded("c:1", json1.dumps({"value": 1}))
        else:
            session.respond_encoded("c:1", b'{"value":1}')

    answer()
    session.frames_to_send()
    answer()
    assert session.frames_to_send() == []
    session.receive_data(call("c:3"))
    session.receive_data(b"not json\n")
    session.frames_to_send()
    session.respond_encoded("c:3", json1.dumps({"value": 1}))
    assert session.state is S.CLOSED and session.frames_to_send() == []
