"""How a run ends. After the root response the host half-closes stdin and gives the
component ``graces.exit`` to exit; on the deadline or a cancellation it records the
condition, sends ``request/cancel`` for the root, waits ``graces.cancel``, then kills."""

from __future__ import annotations

import math
import time

import anyio

from runner.host.pump import Pump
from runner.protocol.codes import OperationError
from runner.protocol.completion import HostKill

DRAIN_AFTER_EXIT = 2.0
"""Seconds to wait for stdout EOF once the process has exited."""
SIGKILL_EXIT = 128 + 9  # how both backends report a process ended by SIGKILL


class StopSequence(Pump):
    """The supervisor's side of the run: when to cancel, when to kill."""

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
        self._cancel_all()
        if not self.control.kill_requested.is_set():
            await _wait_any(
                (self.settled, self.exited, self.stdout_done, self.control.kill_requested),
                self.graces.cancel,
            )
        if not _any_set((self.settled, self.exited, self.stdout_done)):
            await self._kill("cancel")

    async def _stop(self) -> None:
        """The caller's task was cancelled: cancel the root, then kill after the grace.
        Open calls are answered ``CANCELLED`` and the writer serves the grace, so a
        component that waits for its calls' answers (the SDK does, §10) can stop
        cooperatively and is judged by its answer, not as a lost channel."""
        if self.exited.is_set():
            return
        self.stopping = True
        for event, _ in self.queued:  # calls not yet started are answered here
            rid = event.request_id
            self.session.respond_error(rid, OperationError("CANCELLED", "the run was stopped"))
            self._finished(rid)
        self.queued.clear()
        self._cancel_all()
        # A kill the host had already decided is not given a second grace.
        grace = 0 if self.host_kill is not None else self.graces.cancel
        with anyio.move_on_after(grace):
            await self.exited.wait()
            with anyio.move_on_after(DRAIN_AFTER_EXIT):
                await self.stdout_done.wait()
            return
        await self._kill("cancel")
        # The run's tasks end here: a pump may be held in a decode only a cancellation
        # abandons. Nothing reads the output any more, and a stream left full would hold
        # back the end of the attach socket, which waiting for the exit reads to (Docker).
        assert self.task_group is not None
        self.task_group.cancel_scope.cancel()
        for stream in (self.component.stdout, self.component.stderr):
            await stream.aclose()
        self.exit_code = await self.component.wait()

    def _cancel_all(self) -> None:
        """Record the condition (``CANCELLED`` unless one was), send ``request/cancel``
        for the root, stop every running call."""
        self.condition = self.condition or "CANCELLED"
        if self.session.cancel_root(self.condition):
            self._flush()
        for scope in list(self.calls.values()):
            scope.cancel()

    async def _kill(self, why: HostKill) -> None:
        """Kill the component; the report names the reason only if the kill took effect."""
        first = self.host_kill is None
        if first:
            self.host_kill = why
        # Before the kill: nothing written now can arrive, so what waits is dropped and a
        # held-back pump reads stdout again; an engine finishes a kill only once the
        # container's output has been taken, so it would otherwise wait for itself.
        self._break_stdin()
        await self.component.kill()
        if first and not self.component.facts.killed_by_host:
            self.host_kill = None


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
