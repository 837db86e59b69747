"""Drive one HostSession against a running component (anyio).

The driver owns everything with a clock or a socket: it pumps the component's stdout into
the session and the session's frames into stdin (reading never waits on writing), drains
stderr into bounded storage, dispatches component requests to a broker, and enforces the
ending: after the root response it half-closes stdin and gives the component a grace
period to exit; on the deadline or a cancellation it records the condition, sends
``request/cancel`` for the root, waits a grace period, then kills. The verdict comes from
``runner.protocol.completion``; nothing here decides what the bytes mean.

Calls and channel items are the hot path (``bench/calls.py``, ``bench/channels.py``), and
hand-offs between tasks are what they cost: a task switch costs more than a small call's
protocol work. So one task at a time holds the *pump* role (:meth:`RunDriver._pump`): it reads
stdout, handles every complete frame of a read in one pass, then runs the calls those
frames admitted itself, one after another, each inside the call's own cancel scope. A call
that completes without suspending (a broker that answers at once, a channel item already
there, room in a queue) costs no hand-off at all. A call that suspends hands the pump
role, at that moment, to an idle task of the pool (or a new one) and finishes in the task
it started in (:class:`_Eager`), so reading never waits on a call.

Answers leave the same way, without a task: everything the session queued by the end of a
loop step goes out in one write, made by the pump before it waits to read again or, for
answers made elsewhere, by one loop callback; only when stdin cannot take it at once (the
component is not reading), or when it is large, does a writer task take over, handing the
transport :data:`~runner.host.bounds.WRITE_SLICE` at a time, and then everything after it
queues behind it, in order.

What the run holds for its component is bounded with the rest of its run tree
(:mod:`runner.host.bounds`): the answers it owes (the session's outbox and the output not
yet handed to stdin) are charged to the tree's budget, and the pump runs no call and reads
no more while the component leaves more than :data:`STDIN_BACKLOG` of them unread, or more
than :data:`OWED_FREELY` while the tree's budget is spent; a large request is refused
``RESOURCE_EXHAUSTED`` when the budget cannot hold it. The pump yields to the loop between
calls once it has run for :data:`PUMP_SLICE` seconds: nothing a component asks for holds
the loop long.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from contextlib import suppress
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from itertools import islice
from typing import Any, Final, Generic, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus

from runner import json1
from runner.host.bounds import SMALL_REQUEST, WRITE_SLICE, TreeBudget, offload
from runner.host.broker import Broker, CallContext
from runner.host.channels import ChannelParty
from runner.host.operations import RETAINED_BYTES, OperationLedger, Ticket
from runner.json1 import JSONValue
from runner.protocol.codes import (
    LOCAL_CODES,
    LocalProtocolError,
    OperationError,
    bounded_message,
)
from runner.protocol.completion import Ending, HostKill, Verdict, judge
from runner.protocol.names import CHANNEL_METHODS
from runner.protocol.results import validate_capability_result, validate_run_result
from runner.protocol.session import (
    CallCancelled,
    CallRequested,
    Condition,
    Decoded,
    Event,
    HostSession,
    RootError,
    RootResult,
    Violation,
    decode,
)
from runner.sandbox.base import ImmediateSend, RunningComponent
from runner.sandbox.registry import StopGraces

OPERATION_METHODS = ("flow/run-child", "capability/call")
STDERR_LIMIT = 1 << 20
"""Bytes of component stderr kept for the report; the rest is counted and marked."""
DRAIN_AFTER_EXIT = 2.0
SIGKILL_EXIT = 128 + 9  # how both backends report a process ended by SIGKILL
"""Seconds to wait for stdout EOF once the process has exited."""
DECODE_IN_THREAD = 1 << 18
"""Frames of at least this many bytes are decoded in a worker thread (see _pump)."""
BIG_DECODES = 2
"""Such decodes at once in this process, over every run it drives (a tree's root and its
children): a hostile 16 MiB frame can take ~0.5 GiB and seconds to refuse, and each run
of a tree may send one at the same time; the others wait their turn."""
_decoding = threading.BoundedSemaphore(BIG_DECODES)
"""Held by the decoding thread itself: a decode abandoned by its cancelled task goes on in
its thread, and still counts."""
_big_decodes: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("big_decodes")
STDIN_BACKLOG = 1 << 24
"""Bytes of answers the host holds for a component that does not read its stdin (the
session's outbox and the output not yet in the transport); past it the pump runs no more
calls and reads no more until they leave. So a component that never reads, and asks
(replays of a large result, reads of a full channel), holds at most this and one answer,
instead of every answer it asked for."""
OWED_FREELY = 1 << 16
"""Answers a run may owe whatever its tree's budget: the small answers of one pass."""
SMALL_VALUES = 256
"""Results of up to this many values (and 64 KiB of text) are encoded on the loop."""
PUMP_SLICE = 0.02
"""Seconds the pump runs calls before it lets the loop serve others (the deadline, a
signal, the other runs of the tree)."""
READ_BYTES = 1 << 16
"""The most stdout the pump takes at once (all that is there, up to this): one read of
the transport (runner/sandbox/pipes.py, docker/attach.py), so a take is never a join of
several reads into one object large enough for glibc to map in and out for it."""
_T = TypeVar("_T")


class Stdin(Enum):
    """Where the component's stdin stands, as the run writes to it."""

    OPEN = "OPEN"
    """Nothing is in a send: an answer may go straight to stdin if nothing waits."""
    SENDING = "SENDING"
    """The writer task is in a send: everything queues behind it."""
    CLOSING = "CLOSING"
    """The half-close is asked for: nothing new is written; the writer sends what it
    holds (nothing, once stdin broke), then closes stdin."""
    BROKEN = "BROKEN"
    """Stdin broke, or the component is being killed: nothing is written, nothing kept;
    the writer waits for the close."""


_STDIN_MOVES: Final[dict[tuple[Stdin, str], Stdin]] = {
    (Stdin.OPEN, "send"): Stdin.SENDING,
    (Stdin.OPEN, "close"): Stdin.CLOSING,
    (Stdin.OPEN, "break"): Stdin.BROKEN,
    (Stdin.SENDING, "sent"): Stdin.OPEN,
    (Stdin.SENDING, "close"): Stdin.CLOSING,
    (Stdin.SENDING, "break"): Stdin.BROKEN,
    (Stdin.CLOSING, "send"): Stdin.CLOSING,
    (Stdin.CLOSING, "sent"): Stdin.CLOSING,
    (Stdin.CLOSING, "close"): Stdin.CLOSING,
    (Stdin.CLOSING, "break"): Stdin.CLOSING,
    (Stdin.BROKEN, "sent"): Stdin.BROKEN,
    (Stdin.BROKEN, "break"): Stdin.BROKEN,
    (Stdin.BROKEN, "close"): Stdin.CLOSING,
}
"""Every move of :class:`Stdin`: ``send`` and ``sent`` bracket the writer task's send,
``close`` asks for the half-close, ``break`` is a failed write or the host's kill. A
break while closing drops what was held and the writer closes at once. Any other pair is
a driver bug and raises :class:`LocalProtocolError`."""


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


async def drive(
    component: RunningComponent,
    params: dict[str, JSONValue],
    broker: Broker,
    *,
    run_id: str = "run",
    depth: int = 0,
    graces: StopGraces | None = None,
    control: RunControl | None = None,
    stderr_sink: Callable[[bytes], None] | None = None,
    retained_bytes: int = RETAINED_BYTES,
    channels: ChannelParty | None = None,
) -> RunOutcome:
    """Run the Run/1 exchange with ``component`` to its judged end.

    ``retained_bytes`` bounds what the operations kept for replay hold (new ones beyond
    it are ``RESOURCE_EXHAUSTED``). ``channels`` serves the invocation's ``channel/*``
    requests; without it they are ``UNAVAILABLE``.
    """
    graces = graces or StopGraces()
    run = RunDriver(component, HostSession(params), broker, run_id, depth, graces, control)
    run.channels = channels
    run.tree = tree = TreeBudget() if channels is None else channels.hub.budget
    run.ledger = OperationLedger(retained_bytes, tree)
    run.stderr_sink = stderr_sink
    try:
        await run.run()
    except anyio.get_cancelled_exc_class():
        run.control.stopped = run.outcome()
        raise
    finally:
        run.release()
    return run.outcome()


class Phase(Enum):
    """Whether the caller still drives the run."""

    DRIVING = "DRIVING"
    """The caller's task supervises the run."""
    STOPPING = "STOPPING"
    """The caller's task was cancelled: the run's own tasks serve the cancel grace, and
    no new work starts."""


class RunDriver:
    """Drives one component's session to its end: the supervisor, the pumps and stdin.

    The stdin side is a :class:`Stdin` state moved only through :data:`_STDIN_MOVES`.
    ``pumping`` and ``unwritten`` stay plain fields, read on every frame: they batch the
    pump's writes (flow control), and decide nothing about what is legal.
    """

    def __init__(
        self,
        component: RunningComponent,
        session: HostSession,
        broker: Broker,
        run_id: str,
        depth: int,
        graces: StopGraces,
        control: RunControl | None,
    ) -> None:
        self.component = component
        self.session = session
        self.broker = broker
        self.context = CallContext(run_id, _deadline(session), depth)
        self.graces = graces
        self.control = control or RunControl()
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
        self.tree = TreeBudget()  # the run tree's (drive() gives the hub's)
        self.ledger = OperationLedger()
        self.resumed = 0.0  # when the pump last came back from the loop (PUMP_SLICE)
        self.task_group: TaskGroup | None = None
        self.phase = Phase.DRIVING
        self.channels: ChannelParty | None = None

    # ----- the supervisor -------------------------------------------------------------

    async def run(self) -> None:
        """Supervise the run in the caller's task; its tasks run in the run's own scope.

        The pumps, the writer and the watchers run in one task group that the caller's
        cancellation does not reach (:meth:`_serve`): a caller that cancels the driving
        task stops the run (:meth:`_stop`) while those same tasks go on reading, writing
        and answering through the cancel grace. The group ends when the run does.
        """
        self.session.start()
        self._flush()
        async with anyio.create_task_group() as supervisor:
            # Shielded: _serve is started at once and ends only when the run is over, so a
            # cancellation here (the caller cancelled as the run began) must not abandon
            # the start: that would wait for _serve with nothing left to end it.
            with anyio.CancelScope(shield=True):
                await supervisor.start(self._serve)
            try:
                await self._supervise()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await self._stop()
                raise
            finally:
                self.over.set()

    async def _serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The run's own scope: every task that serves the component, until the run is
        over (shielded: the caller's cancellation stops the run through :meth:`_stop`)."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                self.task_group = tg
                tg.start_soon(self._write_stdin)
                tg.start_soon(self._work)  # the first pump
                tg.start_soon(self._read_stderr)
                tg.start_soon(self._wait_exit)
                tg.start_soon(self._watch_deadline)
                task_status.started()
                await self.over.wait()
                tg.cancel_scope.cancel()

    async def _supervise(self) -> None:
        ended = (self.settled, self.exited, self.stdout_done)
        await _wait_any((*ended, self.control.cancel_requested))
        if not _any_set(ended):
            await self._cancel_root()
        if self.session.closed and not self.exited.is_set():
            await self._kill("violation")
        self._close_stdin()
        await _wait_any((self.exited, self.control.kill_requested), self.graces.exit)
        if not self.exited.is_set():
            lost: HostKill = "post-response" if self.session.root_response else "lost"
            await self._kill("cancel" if self.control.kill_requested.is_set() else lost)
        await self.exited.wait()
        await _wait_any((self.stdout_done,), DRAIN_AFTER_EXIT)
        self.timings["total"] = time.monotonic() - self.started

    async def _cancel_root(self) -> None:
        condition: Condition = self.condition or "CANCELLED"
        self.condition = condition
        if self.session.cancel_root(condition):
            self._flush()
        for scope in list(self.calls.values()):
            scope.cancel()
        if not self.control.kill_requested.is_set():
            await _wait_any(
                (self.settled, self.exited, self.stdout_done, self.control.kill_requested),
                self.graces.cancel,
            )
        if not _any_set((self.settled, self.exited, self.stdout_done)):
            await self._kill("cancel")

    async def _stop(self) -> None:
        """The caller's task was cancelled: cancel the root, then kill after the grace.

        The run's tasks go on: every call still open is stopped and answered
        ``CANCELLED``, and the writer serves the grace, so a component that waits for its
        calls' answers before its root response (the SDK does, §10) can stop
        cooperatively and is judged by its answer (``CANCELLED``), not as a lost channel.
        """
        if self.exited.is_set():
            return
        self._enter_stopping()
        if self.session.cancel_root(self.condition or "CANCELLED"):
            self._flush()
        # A kill the host had already decided (interrupted by this cancellation) is not
        # given a second grace.
        grace = 0 if self.host_kill is not None else self.graces.cancel
        with anyio.move_on_after(grace):
            await self.exited.wait()
            with anyio.move_on_after(DRAIN_AFTER_EXIT):
                await self.stdout_done.wait()
            return
        await self._kill("cancel")
        # The run's tasks end here: a pump may be held in a decode only a cancellation
        # abandons. Nothing reads the output any more: a stream left full would hold back
        # the end of the attach socket, which is what waiting for the exit reads to (Docker).
        assert self.task_group is not None
        self.task_group.cancel_scope.cancel()
        for stream in (self.component.stdout, self.component.stderr):
            await stream.aclose()
        self.exit_code = await self.component.wait()

    def _enter_stopping(self) -> None:
        """Move to :attr:`Phase.STOPPING`: the condition is set (``CANCELLED`` unless one
        was recorded), calls not yet started are answered here, running ones stopped."""
        if self.phase is not Phase.DRIVING:
            raise LocalProtocolError(f"a run cannot stop while {self.phase.name}")
        self.phase = Phase.STOPPING
        self.condition = self.condition or "CANCELLED"
        for event, _ in self.queued:
            rid = event.request_id
            self.session.respond_error(rid, OperationError("CANCELLED", "the run was stopped"))
            self._finished(rid)
        self.queued.clear()
        for scope in list(self.calls.values()):
            scope.cancel()

    async def _kill(self, why: HostKill) -> None:
        """Kill the component; the report names the reason only if the kill took effect
        (a component that had already exited by itself was not killed by the host)."""
        first = self.host_kill is None
        if first:
            self.host_kill = why
        # Before the kill, not after it: nothing written to the component now can arrive,
        # so what waits is dropped, and a pump that waited for it to leave (STDIN_BACKLOG)
        # reads stdout again. An engine finishes a kill only once the container's output
        # has been taken (Docker copies it to the attach stream before it reports the
        # exit), so a kill made while the host read nothing would wait for itself.
        self._stdin_move("break")
        self._output_taken()
        await self.component.kill()
        if first and not self.component.facts.killed_by_host:
            self.host_kill = None

    def _kill_that_took(self) -> HostKill | None:
        """The host's kill, if it is what ended the component: SIGKILL exits 137. An
        engine accepts a kill for a process already on its way out (it exited 0 by itself
        between our look and the signal); that kill did nothing and is not reported."""
        if self.host_kill is None or self.exit_code != SIGKILL_EXIT:
            return None
        return self.host_kill

    def outcome(self) -> RunOutcome:
        ending = Ending(self.exit_code, self._kill_that_took(), self.component.facts.oom_killed)
        return RunOutcome(
            judge(self.session, ending),
            self.session,
            ending,
            self.stderr,
            self.timings,
            self.ledger.dispatches,
        )

    def release(self) -> None:
        """The run is over: what it held leaves its tree's budget."""
        self.ledger.close()
        self.tree.held -= self.owed_charged + sum(self.charges.values())
        self.owed_charged = 0
        self.charges.clear()

    # ----- pumps ----------------------------------------------------------------------

    def _flush(self) -> None:
        """The session queued frames: they leave at the end of this loop step, in one
        write with whatever else is queued by then (see :meth:`_write_out`): the pump's
        pass writes before the pump waits; anything else schedules one loop callback."""
        self._charge_owed()
        if self.pumping:
            self.unwritten = True
        elif self.write_handle is None:
            self.write_handle = self.loop.call_soon(self._write_out)

    def _charge_owed(self) -> int:
        """Bring the tree's charge for the answers this run owes up to date; return them."""
        owed = self.session.outbox_bytes + self.output_bytes
        self.tree.held += owed - self.owed_charged
        self.owed_charged = owed
        return owed

    def _held_back(self) -> bool:
        """Whether the pump must wait before it runs a call or reads more: the component
        leaves more than :data:`STDIN_BACKLOG` of answers unread, or more than
        :data:`OWED_FREELY` while the tree's budget is spent (a run that owes little may
        always go on)."""
        owed = self.session.outbox_bytes + self.output_bytes  # charged as it changed
        if owed <= OWED_FREELY or self.stdin_state is Stdin.BROKEN:
            return False
        tree = self.tree
        return owed > STDIN_BACKLOG or tree.held >= tree.limit

    async def _room(self) -> None:
        """Wait until the pump is no longer :meth:`_held_back` (the answers left, or were
        dropped), letting what was queued leave first."""
        self._write_out()
        while self._held_back():
            if self.output_room is None:
                self.output_room = anyio.Event()
            await self.output_room.wait()

    def _pause_pumping(self) -> None:
        """The pump is about to wait (or hand its role over): what its pass queued leaves."""
        self.pumping = False
        if self.unwritten:
            self.unwritten = False
            self._write_out()

    def _write_out(self) -> None:
        """Write what the session queued: at once when the writer task holds nothing and
        stdin takes it without waiting (up to :data:`WRITE_SLICE`), else through the
        writer task, which keeps the order (dropped once stdin is closing or broken)."""
        if self.write_handle is not None:
            self.write_handle.cancel()
            self.write_handle = None
        size = self.session.outbox_bytes
        pieces = self.session.frames_to_send()
        state = self.stdin_state
        if pieces and (state is Stdin.OPEN or state is Stdin.SENDING):
            self._output(pieces, size)
        self._charge_owed()

    def _output(self, pieces: list[bytes], size: int) -> None:
        idle = not self.output and self.stdin_state is Stdin.OPEN
        if idle and self.write_now is not None and size <= WRITE_SLICE:
            data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            try:
                if self.write_now(data):
                    return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._stdin_move("break")
                return
            pieces = [data]
        self.output.extend(pieces)
        self.output_bytes += size
        self._wake_writer()

    def _close_stdin(self) -> None:
        """Let the writer send what it holds, then half-close stdin."""
        self._write_out()  # what the session queued goes first
        self._stdin_move("close")
        self._wake_writer()

    def _stdin_move(self, step: str) -> None:
        """Move :attr:`stdin_state` by :data:`_STDIN_MOVES`."""
        try:
            self.stdin_state = _STDIN_MOVES[self.stdin_state, step]
        except KeyError:
            raise LocalProtocolError(f"stdin cannot {step} while {self.stdin_state.name}") from None

    def _wake_writer(self) -> None:
        if self.output_ready is not None:
            self.output_ready.set()
            self.output_ready = None

    async def _write_stdin(self) -> None:
        """Write, in order, what stdin could not take at once (the component is not
        reading, or it is large): up to :data:`WRITE_SLICE` a write, small answers
        queued behind one another joined into one."""
        stdin = self.component.stdin
        try:
            while self.output or self.stdin_state is not Stdin.CLOSING:
                if self.output:
                    data, ended, offset = self._next_write()
                    drops = self.output_drops
                    self._stdin_move("send")
                    try:
                        await stdin.send(data)  # type: ignore[arg-type]  # any buffer
                    finally:
                        self._stdin_move("sent")
                    if drops == self.output_drops:  # else a kill dropped it meanwhile
                        self._written(len(data), ended, offset)
                else:
                    self.output_ready = ready = anyio.Event()
                    await ready.wait()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self._stdin_move("break")  # nothing more can be written: nothing more is kept
            self._output_taken()
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await stdin.aclose()

    def _next_write(self) -> tuple[bytes | memoryview, int, int]:
        """The next write of the output: (its data, how many pieces it ends, how much of
        the piece after them it takes). Taken only once written: a writer cancelled in
        its send leaves the output whole for the next."""
        output, offset = self.output, self.output_offset
        head = output[0]
        if len(head) - offset > WRITE_SLICE:
            return memoryview(head)[offset : offset + WRITE_SLICE], 0, offset + WRITE_SLICE
        parts: list[bytes | memoryview] = [memoryview(head)[offset:] if offset else head]
        total = len(parts[0])
        for piece in islice(output, 1, None):
            if total + len(piece) > WRITE_SLICE:
                break
            parts.append(piece)
            total += len(piece)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        return data, len(parts), 0

    def _written(self, size: int, ended: int, offset: int) -> None:
        """A write of :meth:`_next_write` left: take it from the output."""
        for _ in range(ended):
            self.output.popleft()
        self.output_offset = offset
        self.output_bytes -= size
        self._charge_owed()
        self._wake_pump()

    def _output_taken(self) -> None:
        """What waited for stdin is gone (dropped): the pump may read again."""
        self.output_drops += 1
        self.output.clear()
        self.output_offset = 0
        self.output_bytes = 0
        self._charge_owed()
        self._wake_pump()

    def _wake_pump(self) -> None:
        if self.output_room is not None:
            self.output_room.set()
            self.output_room = None

    async def _work(self) -> None:
        """A task of the pool: holds the pump role until it hands it over, then parks until
        the role comes back to it. Ends when stdout has ended."""
        while not await self._pump():
            self.parked.append(wake := anyio.Event())
            await wake.wait()

    async def _pump(self) -> bool:
        """The pump role: read, frame, decode and handle, run admitted calls; True once
        stdout ended, False when a call suspended (the role moved on; that call is done).

        Every complete frame of a read is handled before the calls it admitted run (so a
        ``request/cancel`` right behind its request still finds the call queued). Large
        frames are decoded in a worker thread: a hostile frame of up to 16 MiB can take
        seconds to decode and refuse, and meanwhile the loop serves the deadline,
        cancellation and the calls already running; admitted calls are started before such
        a decode, not after it. Only the pure decoding leaves the loop: the session changes
        state here alone. A decode abandoned by cancellation finishes in its thread and is
        dropped. Before each call and each read the pump waits while it is
        :meth:`_held_back`, and after :data:`PUMP_SLICE` of calls it lets the loop run.
        """
        session, payloads, queued = self.session, self.payloads, self.queued
        stdout = self.component.stdout
        self.pumping = True
        self.resumed = time.monotonic()
        while True:
            owed = session.outbox_bytes + self.output_bytes
            if owed > OWED_FREELY and (queued or not payloads) and self._held_back():
                self._pause_pumping()
                await self._room()
                self.pumping = True
                self.resumed = time.monotonic()
                continue
            if payloads and (len(payloads[0]) < DECODE_IN_THREAD or not queued):
                payload = payloads.popleft()
                if session.closed:
                    payloads.clear()
                elif len(payload) < DECODE_IN_THREAD:
                    self._handle(session.receive_decoded(decode(payload)))
                else:
                    self._pause_pumping()
                    frame = await anyio.to_thread.run_sync(
                        _decode_held, payload, abandon_on_cancel=True, limiter=_decode_limiter()
                    )
                    self.pumping = True
                    self.resumed = time.monotonic()
                    self._handle(session.receive_decoded(frame))
            elif queued:
                if time.monotonic() - self.resumed > PUMP_SLICE:
                    self._pause_pumping()
                    await anyio.lowlevel.checkpoint()
                    self.pumping = True
                    self.resumed = time.monotonic()
                event, ticket = queued.popleft()
                waiting = None
                if event.method in CHANNEL_METHODS:
                    waiting = self._answer_now(event)
                    if waiting is None:
                        continue
                call = _Eager(self._call(event, ticket, waiting), self._hand_off)
                await call
                if call.suspended:
                    return False
            else:
                self._pause_pumping()  # the answers to what was read leave before we wait
                try:
                    chunk = await stdout.receive(READ_BYTES)
                except (
                    anyio.EndOfStream,
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    OSError,
                ):
                    self._handle(session.receive_eof())
                    self.stdout_done.set()
                    return True
                self.pumping = True
                self.resumed = time.monotonic()
                framed, events = session.receive_bytes(chunk)
                payloads.extend(framed)
                self._handle(events)

    def _hand_off(self) -> None:
        """The pump's call suspended: an idle task of the pool (or a new one) pumps now."""
        self._pause_pumping()
        if self.parked:
            self.parked.pop().set()
        else:
            assert self.task_group is not None
            self.task_group.start_soon(self._work)

    async def _read_stderr(self) -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for chunk in self.component.stderr:
                self.stderr.add(chunk)
                if self.stderr_sink is not None:
                    self.stderr_sink(chunk)

    async def _wait_exit(self) -> None:
        self.exit_code = await self.component.wait()
        self.timings["exit"] = time.monotonic() - self.started
        self.exited.set()

    async def _watch_deadline(self) -> None:
        remaining = self.context.deadline_unix_ms / 1000 - time.time()
        await anyio.sleep(max(remaining, 0))
        if self.condition is None and not self.control.cancel_requested.is_set():
            self.condition = "DEADLINE_EXCEEDED"
            self.control.cancel_requested.set()

    # ----- component requests ---------------------------------------------------------

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, CallRequested):
                self._admit(event)
            elif isinstance(event, CallCancelled):
                scope = self.calls.get(event.request_id)
                if scope is not None and not self.ledger.cancel_waiter(event.request_id):
                    scope.cancel()
            elif isinstance(event, RootResult | RootError | Violation):
                if isinstance(event, RootResult | RootError):
                    self.timings["response"] = time.monotonic() - self.started
                self.settled.set()
        self._flush()

    def _admit(self, event: CallRequested) -> None:
        """Decide the call's place in its operation now, in arrival order, and queue it.

        Its cancel scope exists from here on (for an operation, the ledger cancels the
        work through it too), so a cancel that arrives while the call is still queued
        stops the call at the first point where it waits.
        """
        rid = event.request_id
        if self.phase is Phase.STOPPING:  # only settlement can arrive; nothing serves it
            self.session.respond_error(
                rid, OperationError("OWNER_CLOSED", "the run is being stopped")
            )
            return
        size = event.size
        if size > SMALL_REQUEST:  # its params are held until it is answered
            if not self.tree.fits(size):
                what = f"a {size:,}-byte {event.method} request"
                self.session.respond_error(
                    rid, OperationError("RESOURCE_EXHAUSTED", self.tree.refusal(what))
                )
                return
            self.tree.held += size
            self.charges[rid] = size
        scope = anyio.CancelScope()
        ticket = None
        if event.method in OPERATION_METHODS:
            digest = event.note if isinstance(event.note, bytes) else None
            try:
                ticket = self.ledger.admit(rid, event.method, event.params, scope, digest)
            except OperationError as exc:
                self._finished(rid)
                self.session.respond_error(rid, exc)
                return
        self.calls[rid] = scope
        self.queued.append((event, ticket))

    def _finished(self, rid: str) -> None:
        """The call ``rid`` is answered: it holds nothing any more."""
        self.calls.pop(rid, None)
        if self.charges:
            self.tree.held -= self.charges.pop(rid, 0)

    def _answer_now(self, event: CallRequested) -> Coroutine[Any, Any, bytes] | None:
        """Answer a channel call here when it needs no wait (no task, no cancel scope
        entered); else return the coroutine that waits for its answer, for :meth:`_call`.

        A call the component cancelled while it was queued is answered already and does
        nothing: a send it withdrew is not accepted, a read it gave up takes no item.
        """
        rid = event.request_id
        if not self.session.owes(rid):
            self._finished(rid)
            return None
        try:
            if self.channels is None:
                raise OperationError("UNAVAILABLE", "channels are not enabled for this run")
            answer = self.channels.answer(event.method, event.params, event.size)
        except Exception as exc:
            self._respond_failure(rid, exc)
        else:
            if not isinstance(answer, bytes):
                return answer
            self._respond(rid, answer)
        self._finished(rid)
        self._flush()
        return None

    async def _call(
        self,
        event: CallRequested,
        ticket: Ticket | None,
        waiting: Coroutine[Any, Any, bytes] | None = None,
    ) -> None:
        """Run one call in its cancel scope and answer it; ``waiting`` is a channel
        call's wait, begun by :meth:`_answer_now`. An answer made while the pump is
        :meth:`_held_back` waits for room too if it is large (a replay of a large result,
        a read of a large item)."""
        rid = event.request_id
        with self.calls[rid] as scope:
            try:
                result = await (self._dispatch(event, ticket) if waiting is None else waiting)
                if len(result) > OWED_FREELY and self._held_back():
                    await self._room()
            except Exception as exc:  # EN-06: a host-side failure is never a -32603
                self._respond_failure(rid, exc)
            else:
                self._respond(rid, result)
        self._finished(rid)
        if scope.cancelled_caught:
            code = self.condition or "CANCELLED"
            self.session.respond_error(rid, OperationError(code, "the call was stopped"))
        self._flush()

    def _respond(self, rid: str, result: bytes) -> None:
        """Answer with ``result``; one whose frame would exceed the frame bound (a child's
        or a provider's result near 16 MiB, under a long request id) is refused instead:
        the host never writes an oversized frame, and a peer's sizes never crash it."""
        try:
            self.session.respond_encoded(rid, result)
        except LocalProtocolError as exc:
            error = OperationError("RESOURCE_EXHAUSTED", bounded_message(f"the result: {exc}"))
            self.session.respond_error(rid, error)

    def _respond_failure(self, rid: str, exc: Exception) -> None:
        if isinstance(exc, OperationError):
            self.session.respond_error(rid, _wire(exc))
        else:  # EN-06: a host-side failure is never a -32603
            message = bounded_message(f"{type(exc).__name__}: {exc}")
            self.session.respond_error(rid, OperationError("EXECUTION_FAILED", message))

    async def _dispatch(self, event: CallRequested, ticket: Ticket | None) -> bytes:
        """An operation's success result, encoded once, as the ledger keeps it.

        A child's result (a component chose it) is encoded away from the loop unless it is
        small. A provider's is encoded here, in the call: encoded elsewhere, the pump would
        run the next call before this answer counts as owed, and a provider that answers
        at once with large results would have them all made before the pump is held back.
        """
        method = event.method
        work = partial(self.broker.handle, method, event.params, self.context)
        if ticket is None:
            return json1.dumps(await work())
        if method == "flow/run-child":
            return await self.ledger.settle_encoded(ticket, work, _run_problem, _encode)
        return await self.ledger.settle_encoded(ticket, work, _capability_problem)


class _Eager(Generic[_T]):
    """``await _Eager(coro, on_suspend)`` awaits ``coro`` exactly as ``await coro`` would,
    in the awaiting task, and calls ``on_suspend`` once, at its first suspension.

    This is how the pump learns, at the moment it happens, that a call it runs will not
    complete at once, so it can hand its role over without a task per call: the call goes
    on in the task it started in (its cancel scope, any task group it opened, its
    cancellation all stay with that task), every suspension and every exception or
    cancellation passing through unchanged, as with ``yield from``.
    """

    __slots__ = ("_coro", "_on_suspend", "suspended")

    def __init__(self, coro: Coroutine[Any, Any, _T], on_suspend: Callable[[], None]) -> None:
        self._coro = coro
        self._on_suspend = on_suspend
        self.suspended = False

    def __await__(self) -> Generator[Any, Any, _T]:
        coro = self._coro
        try:
            signal = coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        self.suspended = True
        self._on_suspend()
        while True:
            try:
                sent = yield signal
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation, thrown in by the task
                try:
                    signal = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    signal = coro.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]


