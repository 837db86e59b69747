"""``handle``: serve exactly one root Run over stdin/stdout, then let the process exit.

The runtime receives ``flow/run`` and originates every call, on an event loop it owns:
all protocol state lives on that thread, so frame handling is synchronous and writes are
serialized by construction. The root's life (PROTOCOL.md §10, §11, §13):

1. Host requests other than ``flow/run`` get ``-32601``, stray notifications are
   ignored, a malformed envelope or a broken reply to our call ends the channel.
2. Invalid ``flow/run`` params earn ``-32602`` and exit 0 without running the handler.
3. ``request/cancel`` for the root cancels the handler task and withdraws every call;
   the root ends ``CANCELLED``.
4. When the handler settles, admission closes and remaining calls are withdrawn (live
   ones, or a receiver read from but unfinished, are abandoned work:
   ``EXECUTION_FAILED``); wholly unused direct pairs are released, no writer is sealed
   implicitly. The response is written once every settlement (still admitted: cleanup,
   not new work) finished and every wire request was answered; a cancellation recorded
   before that write still wins.
5. After the root response the process exits 0; a fatal channel condition exits
   :data:`EXIT_FATAL` with no response.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, cast

from runner import json1
from runner.component.calls import CallTable
from runner.component.channels import Channels
from runner.component.context import RunContext
from runner.component.errors import (
    ChannelFault,
    OperationError,
    OperationErrorCode,
    fault_of,
    protocol_error,
)
from runner.component.messages import (
    InvalidParams,
    Root,
    operation_error_frame,
    parse_root,
    result_frame,
    standard_error_frame,
)
from runner.component.model import JSONObject, RunResult
from runner.component.wire import Delivery, start_reader, take_stdio, write_frame
from runner.json1 import JSONValue
from runner.protocol.builders import error_response
from runner.protocol.codes import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ProtocolViolation,
)
from runner.protocol.envelope import ErrorResponse, Notification, Request, Success, classify
from runner.protocol.frames import decode_payload
from runner.protocol.names import FLOW_RUN, REQUEST_CANCEL

Handler = Callable[[RunContext], Awaitable[RunResult | Mapping[str, JSONValue]]]

EXIT_FATAL: Final = 70
"""Exit status after a fatal channel condition (``EX_SOFTWARE``); 0 after any root response."""

HOST_REQUEST_LIMIT: Final = 65_536
_TRACEBACK_BYTES: Final = 65_536
_SHUTDOWN_GRACE_SECONDS: Final = 1.0

_ONE_RUN = threading.Lock()


@dataclass(frozen=True, slots=True)
class Limits:
    """The component's own request bounds; smaller values exist for tests only."""

    window: int = 64
    lifetime: int = 65_536


def handle(handler: Handler) -> None:
    """Serve one root Run with ``handler``; raise ``SystemExit`` after a fatal condition. It
    owns its event loop, so it refuses to run inside one; from the first call on,
    ``print()`` and ``sys.stdout`` write to stderr."""
    status = run(handler, Limits())
    if status:
        raise SystemExit(status)


