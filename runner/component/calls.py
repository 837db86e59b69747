"""The component's own requests: ids, the 64-request window, the lifetime budget, tombstones.

Run/1 lets a component keep at most 64 requests awaiting a response and send at most
65,536 in its lifetime (PROTOCOL.md §1): calls beyond the window queue in order, and a
call past the budget is refused locally, writing nothing (queued calls hold a
reservation). Run/1 owes every wire request its one response, so a caller who stops
waiting drops a queued call, but a call on the wire gets one ``request/cancel`` and stays
as a *tombstone* until answered; the root response waits for the last (:meth:`quiesce`).

Channels add a *reserve* (§1, §13): every endpoint may need one settlement
(``channel/close``/``channel/release``) at any time, even with the window full and the
budget nearly spent. So, once channels are in use, ordinary calls fill at most
``window - 1`` slots and settlements go first; every granted endpoint holds one lifetime
id (an allocating call holds them from admission, returned if it fails), which only a
settlement spends. Settlements are never withdrawn (§7.5): :meth:`cancel_all` passes over
them.
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
    cancel_frame,
    operation_error,
)
from runner.component.model import JSONObject
from runner.json1 import JSONValue
from runner.protocol.envelope import ErrorResponse, Success

Parser = Callable[[JSONValue], object]
"""Turns a call's ``result`` into the caller's value or exception; it runs when the
response arrives, waited for or not, so state a late reply updates changes there."""

ReplyHook = Callable[[object], None]
"""Told once that a call is over: its parsed reply or ``OperationError``, or ``None``
when none will come."""


@dataclass(eq=False, slots=True)
class Call:
    """One admitted request; ``waiter`` resolves to the reply (a value or an exception)."""

    request: PreparedRequest
    parse: Parser
    settlement: bool
    hold: int
    on_reply: ReplyHook | None
    waiter: asyncio.Future[object] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    wire_id: str | None = None
    dropped: bool = False
    cancel_sent: bool = False


class CallTable:
    """Outstanding calls; ``write`` puts one frame on the wire and never raises."""

    def __init__(
        self,
        write: Callable[[bytes], None],
        admission: Callable[[str, bool], None],
        *,
        window: int,
        lifetime: int,
    ) -> None:
        self._write = write
        self._admission = admission  # (method, settlement): raises to refuse a call
        self._window = window
        self._lifetime = lifetime
        self._sent = 0
        self._held = 0  # lifetime ids kept for settlements still to come
        self._channels = False  # once channels are in use, one wire slot is kept too
        self._ordinary: deque[Call] = deque()
        self._settlements: deque[Call] = deque()
        self._queued = 0
        self._wire: dict[str, Call] = {}
        self._ordinary_on_wire = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    @property
    def idle(self) -> bool:
        """Nothing is queued and no wire request awaits its response."""
        return self._quiet.is_set()

    def hold(self, count: int) -> None:
        """Hold settlement ids for the ``count`` endpoints ``flow/run`` granted (unchecked:
        they come before any call, and 256 fit any real budget)."""
        self._held += count
        self._channels = True

    async def call(
        self,
        method: str,
        params: JSONObject,
        parse: Parser,
        *,
        settlement: bool = False,
        hold: int = 0,
        on_reply: ReplyHook | None = None,
    ) -> object:
        """Send one request (queued while the window is full) and return its parsed reply.

        ``settlement`` marks a ``channel/close``/``channel/release``; ``hold`` counts the
        endpoints a success grants, whose settlement ids are held from now. A call past the
        budget or refused by ``admission`` raises and tells ``on_reply`` ``None``.
        """
        try:
            request = PreparedRequest(method, params)
            self._admission(method, settlement)
            if settlement and self._held:
                self._held -= 1
            else:
                self._check_budget(1 + hold)
                self._held += hold
        except BaseException:
            if on_reply is not None:
                on_reply(None)
            raise
        self._channels = self._channels or settlement or hold > 0
        call = Call(request, parse, settlement, hold, on_reply)
        (self._settlements if settlement else self._ordinary).append(call)
        self._queued += 1
        self._quiet.clear()
        self._pump()
        try:
            reply = await call.waiter
        except asyncio.CancelledError:
            self.withdraw(call)
            raise
        if isinstance(reply, Exception):
            raise reply
        return reply

    def withdraw(self, call: Call) -> None:
        """The caller stopped waiting: drop the call if queued, else cancel it once on the wire."""
        if call.wire_id is None:
            if not call.dropped:
                call.dropped = True
                self._queued -= 1
                self._leave(call, None, granted=False)
                self._update_quiet()
        elif call.wire_id in self._wire and not call.cancel_sent:
            call.cancel_sent = True
            self._write(cancel_frame(call.wire_id))

    def settle(self, response: Success | ErrorResponse) -> None:
        """Deliver a response; an id that is not on the wire is a host violation."""
        call = None if response.id is None else self._wire.pop(response.id, None)
        if call is None:
            raise protocol_error(f"a response to {response.id!r}, which is not awaiting one")
        if not call.settlement:
            self._ordinary_on_wire -= 1
        if isinstance(response, Success):
            reply, granted = call.parse(response.result), True
        else:
            reply, granted = operation_error(response), False
        self._leave(call, reply, granted=granted)
        if not call.waiter.done():
            call.waiter.set_result(reply)
        self._pump()

    def cancel_all(self, code: OperationErrorCode) -> bool:
        """Withdraw every outstanding ordinary call (settlements stay: they are cleanup),
        failing live waits with ``code``; return whether any was live (work abandoned)."""
        live = False
        for call in [*self._ordinary, *self._wire.values()]:
            if call.settlement:
                continue
            if not call.waiter.done() and not call.dropped:
                live = True
                call.waiter.set_result(OperationError(code, "the call's owner has finished"))
            self.withdraw(call)
        return live

    def fail_all(self, fault: ChannelFault) -> None:
        """The channel is gone: every outstanding wait fails with its classification."""
        for call in [*self._ordinary, *self._settlements, *self._wire.values()]:
            if call.dropped:
                continue
            call.dropped = True
            self._leave(call, None, granted=False)
            if not call.waiter.done():
                call.waiter.set_result(OperationError(fault.code, fault.reason))
        self._ordinary.clear()
        self._settlements.clear()
        self._wire.clear()
        self._queued = 0
        self._quiet.set()

    async def quiesce(self) -> None:
        """Wait until no call is queued and every wire request has been answered."""
        await self._quiet.wait()

    def _check_budget(self, ids: int) -> None:
        if self._sent + self._queued + self._held + ids > self._lifetime:
            raise OperationError(
                "RESOURCE_EXHAUSTED", f"this Run has used all {self._lifetime} of its request ids"
            )

    def _leave(self, call: Call, reply: object, *, granted: bool) -> None:
        """A call is over: a failed allocation gives its held ids back; tell its hook."""
        if not granted:
            self._held -= call.hold
        if call.on_reply is not None:
            call.on_reply(reply)

    def _pump(self) -> None:
        while len(self._wire) < self._window and (call := self._next_to_send()) is not None:
            self._queued -= 1
            self._sent += 1
            call.wire_id = f"{COMPONENT_ID_PREFIX}{self._sent}"
            self._wire[call.wire_id] = call
            if not call.settlement:
                self._ordinary_on_wire += 1
            self._write(call.request.frame(call.wire_id))
        self._update_quiet()

    def _next_to_send(self) -> Call | None:
        """Settlements first; an ordinary call only while it leaves the reserved slot free."""
        if self._settlements:
            return self._settlements.popleft()
        while self._ordinary and self._ordinary[0].dropped:
            self._ordinary.popleft()
        ordinary_window = self._window - 1 if self._channels else self._window
        if self._ordinary and self._ordinary_on_wire < ordinary_window:
            return self._ordinary.popleft()
        return None

    def _update_quiet(self) -> None:
        if not self._wire and not self._queued:
            self._quiet.set()
