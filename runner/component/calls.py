"""The component's own requests: ids, the 64-request window, the lifetime budget, tombstones.

Run/1 lets a component keep at most 64 of its requests awaiting a response and send
at most 65,536 in its lifetime (PROTOCOL.md §1). The table queues calls beyond the
window in order and refuses, locally and without writing anything, a call that
would exceed the budget (queued calls hold a reservation until sent or dropped).

Cancellation is split in two because Run/1 still owes every wire request its one
response: when a caller stops waiting, a queued call is simply dropped, while a call
on the wire gets one ``request/cancel`` and stays in the table as a *tombstone* until
its response arrives. :meth:`CallTable.quiesce` waits for the last tombstone; the
root response is never written before that.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.component.errors import ChannelFault, OperationError, OperationErrorCode, protocol_error
from runner.component.messages import (
    COMPONENT_ID_PREFIX,
    PreparedRequest,
    Response,
    cancel_frame,
    parse_operation_error,
)
from runner.json1 import JSONValue

Parser = Callable[[JSONValue], object]
"""Turns a call's ``result`` into what the caller receives (a value or an exception)."""


@dataclass(eq=False, slots=True)
class Call:
    """One admitted request; ``waiter`` resolves to the reply (a value or an exception)."""

    request: PreparedRequest
    parse: Parser
    waiter: asyncio.Future[object] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    wire_id: str | None = None
    dropped: bool = False
    cancel_sent: bool = False


class CallTable:
    """Outstanding calls; ``write`` puts one frame on the wire and never raises."""

    def __init__(self, write: Callable[[bytes], None], *, window: int, lifetime: int) -> None:
        self._write = write
        self._window = window
        self._lifetime = lifetime
        self._sent = 0
        self._queue: deque[Call] = deque()
        self._queued = 0
        self._wire: dict[str, Call] = {}
        self._quiet = asyncio.Event()
        self._quiet.set()

    def admit(self, request: PreparedRequest, parse: Parser) -> Call:
        """Queue a call and send what the window allows; refuse past the lifetime budget."""
        if self._sent + self._queued >= self._lifetime:
            raise OperationError(
                "RESOURCE_EXHAUSTED", f"this Run has used all {self._lifetime} of its request ids"
            )
        call = Call(request, parse)
        self._queue.append(call)
        self._queued += 1
        self._quiet.clear()
        self._pump()
        return call

    def withdraw(self, call: Call) -> None:
        """The caller stopped waiting: drop the call if queued, else cancel it once on the wire."""
        if call.wire_id is None:
            if not call.dropped:
                call.dropped = True
                self._queued -= 1
                self._update_quiet()
        elif call.wire_id in self._wire and not call.cancel_sent:
            call.cancel_sent = True
            self._write(cancel_frame(call.wire_id))

    def settle(self, response: Response) -> None:
        """Deliver a response; an id that is not on the wire is a host violation."""
        call = self._wire.pop(response.id, None)
        if call is None:
            raise protocol_error(f"a response to {response.id!r}, which is not awaiting one")
        if response.member == "error":
            reply: object = parse_operation_error(response.value)
        else:
            reply = call.parse(response.value)
        if not call.waiter.done():
            call.waiter.set_result(reply)
        self._pump()

    def cancel_all(self, code: OperationErrorCode) -> bool:
        """Withdraw every outstanding call, failing waits still live with ``code``.

        Returns whether any wait was still live, i.e. whether work was abandoned.
        """
        live = False
        for call in [*self._queue, *self._wire.values()]:
            if not call.waiter.done() and not call.dropped:
                live = True
                call.waiter.set_result(OperationError(code, "the call's owner has finished"))
            self.withdraw(call)
        return live

    def fail_all(self, fault: ChannelFault) -> None:
        """The channel is gone: every outstanding wait fails with its classification."""
        for call in [*self._queue, *self._wire.values()]:
            call.dropped = True
            if not call.waiter.done():
                call.waiter.set_result(OperationError(fault.code, fault.reason))
        self._queue.clear()
        self._wire.clear()
        self._queued = 0
        self._quiet.set()

    async def quiesce(self) -> None:
        """Wait until no call is queued and every wire request has been answered."""
        await self._quiet.wait()

    def _pump(self) -> None:
        while self._queue and len(self._wire) < self._window:
            call = self._queue.popleft()
            if call.dropped:
                continue
            self._queued -= 1
            self._sent += 1
            call.wire_id = f"{COMPONENT_ID_PREFIX}{self._sent}"
            self._wire[call.wire_id] = call
            self._write(call.request.frame(call.wire_id))
        self._update_quiet()

    def _update_quiet(self) -> None:
        if not self._wire and not self._queued:
            self._quiet.set()
