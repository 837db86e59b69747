"""What the driver holds for one run, and the states it moves through: every field of a
run is made in :class:`RunState`; the layers of :class:`~runner.host.driver.RunDriver`
above it (stdin writer, pump, stop sequence) add behaviour only."""

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
    """Half-close asked for: the writer sends what it holds, then closes stdin."""
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
"""Every move of :class:`Stdin` (``send``/``sent`` bracket the writer's send, ``break`` is
a failed write or the host's kill); nothing leaves CLOSING, so the writer always gets to
close. Any other pair is a driver bug and raises :class:`LocalProtocolError`."""


@dataclass(eq=False)
class RunControl:
    """Lets the caller stop a run: ``cancel()`` gracefully, ``kill()`` at once."""

    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    kill_requested: anyio.Event = field(default_factory=anyio.Event)
    stopped: RunOutcome | None = None
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
    """The component's stderr: the last :data:`STDERR_LIMIT` bytes kept, the total counted."""

    total: int = 0
    data: bytearray = field(default_factory=bytearray)

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > STDERR_LIMIT:
            del self.data[: len(self.data) - STDERR_LIMIT]

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


@dataclass(eq=False)
class RunState:
    """The fields of one driven run. ``pumping`` and ``unwritten`` are plain fields read
    on every frame: they batch the pump's writes and decide nothing about what is legal."""

    component: RunningComponent
    session: HostSession
    broker: Broker
    context: CallContext
    graces: StopGraces
    control: RunControl
    ledger: OperationLedger
    channels: ChannelParty | None
    stderr_sink: Callable[[bytes], None] | None = None
    stderr: StderrStore = field(default_factory=StderrStore)
    settled: anyio.Event = field(default_factory=anyio.Event)  # root response or violation
    over: anyio.Event = field(default_factory=anyio.Event)  # the supervisor is done
    exited: anyio.Event = field(default_factory=anyio.Event)
    stdout_done: anyio.Event = field(default_factory=anyio.Event)
    exit_code: int | None = None
    host_kill: HostKill | None = None
    calls: dict[str, anyio.CancelScope] = field(default_factory=dict)
    """The cancel scope of every admitted call, from admission (queued) to its answer."""
    queued: deque[tuple[CallRequested, Ticket | None]] = field(default_factory=deque)
    """Admitted calls not yet started; the pump runs them before it reads again."""
    payloads: deque[bytes] = field(default_factory=deque)  # framed, not yet decoded
    parked: list[anyio.Event] = field(default_factory=list)  # one per idle task of the pool
    condition: Condition | None = None
    started: float = field(default_factory=time.monotonic)
    timings: dict[str, float] = field(default_factory=dict)
    output: deque[bytes] = field(default_factory=deque)  # answers stdin has not taken
    output_offset: int = 0  # how much of the first of them it took
    output_drops: int = 0  # times the output was dropped: a write begun before is not taken
    output_bytes: int = 0  # what it has not: with the outbox, the answers owed
    owed_charged: int = 0  # the answers owed as last charged to the tree's budget
    charges: dict[str, int] = field(default_factory=dict)  # large pending requests' sizes
    output_room: anyio.Event | None = None  # set to wake the waiting pump
    output_ready: anyio.Event | None = None  # set to wake the idle writer
    stdin_state: Stdin = Stdin.OPEN
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    write_handle: asyncio.Handle | None = None  # the scheduled _write_out
    pumping: bool = False  # the pump's pass runs (until it waits): it writes at the end
    unwritten: bool = False  # the session queued frames during that pass
    resumed: float = 0.0  # when the pump last came back from the loop (PUMP_SLICE)
    task_group: TaskGroup | None = None
    stopping: bool = False  # the caller's task was cancelled: the grace is served, no new work

    def __post_init__(self) -> None:
        self.tree: TreeBudget = self.ledger.tree  # the run tree's
        stdin = self.component.stdin
        self.write_now = stdin.send_nowait if isinstance(stdin, ImmediateSend) else None
