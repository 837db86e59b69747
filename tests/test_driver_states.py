"""The driver's stdin state on its own: every pair of ``STDIN_MOVES`` lands where the
table says, and every other (state, step) pair raises ``LocalProtocolError`` and leaves
the state as it was (as ``tests/test_session_states.py`` walks the session's table)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runner.host.driver import RunDriver
from runner.host.run_state import STDIN_MOVES, Stdin
from runner.protocol.codes import LocalProtocolError

pytestmark = pytest.mark.timeout(60)

STEPS = ("send", "sent", "close", "break")


@pytest.mark.parametrize("state", list(Stdin))
@pytest.mark.parametrize("step", STEPS)
def test_every_pair_moves_by_the_table_or_raises_unchanged(state: Stdin, step: str) -> None:
    run = SimpleNamespace(stdin_state=state)
    if (state, step) in STDIN_MOVES:
        RunDriver._stdin_move(run, step)  # type: ignore[arg-type]
        assert run.stdin_state is STDIN_MOVES[state, step]
    else:
        with pytest.raises(LocalProtocolError, match=f"cannot {step} while {state.name}"):
            RunDriver._stdin_move(run, step)  # type: ignore[arg-type]
        assert run.stdin_state is state


def test_the_writer_always_gets_to_close() -> None:
    """From every state a close leads to CLOSING, where the writer sends what it holds and
    closes stdin; a break while closing stays there (the writer must not wait for a close
    that already came), and nothing leaves CLOSING."""
    for state in Stdin:
        assert STDIN_MOVES[state, "close"] is Stdin.CLOSING
    assert STDIN_MOVES[Stdin.CLOSING, "break"] is Stdin.CLOSING
    assert {new for (old, _), new in STDIN_MOVES.items() if old is Stdin.CLOSING} == {Stdin.CLOSING}
    assert (Stdin.BROKEN, "send") not in STDIN_MOVES, "nothing is written once broken"
