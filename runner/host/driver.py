"""Drive one HostSession against a running component (anyio).

The driver owns everything with a clock or a socket: it pumps stdout into the session
and runs the calls (:mod:`runner.host.pump`), writes the session's frames to stdin
(:mod:`runner.host.stdin_writer`), keeps bounded stderr, and enforces the ending
(:mod:`runner.host.stopping`). The verdict comes from ``runner.protocol.completion``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress

import anyio
from anyio.abc import TaskStatus

from runner.host.bounds import TreeBudget
from runner.host.broker import Broker, CallContext
from runner.host.channels import ChannelParty
from runner.host.operations import RETAINED_BYTES, OperationLedger
from runner.host.run_state import RunControl, RunOutcome
from runner.host.stdin_writer import STREAM_ERRORS
from runner.host.stopping import SIGKILL_EXIT, StopSequence
from runner.json1 import JSONValue
from runner.protocol.completion import Ending, judge
from runner.protocol.session import HostSession
from runner.sandbox.base import RunningComponent
from runner.sandbox.registry import StopGraces

__all__ = ["RunControl", "RunDriver", "RunOutcome", "drive"]


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
    """Run the Run/1 exchange with ``component`` to its judged end. ``retained_bytes``
    bounds what operations keep for replay; ``channels`` serves ``channel/*`` requests
    (without it they are ``UNAVAILABLE``)."""
    session = HostSession(params)
    deadline = session.params["deadlineUnixMs"]
    assert isinstance(deadline, int)
    tree = TreeBudget() if channels is None else channels.hub.budget
    run = RunDriver(
        component,
        session,
        broker,
        CallContext(run_id, deadline, depth),
        graces or StopGraces(),
        control or RunControl(),
        OperationLedger(retained_bytes, tree),
        channels,
    )
    run.stderr_sink = stderr_sink
    try:
        await run.run()
    except anyio.get_cancelled_exc_class():
        run.control.stopped = run.outcome()
        raise
    finally:
        run.release()
    return run.outcome()


class RunDriver(StopSequence):
    """Drives one component's session to its end: the supervisor and its tasks."""

    async def run(self) -> None:
        """Supervise the run in the caller's task. Its tasks run in a scope the caller's
        cancellation does not reach (:meth:`_serve`): it stops the run (:meth:`_stop`)
        while they go on reading, writing and answering through the cancel grace."""
        self.session.start()
        self._flush()
        async with anyio.create_task_group() as supervisor:
            # Shielded: a start abandoned by a cancellation would leave nothing to end it.
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

    async def _read_stderr(self) -> None:
        with suppress(*STREAM_ERRORS):
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

    def outcome(self) -> RunOutcome:
        # The host's kill only if it is what ended the component (SIGKILL exits 137; an
        # engine also accepts a kill for a process already exiting by itself).
        kill = self.host_kill if self.exit_code == SIGKILL_EXIT else None
        ending = Ending(self.exit_code, kill, self.component.facts.oom_killed)
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
