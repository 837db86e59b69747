"""HostSession: the host side of one Run/1 channel incarnation, with no I/O at all.

Fed the component's stdout bytes and EOF, it returns events (a request to dispatch, a
cancel, the root response, a fatal violation) and queues the frames for its stdin.
Everything PROTOCOL.md decides from the bytes alone is decided here (the receive pipeline
is §1.3's), so it is tested and fuzzed in-process; the driver owns I/O, clock and broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

from runner import json1
from runner.json1 import JSONValue
from runner.protocol import builders
from runner.protocol.codes import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    LocalProtocolError,
    OperationError,
    ProtocolViolation,
    bounded_message,
)
from runner.protocol.envelope import ErrorResponse, Notification, Request, Success, classify
from runner.protocol.frames import (
    MAX_PAYLOAD_BYTES,
    FrameDecoder,
    decode_payload,
    encode_frame,
    encode_result_frame,
)
from runner.protocol.names import COMPONENT_TO_HOST_METHODS
from runner.protocol.params import validate_params
from runner.protocol.results import validate_run_result

MAX_PENDING = 64
"""Component requests that may await a response at once (PROTOCOL.md §1)."""
MAX_LIFETIME_REQUESTS = 65_536
"""Request-form messages one sender may originate per channel incarnation."""
ROOT_ID = "host:1"
SPLICE_BYTES = 1 << 16
"""Results from this size on are queued uncopied (:meth:`HostSession.respond_encoded`)."""

Condition = Literal["CANCELLED", "DEADLINE_EXCEEDED"]


class SessionState(Enum):
    """Where one channel incarnation stands: all that decides what is legal (the condition,
    root response, pending ids and counters beside it never decide a move).

    ``NOT_STARTED``: the component may ask for nothing. ``RUNNING``: ``flow/run`` is sent,
    every component method is admitted. ``CANCELLING``: a condition is recorded and the
    root cancelled, only channel settlement is admitted (§10). ``RESPONDED``: the valid
    root response arrived, any further byte is a violation. ``ENDED``: stdout ended on a
    frame boundary (§11 needs it). ``CLOSED``: a violation closed the channel.
    """

    NOT_STARTED = "NOT_STARTED"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    RESPONDED = "RESPONDED"
    ENDED = "ENDED"
    CLOSED = "CLOSED"


class Step(Enum):
    """What moves a session: the host sends ``flow/run`` (``START``) or cancels the root
    (``CANCEL``); the component's valid root response (``RESPONSE``), stdout ending on a
    frame boundary (``EOF``), or a violation, a truncated last frame included."""

    START = "start"
    CANCEL = "cancel"
    RESPONSE = "response"
    EOF = "eof"
    VIOLATION = "violation"


_S = SessionState
_MOVES: Final[dict[tuple[SessionState, Step], SessionState]] = {
    (_S.NOT_STARTED, Step.START): _S.RUNNING,
    (_S.NOT_STARTED, Step.VIOLATION): _S.CLOSED,
    (_S.RUNNING, Step.CANCEL): _S.CANCELLING,
    (_S.RUNNING, Step.RESPONSE): _S.RESPONDED,
    (_S.RUNNING, Step.EOF): _S.ENDED,
    (_S.RUNNING, Step.VIOLATION): _S.CLOSED,
    (_S.CANCELLING, Step.RESPONSE): _S.RESPONDED,
    (_S.CANCELLING, Step.EOF): _S.ENDED,
    (_S.CANCELLING, Step.VIOLATION): _S.CLOSED,
    (_S.RESPONDED, Step.EOF): _S.ENDED,
    (_S.RESPONDED, Step.VIOLATION): _S.CLOSED,
    (_S.ENDED, Step.CANCEL): _S.ENDED,
    (_S.ENDED, Step.VIOLATION): _S.CLOSED,
    (_S.CLOSED, Step.EOF): _S.CLOSED,
}
"""Every legal move; any other raises :class:`LocalProtocolError`. A cancel after a clean
end of stdout stays ``ENDED`` but records the condition: it decides the verdict if the
host then kills (§11)."""

_ADMITS: Final[dict[SessionState, frozenset[str]]] = {
    _S.NOT_STARTED: frozenset(),
    _S.RUNNING: COMPONENT_TO_HOST_METHODS,
    _S.CANCELLING: frozenset({"channel/close", "channel/release"}),
    _S.RESPONDED: frozenset(),
    _S.ENDED: frozenset(),
    _S.CLOSED: frozenset(),
}
"""The component methods each state admits; any other valid request is ``OWNER_CLOSED``."""


def flow_run_overflow(params: dict[str, JSONValue]) -> int | None:
    """The payload size of the ``flow/run`` frame for ``params`` if it exceeds the frame
    bound (an input within 16 MiB can), else None: checked before launching anything, as
    :meth:`HostSession.start` refuses to write that frame."""
    size = len(json1.dumps(builders.request(ROOT_ID, "flow/run", params)))
    return size if size > MAX_PAYLOAD_BYTES else None


@dataclass(frozen=True, slots=True)
class CallRequested:
    """A valid, admitted component request the host must answer via :meth:`respond_encoded`."""

    request_id: str
    method: str
    params: dict[str, JSONValue]
    size: int = 0  # the frame payload's length: about what the pending call holds
    note: object = None  # :attr:`Decoded.note`, handed on


@dataclass(frozen=True, slots=True)
class CallCancelled:
    """The component cancelled one of its pending requests; it is already answered."""

    request_id: str


@dataclass(frozen=True, slots=True)
class RootResult:
    """The component's valid, correlated root success: ``{outcome, output}``."""

    result: dict[str, JSONValue]


