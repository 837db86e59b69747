"""The pump: reads the component's stdout, decodes its frames and runs the calls they admit.

Calls are the hot path (``bench/calls.py``, ``bench/channels.py``), and a task switch
costs more than a small call's protocol work. So one task at a time holds the pump role:
it handles every complete frame of a read in one pass, then runs the calls those frames
admitted itself, each in its own cancel scope. A call that completes without suspending
costs no hand-off; one that suspends hands the pump role, at that moment, to an idle task
of the pool (or a new one) and finishes in the task it started in (:class:`_Eager`), so
reading never waits on a call. The pump yields to the loop once it has run calls for
:data:`PUMP_SLICE` seconds: nothing a component asks for holds the loop long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

from runner import json1
from runner.host.calls import OPERATION_METHODS, CallHandler
from runner.host.operations import OperationLedger
from runner.host.stdin_writer import OWED_FREELY
from runner.protocol.names import CHANNEL_METHODS
from runner.protocol.session import Decoded, decode

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
"""Seconds the pump runs calls before it lets the loop serve others (the deadline, a
signal, the other runs of the tree)."""
READ_BYTES = 1 << 16
"""The most stdout the pump takes at once: one read of the transport, so a take is never
a join of reads large enough for glibc to map in and out for it."""
_T = TypeVar("_T")


class Pump(CallHandler):
    """The pump role and the pool of tasks that take it in turn."""

    async def _work(self) -> None:
        """A task of the pool: holds the pump role until it hands it over, then parks until
        the role comes back to it. Ends when stdout has ended."""
        while not await self._pump():
            self.parked.append(wake := anyio.Event())
            await wake.wait()

    def _resume(self) -> None:
        """The pump is back from the loop: its pass runs again."""
        self.pumping = True
        self.resumed = time.monotonic()

    async def _pump(self) -> bool:
        """The pump role: read, frame, decode and handle, run admitted calls; True once
        stdout ended, False when a call suspended (the role moved on; that call is done).

        Every complete frame of a read is handled before the calls it admitted run, so a
        ``request/cancel`` right behind its request still finds the call queued. Large
        frames are decoded in a worker thread (only the pure decoding: the session changes
        state here alone) while the loop serves the deadline, cancellation and running
        calls; admitted calls start before such a decode. Before each call and each read
        the pump waits while it is held back (:meth:`_held_back`).
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
                    frame = await anyio.to_thread.run_sync(
                        _decode_held, payload, abandon_on_cancel=True, limiter=_decode_limiter()
                    )
                    self._resume()
                    self._handle(session.receive_decoded(frame))
            elif queued:
                if time.monotonic() - self.resumed > PUMP_SLICE:
                    self._pause_pumping()
                    await anyio.lowlevel.checkpoint()
                    self._resume()
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


class _Eager(Generic[_T]):
    """``await _Eager(coro, on_suspend)`` awaits ``coro`` exactly as ``await coro`` would,
    in the awaiting task, and calls ``on_suspend`` once, at its first suspension.

    So the pump learns, as it happens, that a call will not complete at once, and hands
    its role over without a task per call: the call goes on in the task it started in (its
    cancel scope, task groups and cancellation stay with that task), every suspension,
    exception and cancellation passing through unchanged, as with ``yield from``.
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
    an operation's identity digest is noted too (megabytes of params take a while to put
    in canonical form)."""
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


def _decode_limiter() -> anyio.CapacityLimiter:
    """This event loop's limiter of :data:`BIG_DECODES`, where a task waits its turn
    without holding a worker thread (a limiter belongs to the loop it was made in)."""
    try:
        return _big_decodes.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(BIG_DECODES)
        _big_decodes.set(limiter)
        return limiter
