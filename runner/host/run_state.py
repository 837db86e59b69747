"""What the driver holds for one run, and the states it moves through.

:class:`RunState` is the base of :class:`~runner.host.driver.RunDriver`: every field of a
run is made here, and each layer above it (stdin writer, calls, pump, stop sequence)
adds behaviour only.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

import anyio
from anyio.abc import TaskGroup

from runner.host.bounds import TreeBudget
from runner.host.broker import Broker, CallContext
from runner.host.channels import ChannelParty
from runner.host.operations import OperationLedger, Ticket
from runner.protocol.completion import Ending, HostKill, Verdict
from runner.protocol.session import CallRequested, Condition, HostSession
from runner.sandbox.base import ImmediateSend, RunningComponent
from runner.sandbox.registry import StopGraces

STDERR_LIMIT = 1 << 20
"""Bytes of component stderr kept for the report; the rest is counted and marked."""


class Stdin(Enum):
    """Where the component's stdin stands, as the run writes to it."""

    OPEN = "OPEN"
    """Nothing is in a send: an answer may go straight to stdin if nothing waits."""
    SENDING = "SENDING"
    """The writer task is in a send: everything queues behind it."""
    CLOSING = "CLOSING"
    """Half-close asked for: nothing new is written; the writer sends what it holds
    (nothing, once stdin broke), then closes stdin."""
    BROKEN = "BROKEN"
    """Stdin broke, or the component is being killed: nothing is written or kept."""


STDIN_MOVES: Final[dict[tuple[Stdin, str], Stdin]] = {
    **{(state, "close"): Stdin.CLOSING for state in Stdin},
    **{(state, "break"): Stdin.BROKEN for state in (Stdin.OPEN, Stdin.SENDING, Stdin.BROKEN)},
    **{(Stdin.CLOSING, step): Stdin.CLOSING for step in ("send", "sent", "break")},
    (Stdin.OPEN, "send"): Stdin.SENDING,
    (Stdin.SENDING, "sent"): Stdin.OPEN,
    (Stdin.BROKEN, "sent"): Stdin.BROKEN,
}
"""Every move of :class:`Stdin`: ``send`` and ``sent`` bracket the writer's send,
``close`` asks for the half-close, ``break`` is a failed write or the host's kill.
Nothing leaves CLOSING, so the writer always gets to close. Any other pair is a driver
bug and raises :class:`LocalProtocolError`."""


class Phase(Enum):
    """Whether the caller still drives the run."""

    DRIVING = "DRIVING"
    STOPPING = "STOPPING"
    """The caller's task was cancelled: the run's own tasks serve the cancel grace, and
    no new work starts."""


class RunControl:
    """Lets the caller stop a run: ``cancel()`` gracefully, ``kill()`` at once."""

    def __init__(self) -> None:
        self.cancel_requested = anyio.Event()
        self.kill_requested = anyio.Event()
        self.stopped: RunOutcome | None = None
        """The judged outcome, when the task driving the run was cancelled instead."""

    def cancel(self) -> None:
        """Record cancellation, send request/cancel for the root, kill after the grace."""
        self.cancel_requested.set()

    def kill(self) -> None:
        """Record cancellation and kill the component now."""
        self.cancel_requested.set()
        self.kill_requested.set()


@dataclass
class StderrStore:
    """The component's stderr: the last ``limit`` bytes kept, the total counted."""

    limit: int = STDERR_LIMIT
    total: int = 0
    data: bytearray = field(default_factory=bytearray)

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)

    def text(self) -> str:
        """Kept stderr as text, with an explicit marker where bytes were dropped."""
        body = self.data.decode("utf-8", "replace")
        if self.truncated:
            return f"[... {self.total - len(self.data)} bytes of stderr truncated ...]\n{body}"
        return body


@dataclass
class RunOutcome:
    """What driving one component produced: the verdict and the facts behind it."""

    verdict: Verdict
    session: HostSession
    ending: Ending
    stderr: StderrStore
    timings: dict[str, float]
    dispatches: int


class RunState:
    """The fields of one driven run. ``pumping`` and ``unwritten`` are plain fields read
    on every frame: they batch the pump's writes and decide nothing about what is legal."""

    def __init__(
        self,
        component: RunningComponent,
        session: HostSession,
        broker: Broker,
        context: CallContext,
        graces: StopGraces,
        control: RunControl | None,
        ledger: OperationLedger,
        channels: ChannelParty | None,
    ) -> None:
        self.component = component
        self.session = session
        self.broker = broker
        self.context = context
        self.graces = graces
        self.control = control or RunControl()
        self.ledger = ledger
        self.tree: TreeBudget = ledger.tree  # the run tree's
        self.channels = channels
        self.stderr = StderrStore()
        self.stderr_sink: Callable[[bytes], None] | None = None
        self.settled = anyio.Event()  # root response or violation
        self.over = anyio.Event()  # the supervisor is done: the run's tasks end
        self.exited = anyio.Event()
        self.stdout_done = anyio.Event()
        self.exit_code: int | None = None
        self.host_kill: HostKill | None = None
        self.calls: dict[str, anyio.CancelScope] = {}
        """The cancel scope of every admitted call, from admission (queued) to its answer."""
        self.queued: deque[tuple[CallRequested, Ticket | None]] = deque()
        """Admitted calls not yet started; the pump runs them before it reads again."""
        self.payloads: deque[bytes] = deque()  # framed, not yet decoded (the pump's)
        self.parked: list[anyio.Event] = []  # one per idle task of the pool
        self.condition: Condition | None = None
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}
        self.output: deque[bytes] = deque()  # answers for stdin the transport has not taken
        self.output_offset = 0  # how much of the first of them it took
        self.output_drops = 0  # times the output was dropped: a write begun before is not taken
        self.output_bytes = 0  # what it has not: with the outbox, the answers owed
        self.owed_charged = 0  # the answers owed as last charged to the tree's budget
        self.charges: dict[str, int] = {}  # large pending requests' sizes, charged too
        self.output_room: anyio.Event | None = None  # set to wake the waiting pump
        self.output_ready: anyio.Event | None = None  # set to wake the idle writer
        self.stdin_state = Stdin.OPEN
        stdin = component.stdin
        self.write_now = stdin.send_nowait if isinstance(stdin, ImmediateSend) else None
        self.loop = asyncio.get_running_loop()
        self.write_handle: asyncio.Handle | None = None  # the scheduled _write_out
        self.pumping = False  # the pump's pass runs (until it waits): it writes at the end
        self.unwritten = False  # the session queued frames during that pass
        self.resumed = 0.0  # when the pump last came back from the loop (PUMP_SLICE)
        self.task_group: TaskGroup | None = None
        self.phase = Phase.DRIVING