@dataclass(frozen=True, slots=True)
class RootError:
    """The component's valid, correlated ``-32000`` root error."""

    error: OperationError


@dataclass(frozen=True, slots=True)
class Violation:
    """A fatal peer protocol violation; the channel is closed."""

    reason: str


Event = CallRequested | CallCancelled | RootResult | RootError | Violation


@dataclass(frozen=True, slots=True)
class Decoded:
    """One frame payload's JSON/1 decoding (§1.3 steps 2-3): its value or its violation."""

    value: JSONValue
    violation: ProtocolViolation | None = None
    size: int = 0  # the payload's length
    note: object = None
    """What the decoding side (a worker thread) worked out from the value; a request's
    :class:`CallRequested` carries it on, the session never reads it."""


def decode(payload: bytes) -> Decoded:
    """Decode one frame payload; it touches no session, so a driver may run it in a worker
    thread (a hostile 16 MiB frame can take seconds to refuse)."""
    try:
        return Decoded(decode_payload(payload), None, len(payload))
    except ProtocolViolation as exc:
        return Decoded(None, exc, len(payload))


class HostSession:
    """One Run/1 channel incarnation seen from the host; not thread-safe, no I/O. :attr:`state`
    moves only by :data:`_MOVES`, the component may ask for :data:`_ADMITS`. A host misuse (a
    second ``start``, answering a request never admitted) raises :class:`LocalProtocolError`;
    a component mistake is a :class:`Violation` event."""

    def __init__(self, params: dict[str, JSONValue]) -> None:
        reason = validate_params("flow/run", params)
        if reason is not None:
            raise LocalProtocolError(f"flow/run params are invalid: {reason}")
        self.params = params
        self._decoder = FrameDecoder()
        self._outbox: list[bytes] = []
        self.outbox_bytes = 0  # queued and not yet taken
        self._state = SessionState.NOT_STARTED
        self._admits = _ADMITS[self._state]
        self.closed = False  # state is CLOSED: a plain field, read on every frame
        self._seen: dict[str, bool] = {}  # every request id used: was it admitted?
        self._pending: set[str] = set()
        self.lifetime_requests = 0
        self.root_response: RootResult | RootError | None = None
        self.violation: str | None = None
        self.condition: Condition | None = None
        self.bytes_received = 0
        self.bytes_sent = 0

    # ----- what the driver asks -------------------------------------------------------

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def pending(self) -> frozenset[str]:
        """Ids of dispatched component requests still owed a response."""
        return frozenset(self._pending)

    def owes(self, request_id: str) -> bool:
        """Whether the dispatched component request ``request_id`` still awaits an answer."""
        return request_id in self._pending

    def frames_to_send(self) -> list[bytes]:
        """Pop every frame queued for the component's stdin, in order (unjoined: a join would
        hold large answers twice)."""
        frames = self._outbox
        self._outbox = []
        self.bytes_sent += self.outbox_bytes
        self.outbox_bytes = 0
        return frames

    # ----- host actions ---------------------------------------------------------------

    def start(self) -> None:
        """Queue the single ``flow/run`` request (only in ``NOT_STARTED``)."""
        self._move(Step.START)
        self._queue(builders.request(ROOT_ID, "flow/run", self.params))

    def cancel_root(self, condition: Condition) -> bool:
        """Record root cancellation or the deadline and queue ``request/cancel``: True, or
        False when a condition or root response came first or the channel is closed (they
        race with the host's cancel). :class:`LocalProtocolError` before :meth:`start`.
        """
        if self._state is SessionState.NOT_STARTED:
            raise LocalProtocolError("cancel_root before start: flow/run was never sent")
        if (self._state, Step.CANCEL) not in _MOVES or self.condition is not None:
            return False
        if self.root_response is not None:
            return False
        self._move(Step.CANCEL)
        self.condition = condition
        self._queue(builders.cancel_notification(ROOT_ID))
        return True

    def respond_encoded(self, request_id: str, result: bytes) -> None:
        """Answer a dispatched component request with a success result already encoded by
        :func:`json1.dumps`, spliced into the frame. An id already settled (answered, cancelled,
        cleared by a violation: a race the host cannot avoid) is ignored by every ``respond*``;
        one never admitted raises :class:`LocalProtocolError`, as does one past the frame bound
        (the request still owed). A large result is queued uncopied between the frame's head
        and tail (64 replays of one kept result hold it once).
        """
        if request_id not in self._pending:
            self._settle(request_id)  # raises for an id never admitted
            return
        if len(result) < SPLICE_BYTES:
            frame = encode_result_frame(request_id, result)
            if self._settle(request_id):
                self._queue_frame(frame)
            return
        shell = encode_result_frame(request_id, b"")
        size = len(shell) - 1 + len(result)
        if size > MAX_PAYLOAD_BYTES:
            raise LocalProtocolError(
                f"frame payload of {size:,} bytes exceeds {MAX_PAYLOAD_BYTES:,}"
            )
        if self._settle(request_id):
            for piece in (shell[:-2], result, shell[-2:]):
                self._queue_frame(piece)

    def respond_error(self, request_id: str, error: OperationError) -> None:
        """Answer a dispatched component request with a ``-32000`` operational error."""
        if self._settle(request_id):
            self._queue(builders.operation_error_response(request_id, error))

    # ----- component bytes ------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed component stdout bytes; returns the events they complete."""
        payloads, events = self.receive_bytes(data)
        for payload in payloads:
            if self.closed:
                break
            events += self.receive_decoded(decode(payload))
        return events

    def receive_bytes(self, data: bytes) -> tuple[list[bytes], list[Event]]:
        """Framing alone (§1.3 step 1): the payloads ``data`` completes and the events of a
        violation; hand each payload's :func:`decode` to :meth:`receive_decoded`, in order."""
        self.bytes_received += len(data)
        if self.closed or not data:
            return [], []
        if self.root_response is not None:
            return [], self._fatal("unexpected bytes on stdout after the root response")
        try:
            return self._decoder.feed(data), []
        except ProtocolViolation as exc:
            return [], self._fatal(exc.reason, exc.reply)

    def receive_decoded(self, frame: Decoded) -> list[Event]:
        """One decoded frame from :meth:`receive_bytes`; returns the events it completes."""
        if self.closed:
            return []
        if self.root_response is not None:
            return self._fatal("a frame arrived after the root terminal response")
        if frame.violation is not None:
            return self._fatal(frame.violation.reason, frame.violation.reply)
        try:
            message = classify(frame.value)
        except ProtocolViolation as exc:
            reply = exc.reply
            if reply is not None and reply["id"] in self._seen:
                # A -32600 naming a used id would be a second response to that request
                # (§1: ids are never reused, and a reuse gets no frame): name no id.
                reply = {**reply, "id": None}
            return self._fatal(exc.reason, reply)
        if isinstance(message, Request):
            return self._receive_request(message, frame)
        if isinstance(message, Notification):
            return self._receive_notification(message)
        return self._receive_response(message)

    def receive_eof(self) -> list[Event]:
        """The component's stdout ended: ``ENDED`` on a frame boundary, else a violation."""
        if self.closed:
            return []
        try:
            self._decoder.eof()
        except ProtocolViolation as exc:
            return self._fatal(exc.reason)
        self._move(Step.EOF)
        return []

    # ----- the state machine ----------------------------------------------------------

    def _move(self, step: Step) -> None:
        """Take ``step`` by :data:`_MOVES`; an illegal one raises and changes nothing."""
        state = self._state
        try:
            new = _MOVES[state, step]
        except KeyError:
            raise LocalProtocolError(
                f"{step.value} is not allowed in session state {state.name}"
            ) from None
        self._state = new
        self._admits = _ADMITS[new]
        self.closed = new is SessionState.CLOSED

    # ----- internals ------------------------------------------------------------------

    def _queue(self, message: dict[str, JSONValue]) -> None:
        if not self.closed:
            frame = encode_frame(message)
            self._outbox.append(frame)
            self.outbox_bytes += len(frame)

    def _queue_frame(self, frame: bytes) -> None:
        """Queue ``frame`` or one piece of one (a frame's pieces are queued in a row)."""
        if not self.closed:
            self._outbox.append(frame)
            self.outbox_bytes += len(frame)

    def _settle(self, request_id: str) -> bool:
        """Take ``request_id`` off the pending set: True if it was owed (so the channel is
        open: a violation clears the set)."""
        pending = self._pending
        if request_id in pending:
            pending.discard(request_id)
            return True
        if not self._seen.get(request_id):
            raise LocalProtocolError(f"request {request_id!r} was never admitted")
        return False

    def _fatal(self, reason: str, reply: dict[str, JSONValue] | None = None) -> list[Event]:
        if reply is not None:
            self._queue(reply)
        self._move(Step.VIOLATION)
        self.violation = reason
        self._pending.clear()
        return [Violation(reason)]

    def _receive_request(self, request: Request, frame: Decoded) -> list[Event]:
        rid = request.id
        seen = self._seen
        if rid in seen:
            return self._fatal(f"reused request ID {rid!r}")
        seen[rid] = False
        self.lifetime_requests += 1
        if self.lifetime_requests > MAX_LIFETIME_REQUESTS:
            return self._fatal(
                f"request-ID lifetime limit: request {rid!r} is the "
                f"{self.lifetime_requests}th from the component (limit {MAX_LIFETIME_REQUESTS})"
            )
        if request.method not in COMPONENT_TO_HOST_METHODS:
            message = bounded_message(f"method {request.method!r} is not valid here")
            return self._refuse(builders.error_response(rid, METHOD_NOT_FOUND, message))
        reason = validate_params(request.method, request.params)
        if reason is not None:
            message = bounded_message(reason)
            return self._refuse(builders.error_response(rid, INVALID_PARAMS, message))
        assert isinstance(request.params, dict)  # validate_params admits only objects
        if request.method not in self._admits:
            message = "the root Run is no longer admitting owned work"
            return self._refuse(builders.operational_error(rid, "OWNER_CLOSED", message))
        if len(self._pending) >= MAX_PENDING:
            message = f"{MAX_PENDING} component requests are already pending"
            return self._refuse(builders.operational_error(rid, "RESOURCE_EXHAUSTED", message))
        self._pending.add(rid)
        seen[rid] = True
        return [CallRequested(rid, request.method, request.params, frame.size, frame.note)]

    def _refuse(self, reply: dict[str, JSONValue]) -> list[Event]:
        """Answer a request the session does not dispatch."""
        self._queue(reply)
        return []

    def _receive_notification(self, note: Notification) -> list[Event]:
        if note.method != "request/cancel":
            return []
        reason = validate_params("request/cancel", note.params)
        if reason is not None:
            return self._fatal(f"malformed request/cancel: {reason}")
        assert isinstance(note.params, dict)
        target = note.params["requestId"]
        assert isinstance(target, str)
        if target not in self._pending:
            return []  # unknown, stale, duplicate: responses and cancels race
        self._pending.discard(target)
        self._queue(builders.operational_error(target, "CANCELLED", "cancelled by the component"))
        return [CallCancelled(target)]

    def _receive_response(self, response: Success | ErrorResponse) -> list[Event]:
        if response.id != ROOT_ID or self._state is SessionState.NOT_STARTED:
            return self._fatal(f"response to an id the host never sent: {response.id!r}")
        if self.root_response is not None:
            return self._fatal("a second root response")
        event: RootResult | RootError
        if isinstance(response, Success):
            reason = validate_run_result(response.result)
            if reason is not None:
                return self._fatal(f"invalid root result: {reason}")
            assert isinstance(response.result, dict)
            event = RootResult(response.result)
        else:
            error = response.operation_error()
            if error is None:
                return self._fatal(
                    f"the component answered flow/run with JSON-RPC error {response.code} "
                    f"({response.message}): the peers disagree on the protocol"
                )
            event = RootError(error)
        if self._pending:
            return self._fatal(
                f"root response while {len(self._pending)} component request(s) are pending"
            )
        self._move(Step.RESPONSE)
        self.root_response = event
        return [event]