def run(handler: Handler, limits: Limits) -> int:
    """:func:`handle` with explicit limits; returns the process exit status."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("handle() owns its event loop; call it outside a running asyncio loop")
    if not _ONE_RUN.acquire(blocking=False):
        raise RuntimeError("handle() serves one Run per process and was already called")
    input_fd, output_fd = take_stdio()
    loop = asyncio.new_event_loop()
    try:
        runtime = _Runtime(handler, limits, loop, output_fd)
        start_reader(input_fd, loop, runtime.receive)
        return loop.run_until_complete(runtime.exit)
    finally:  # cancel what handler code left running and give it a moment to unwind
        try:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE_SECONDS))
            for task in tasks:  # their failures were reported already, or do not matter now
                if task.done() and not task.cancelled():
                    task.exception()
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


class _Runtime:
    """The protocol state of one component process; every method runs on the loop thread."""

    def __init__(
        self, handler: Handler, limits: Limits, loop: asyncio.AbstractEventLoop, output_fd: int
    ) -> None:
        self.exit: asyncio.Future[int] = loop.create_future()  # the process's exit status
        self._handler = handler
        self._output_fd = output_fd
        self._calls = CallTable(
            self._write, self._check_admission, window=limits.window, lifetime=limits.lifetime
        )
        self._host_ids: set[str] = set()
        self._root_id: str | None = None
        self._handler_task: asyncio.Task[object] | None = None
        self._root_task: asyncio.Task[None] | None = None  # held: the loop keeps weak refs only
        self._refusal: OperationErrorCode | None = None  # why calls are not admitted; None: open
        self._cancelled = False
        self._finished = False  # the root response is claimed, or the channel is gone

    # --- inbound ------------------------------------------------------------------------

    def receive(self, delivery: Delivery) -> None:
        """Handle what the stdin reader delivers, frame by frame, in order."""
        if isinstance(delivery, ChannelFault):
            self._fail(delivery)
            return
        for payload in delivery:
            if self._finished:
                return
            try:
                self._dispatch(classify(decode_payload(payload)))
            except ProtocolViolation as violation:
                self._fail(fault_of(violation))
            except ChannelFault as fault:
                self._fail(fault)

    def _dispatch(self, message: Request | Notification | Success | ErrorResponse) -> None:
        if isinstance(message, Success | ErrorResponse):
            self._calls.settle(message)
        elif isinstance(message, Notification):
            self._notice(message)
        else:
            self._request(message)

    def _request(self, request: Request) -> None:
        if request.id in self._host_ids:
            raise protocol_error(f"the host reused request id {request.id!r}")
        if len(self._host_ids) >= HOST_REQUEST_LIMIT:
            raise protocol_error("the host sent more than 65,536 requests")
        self._host_ids.add(request.id)
        if request.method != FLOW_RUN:
            message = f"a component does not serve {request.method!r}"
            self._write(standard_error_frame(request.id, METHOD_NOT_FOUND, message))
        elif self._root_id is not None:
            reason = "a second flow/run"
            reply = error_response(request.id, INVALID_REQUEST, f"Invalid Request: {reason}")
            raise protocol_error(reason, reply)
        else:
            self._root_id = request.id
            try:
                root = parse_root(request.params)
            except InvalidParams as error:
                message = f"invalid flow/run params: {error}"
                self._publish(standard_error_frame(request.id, INVALID_PARAMS, message))
            else:
                self._start(root)

    def _notice(self, notification: Notification) -> None:
        if notification.method != REQUEST_CANCEL:
            return
        params = cast(JSONObject, notification.params)  # checked by the envelope step
        if params["requestId"] == self._root_id and not self._cancelled:
            self._cancel_root()

    # --- the root -----------------------------------------------------------------------

    def _start(self, root: Root) -> None:
        if root.grants:
            self._calls.hold(len(root.grants))
        channels = Channels(self._calls, root.grants)
        context = RunContext(root, self._calls, channels)
        self._handler_task = asyncio.ensure_future(self._call_handler(context))
        self._root_task = asyncio.ensure_future(self._complete_root(self._handler_task, channels))

    async def _call_handler(self, context: RunContext) -> object:
        returned = self._handler(context)
        if not inspect.isawaitable(returned):
            raise TypeError("a FLOW handler must be an async function")
        return await returned

    def _cancel_root(self) -> None:
        self._cancelled = True
        self._refusal = "CANCELLED"
        assert self._handler_task is not None
        if not self._handler_task.done():
            self._handler_task.cancel()
            self._calls.cancel_all("CANCELLED")

    async def _complete_root(self, handler_task: asyncio.Task[object], channels: Channels) -> None:
        await asyncio.wait([handler_task])
        if self._finished:  # the channel failed under the handler
            return
        if self._refusal is None:
            self._refusal = "OWNER_CLOSED"
        abandoned = channels.abandoned()  # before withdrawn reads can settle any receiver
        abandoned = self._calls.cancel_all(self._refusal) or abandoned
        response = self._decide(handler_task, abandoned)
        channels.release_unused()
        await self._drain(channels)
        if self._cancelled:
            response = self._error_frame("CANCELLED", "the Run was cancelled")
        self._publish(response)

    async def _drain(self, channels: Channels) -> None:
        """Wait until no settlement runs and no request is outstanding in the same step (a
        settlement may admit its request after the calls went quiet, a late reply start
        one); the synchronous publication follows."""
        while not (channels.idle and self._calls.idle):
            await channels.settle()
            await self._calls.quiesce()

    def _decide(self, handler_task: asyncio.Task[object], abandoned: bool) -> bytes:
        """The root response the handler's settlement earns (before any later cancellation)."""
        if handler_task.cancelled():
            return self._error_frame("EXECUTION_FAILED", "the handler was cancelled")
        error = handler_task.exception()
        if error is None:
            try:
                response = result_frame(self._root_request_id, handler_task.result())
            except ValueError as invalid:
                return self._error_frame("INVALID_RESULT", f"invalid handler result: {invalid}")
            if abandoned:
                return self._error_frame(
                    "EXECUTION_FAILED",
                    "the handler returned with calls pending or a channel receiver unfinished",
                )
            return response
        if isinstance(error, OperationError):
            try:
                return operation_error_frame(self._root_request_id, error)
            except ValueError as invalid:
                _log(f"the handler's OperationError cannot be sent as is: {invalid}")
        _report(error)
        return self._error_frame("EXECUTION_FAILED", f"the handler raised {type(error).__name__}")

    @property
    def _root_request_id(self) -> str:
        assert self._root_id is not None
        return self._root_id

    def _error_frame(self, code: OperationErrorCode, message: str) -> bytes:
        return operation_error_frame(self._root_request_id, OperationError(code, message))

    # --- outbound -----------------------------------------------------------------------

    def _check_admission(self, method: str, settlement: bool) -> None:
        """New work stops with the handler; settlements only with the channel itself."""
        if self._refusal is not None and (self._finished or not settlement):
            raise OperationError(self._refusal, f"{method} refused: the Run no longer admits calls")

    def _write(self, frame: bytes) -> None:
        if self._finished:
            return
        try:
            write_frame(self._output_fd, frame)
        except OSError as error:
            self._fail(ChannelFault("CHANNEL_LOST", f"writing stdout failed: {error}"))

    def _publish(self, response: bytes) -> None:
        """Write the root response: the last frame; claimed before the write starts (§11)."""
        if self._finished:
            return
        self._finished = True
        try:
            write_frame(self._output_fd, response)
        except OSError as error:
            self._exit_with(EXIT_FATAL, f"CHANNEL_LOST: writing the root response failed: {error}")
            return
        self._exit_with(0)

    def _fail(self, fault: ChannelFault) -> None:
        """End the channel: best-effort standard error, fail every wait, exit nonzero."""
        if self._finished:
            return
        if fault.reply is not None:
            with contextlib.suppress(OSError):
                write_frame(self._output_fd, json1.dumps(fault.reply))
        self._finished = True
        self._refusal = fault.code
        self._calls.fail_all(fault)
        self._exit_with(EXIT_FATAL, f"{fault.code}: {fault.reason}")

    def _exit_with(self, status: int, diagnostic: str | None = None) -> None:
        if diagnostic is not None:
            _log(diagnostic)
        if not self.exit.done():
            self.exit.set_result(status)


def _log(message: str) -> None:
    sys.stderr.write(f"flow component: {message}\n")
    sys.stderr.flush()


def _report(error: BaseException) -> None:
    """The handler's traceback on stderr, bounded to 64 KiB."""
    text = "".join(traceback.format_exception(error)).encode("utf-8", "backslashreplace")
    sys.stderr.write(text[:_TRACEBACK_BYTES].decode("utf-8", "ignore"))
    sys.stderr.flush()
