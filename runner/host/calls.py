"""The component's requests: admission in arrival order, dispatch to the broker, answers.

A request over :data:`~runner.host.bounds.SMALL_REQUEST` bytes is charged to the run
tree's budget until it is answered, and refused ``RESOURCE_EXHAUSTED`` when the budget
cannot hold it. A host-side failure is answered as an :class:`OperationError`, never a
``-32603`` (EN-06).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

import anyio

from runner import json1
from runner.host.bounds import SMALL_REQUEST, offload
from runner.host.operations import Check, Ticket
from runner.host.run_state import Phase
from runner.host.stdin_writer import OWED_FREELY, StdinWriter
from runner.json1 import JSONValue
from runner.protocol.codes import LOCAL_CODES, LocalProtocolError, OperationError, bounded_message
from runner.protocol.results import validate_capability_result, validate_run_result
from runner.protocol.session import (
    CallCancelled,
    CallRequested,
    Event,
    RootError,
    RootResult,
    Violation,
)

OPERATION_METHODS = ("flow/run-child", "capability/call")
SMALL_VALUES = 256
"""Results of up to this many values (and 64 KiB of text) are encoded on the loop."""


class CallHandler(StdinWriter):
    """Admits, runs and answers the component's requests."""

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

        Its cancel scope exists from here on, so a cancel that arrives while the call is
        still queued stops it at the first point where it waits.
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
        """Answer a channel call here when it needs no wait; else return the coroutine
        that waits for its answer, for :meth:`_call`.

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
        """Run one call in its cancel scope and answer it; ``waiting`` is a channel call's
        wait, begun by :meth:`_answer_now`. A large answer made while the pump is held
        back waits for room too."""
        rid = event.request_id
        with self.calls[rid] as scope:
            try:
                result = await (self._dispatch(event, ticket) if waiting is None else waiting)
                if len(result) > OWED_FREELY and self._held_back():
                    await self._room()
            except Exception as exc:
                self._respond_failure(rid, exc)
            else:
                self._respond(rid, result)
        self._finished(rid)
        if scope.cancelled_caught:
            code = self.condition or "CANCELLED"
            self.session.respond_error(rid, OperationError(code, "the call was stopped"))
        self._flush()

    def _respond(self, rid: str, result: bytes) -> None:
        """Answer with ``result``, or refuse it when its frame would exceed the frame
        bound: the host never writes an oversized frame, and a peer's sizes never crash it."""
        try:
            self.session.respond_encoded(rid, result)
        except LocalProtocolError as exc:
            error = OperationError("RESOURCE_EXHAUSTED", bounded_message(f"the result: {exc}"))
            self.session.respond_error(rid, error)

    def _respond_failure(self, rid: str, exc: Exception) -> None:
        if isinstance(exc, OperationError):
            self.session.respond_error(rid, _wire(exc))
        else:
            message = bounded_message(f"{type(exc).__name__}: {exc}")
            self.session.respond_error(rid, OperationError("EXECUTION_FAILED", message))

    async def _dispatch(self, event: CallRequested, ticket: Ticket | None) -> bytes:
        """An operation's success result, encoded once, as the ledger keeps it.

        A child's result is encoded away from the loop unless small. A provider's is
        encoded here, in the call, so it counts as owed before the pump runs the next call.
        """
        method = event.method
        work = partial(self.broker.handle, method, event.params, self.context)
        if ticket is None:
            return json1.dumps(await work())
        if method == "flow/run-child":
            return await self.ledger.settle_encoded(ticket, work, _RUN_PROBLEM, _encode)
        return await self.ledger.settle_encoded(ticket, work, _CAPABILITY_PROBLEM)


def _checked(method: str, validate: Callable[[JSONValue], str | None]) -> Check:
    """``validate``, its reason worded as a bounded message about ``method``'s result."""

    def problem(result: JSONValue) -> str | None:
        reason = validate(result)
        if reason is None:
            return None
        return bounded_message(f"the {method} result is invalid: {reason}")

    return problem


_RUN_PROBLEM = _checked("flow/run-child", validate_run_result)
_CAPABILITY_PROBLEM = _checked("capability/call", validate_capability_result)


async def _encode(result: JSONValue) -> bytes:
    """``json1.dumps(result)``: on the loop if the result is small, else in the worker."""
    if _small(result):
        return json1.dumps(result)
    return await offload(json1.dumps, result)


def _small(value: JSONValue) -> bool:
    """Whether ``value`` has at most :data:`SMALL_VALUES` values and
    :data:`SMALL_REQUEST` characters of strings (looking at no more than that)."""
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


def _wire(error: OperationError) -> OperationError:
    """Local-only classifications never cross the wire (PROTOCOL.md §9.2)."""
    if error.code in LOCAL_CODES:
        return OperationError("EXECUTION_FAILED", error.message, {"cause": error.code})
    return error