def _decode_held(payload: bytes) -> Decoded:
    """:func:`decode`, in a worker thread, holding one of the :data:`BIG_DECODES` slots;
    an operation's identity digest is noted too (for the ledger: megabytes of params take
    a while to put in canonical form)."""
    with _decoding:
        frame = decode(payload)
        value = frame.value
        if not isinstance(value, dict) or value.get("method") not in OPERATION_METHODS:
            return frame
        method, params = value["method"], value.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("operationId"), str):
            return frame
        assert isinstance(method, str)
        try:
            digest = OperationLedger.digest(method, params)
        except json1.JSON1Error:
            return frame
        return Decoded(value, None, frame.size, digest)


def _run_problem(result: JSONValue) -> str | None:
    reason = validate_run_result(result)
    return None if reason is None else _invalid("flow/run-child", reason)


def _capability_problem(result: JSONValue) -> str | None:
    reason = validate_capability_result(result)
    return None if reason is None else _invalid("capability/call", reason)


def _invalid(method: str, reason: str) -> str:
    return bounded_message(f"the {method} result is invalid: {reason}")


async def _encode(result: JSONValue) -> bytes:
    """``json1.dumps(result)``: on the loop if the result is small, else in the worker."""
    if _small(result):
        return json1.dumps(result)
    return await offload(json1.dumps, result)


