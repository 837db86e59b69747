"""The pump: reads the component's stdout, decodes its frames and runs the calls they admit.

Calls are the hot path, and a task switch costs more than a small call's protocol work.
So one task at a time holds the pump role: it handles every frame of a read, then runs
the calls they admitted itself. A call that suspends hands the role, at that moment, to
an idle task of the pool and finishes in its own task (:class:`_Eager`), so reading never
waits on a call; one that completes at once costs no hand-off.

A request over :data:`~runner.host.bounds.SMALL_REQUEST` bytes is charged to the tree's
budget until answered, or refused ``RESOURCE_EXHAUSTED`` when it cannot be. A host-side
failure is answered as an :class:`OperationError`, never a ``-32603`` (EN-06).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine, Generator
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from runner import json1
from runner.host.bounds import SMALL_REQUEST, loop_limiter, offload
from runner.host.operations import Check, OperationLedger, Ticket
from runner.host.stdin_writer import OWED_FREELY, STREAM_ERRORS, StdinWriter
from runner.json1 import JSONValue
from runner.protocol.codes import LOCAL_CODES, LocalProtocolError, OperationError, bounded_message
from runner.protocol.results import validate_capability_result, validate_run_result
from runner.protocol.session import (
    CallCancelled,
    CallRequested,
    Decoded,
    Event,
    RootError,
    RootResult,
    Violation,
    decode,
)

OPERATION_METHODS = ("flow/run-child", "capability/call")
SMALL_VALUES = 256
"""Results of up to this many values (and 64 KiB of text) are encoded on the loop."""
DECODE_IN_THREAD = 1 << 18
"""Frames of at least this many bytes are decoded in a worker thread."""
BIG_DECODES = 2
"""Such decodes at once in this process, over every run it drives: a hostile 16 MiB
frame can take ~0.5 GiB and seconds to refuse, and each run of a tree may send one."""
_decoding = threading.BoundedSemaphore(BIG_DECODES)
"""Held by the decoding thread itself: a decode abandoned by its cancelled task goes on in
its thread, and still counts."""
_big_decodes: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("big_decodes")
PUMP_SLICE = 0.02
"""Seconds of calls the pump runs before the loop serves the deadline, signals, others."""
READ_BYTES = 1 << 16
"""The most stdout the pump takes at once: one read of the transport, never a join of
reads large enough for glibc to map in and out."""
_T = TypeVar("_T")


class Pump(StdinWriter):
    """The pump role, the pool of tasks that take it in turn, and the calls they run."""

    async def _work(self) -> None:
        """A task of the pool: pumps until it hands the role over, parks until it comes
        back; ends with stdout."""
        while not await self._pump():
            self.parked.append(wake := anyio.Event())
            await wake.wait()

    def _resume(self) -> None:
        self.pumping = True
        self.resumed = time.monotonic()

    async def _pump(self) -> bool:
        """Read, decode and handle frames, run admitted calls; True once stdout ended,
        False when a call suspended (the role moved on; that call is done).

        Every frame of a read is handled before its calls run, so a ``request/cancel``
        right behind its request finds the call queued. Large frames are decoded in a
        worker thread (the session changes state on the loop alone), after the admitted
        calls start. Before each call and read the pump waits while :meth:`_held_back`.
        """
        session, payloads, queued = self.session, self.payloads, self.queued
        stdout = self.component.stdout
        self._resume()
        while True:
            owed = session.outbox_bytes + self.output_bytes
            if owed > OWED_FREELY and (queued or not payloads) and self._held_back():
                self._pause_pumping()
                await self._room()
                self._resume()
                continue
            if payloads and (len(payloads[0]) < DECODE_IN_THREAD or not queued):
                payload = payloads.popleft()
                if session.closed:
                    payloads.clear()
                elif len(payload) < DECODE_IN_THREAD:
                    self._handle(session.receive_decoded(decode(payload)))
                else:
                    self._pause_pumping()
                    limiter = loop_limiter(_big_decodes, BIG_DECODES)  # waits, holding no thread
                    frame = await anyio.to_thread.run_sync(
                        _decode_held, payload, abandon_on_cancel=True, limiter=limiter
                    )
                    self._resume()
                    self._handle(session.receive_decoded(frame))
            elif queued:
                if time.monotonic() - self.resumed > PUMP_SLICE:
                    self._pause_pumping()
                    await anyio.lowlevel.checkpoint()
                    self._resume()
                event, ticket = queued.popleft()
                if ticket is None:  # a channel call
                    work = self._answer_now(event)
                    if work is None:
                        continue
                else:
                    work = self._dispatch(event, ticket)
                call = _Eager(self._call(event.request_id, work), self._hand_off)
                await call
                if call.suspended:
                    return False
            else:
                self._pause_pumping()  # the answers to what was read leave before we wait
                try:
                    chunk = await stdout.receive(READ_BYTES)
                except (anyio.EndOfStream, *STREAM_ERRORS):
                    self._handle(session.receive_eof())
                    self.stdout_done.set()
                    return True
                self._resume()
                if "first_byte" not in self.timings:
                    self.timings["first_byte"] = self.resumed - self.started
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
        """Decide the call's place in its operation now, in arrival order, and queue it
        with its cancel scope, which a cancel arriving while it is queued cancels."""
        rid = event.request_id
        if self.stopping:  # only settlement can arrive; nothing serves it
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
        """Answer a channel call here when it needs no wait, else return its wait for
        :meth:`_call`. A call cancelled while queued does nothing (a withdrawn send is not
        accepted, a read given up takes no item)."""
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

    async def _call(self, rid: str, work: Coroutine[Any, Any, bytes]) -> None:
        """Run one call's ``work`` in its cancel scope and answer it. A large answer made
        while the pump is held back waits for room too."""
        with self.calls[rid] as scope:
            try:
                result = await work
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
            if exc.code in LOCAL_CODES:  # local-only codes never cross the wire (§9.2)
                exc = OperationError("EXECUTION_FAILED", exc.message, {"cause": exc.code})
            self.session.respond_error(rid, exc)
        else:
            message = bounded_message(f"{type(exc).__name__}: {exc}")
            self.session.respond_error(rid, OperationError("EXECUTION_FAILED", message))

    async def _dispatch(self, event: CallRequested, ticket: Ticket) -> bytes:
        """An operation's success result, encoded once, as the ledger keeps it: a child's
        away from the loop unless small, a provider's in the call, so it counts as owed
        before the pump runs the next call."""
        method = event.method
        work = partial(self.broker.handle, method, event.params, self.context)
        if method == "flow/run-child":
            return await self.ledger.settle_encoded(ticket, work, _RUN_PROBLEM, _encode)
        return await self.ledger.settle_encoded(ticket, work, _CAPABILITY_PROBLEM)


class _Eager(Generic[_T]):
    """``await _Eager(coro, on_suspend)`` awaits ``coro`` exactly as ``await coro`` would
    (as ``yield from``: suspensions, exceptions and cancellation pass unchanged), and
    calls ``on_suspend`` once, at its first suspension: so the pump hands its role over as
    a call suspends, without a task per call."""

    __slots__ = ("_coro", "_on_suspend", "suspended")

    def __init__(self, coro: Coroutine[Any, Any, _T], on_suspend: Callable[[], None]) -> None:
        self._coro = coro
        self._on_suspend = on_suspend
        self.suspended = False

    def __await__(self) -> Generator[Any, Any, _T]:
        coro, sent, thrown = self._coro, None, None
        while True:
            try:
                signal = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if not self.suspended:
                self.suspended = True
                self._on_suspend()
            try:
                sent, thrown = (yield signal), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation, thrown in by the task
                thrown = exc


def _decode_held(payload: bytes) -> Decoded:
    """:func:`decode` holding a :data:`BIG_DECODES` slot, noting an operation's identity
    digest too (megabytes of params take a while to put in canonical form)."""
    with _decoding:
        frame = decode(payload)
        value = frame.value
        if not isinstance(value, dict) or value.get("method") not in OPERATION_METHODS:
            return frame
        method, params = str(value["method"]), value.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("operationId"), str):
            return frame
        try:
            digest = OperationLedger.digest(method, params)
        except json1.JSON1Error:
            return frame
        return Decoded(value, None, frame.size, digest)


def _checked(method: str, validate: Callable[[JSONValue], str | None]) -> Check:
    """``validate``, its reason worded as a bounded message about ``method``'s result."""

    def problem(result: JSONValue) -> str | None:
        reason = validate(result)
        return (
            None if reason is None else bounded_message(f"the {method} result is invalid: {reason}")
        )

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