def _small(value: JSONValue) -> bool:
    """Whether ``value`` has at most :data:`SMALL_VALUES` values and
    :data:`SMALL_REQUEST` characters of strings: quick to encode (a look at no more than
    that many values decides it)."""
    values, chars = 1, 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict | list):
            values += len(item)
            if values > SMALL_VALUES:
                return False
            if isinstance(item, dict):
                chars += sum(map(len, item))
                pending.extend(item.values())
            else:
                pending.extend(item)
        if chars > SMALL_REQUEST:
            return False
    return True


def _decode_limiter() -> anyio.CapacityLimiter:
    """This event loop's limiter of :data:`BIG_DECODES`, where a task waits its turn
    without holding a worker thread (one per loop: a limiter belongs to the loop it was
    made in)."""
    try:
        return _big_decodes.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(BIG_DECODES)
        _big_decodes.set(limiter)
        return limiter


def _wire(error: OperationError) -> OperationError:
    """Local-only classifications never cross the wire (PROTOCOL.md §9.2)."""
    if error.code in LOCAL_CODES:
        return OperationError("EXECUTION_FAILED", error.message, {"cause": error.code})
    return error


def _deadline(session: HostSession) -> int:
    value = session.params["deadlineUnixMs"]
    assert isinstance(value, int)
    return value


def _any_set(events: tuple[anyio.Event, ...]) -> bool:
    return any(event.is_set() for event in events)


async def _wait_any(events: tuple[anyio.Event, ...], timeout: float = math.inf) -> None:
    """Return when any of ``events`` is set, or after ``timeout`` seconds."""
    if _any_set(events):
        return
    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as tg:

            async def wait(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(wait, event)
