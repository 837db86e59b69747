"""Channels (PROTOCOL.md §7): the endpoints a Run holds, the sources it made, their cleanup.

An endpoint object wraps one grant the host minted (in ``flow/run`` params or a
``channel/create``/``channel/subscribe`` result); authority stays with the host. State
changes happen in *parsers*, which run when the host's reply arrives whether or not the
caller still waits: a read cancelled locally may still commit an item, a cancelled create
may still grant endpoints, and history must follow the wire. There every history check
(contiguous sequences, an end matching what was delivered, a release agreeing with both)
is a fatal ``PROTOCOL_ERROR`` the moment the host breaks it.

Settlements (``channel/close``, ``channel/release``) run as tracked tasks, so a caller who
stops waiting leaves the request alive (§7.5); the runtime awaits them before the root
response. Where the spec is silent: a receiver that saw its end is not released (§7.6);
a sender's ``async with`` seals only on a clean exit (after an exception the host aborts
the writer rather than present a truncated sequence as complete); a send after ``close``
is refused locally with ``DISCONNECTED``, like the reference SDK; failures of optional
cleanup (releasing unused pairs, late grants) change nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar, cast

from runner.component.calls import CallTable, Parser
from runner.component.errors import OperationError, protocol_error
from runner.component.messages import (
    End,
    Grant,
    Item,
    parse_broadcast,
    parse_next,
    parse_null,
    parse_pair,
    parse_release,
    parse_subscription,
)
from runner.component.model import (
    MAX_ENDPOINTS,
    MAX_SOURCES,
    ChannelContractIdentity,
    Delivery,
    JSONObject,
    ReleaseStatus,
)
from runner.json1 import JSONValue

T = TypeVar("T")
E = TypeVar("E", bound="ChannelEndpoint")


class ChannelEndpoint:
    """One communication right of this Run: a writer or a reader of one source. It (or its
    :attr:`reference`) may be mapped into a call's ``channels``; only an unused endpoint can
    move to a callee, and the host decides whether it did."""

    __slots__ = ("_channels", "_grant", "_offered", "_used")

    def __init__(self, channels: Channels, grant: Grant) -> None:
        self._channels = channels
        self._grant = grant
        self._used = False
        self._offered = False  # mapped into a call: it may have moved, only the host knows

    @property
    def reference(self) -> str:
        """The opaque reference the host minted for this Run."""
        return self._grant.endpoint

    @property
    def contract(self) -> ChannelContractIdentity | None:
        """The Channel Contract/1 the source was named with, if any."""
        return self._grant.contract

    @property
    def delivery(self) -> Delivery:
        """``direct`` (one reader) or ``broadcast`` (any number of subscriptions)."""
        return self._grant.delivery

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reference!r})"

    async def __aenter__(self) -> Self:
        return self

    async def _settle(self, method: str, parse: Parser) -> object:
        params: JSONObject = {"endpoint": self.reference}
        return await self._channels.invoke(method, params, parse, settlement=True)


class ChannelSender(ChannelEndpoint):
    """The single writer of a source: :meth:`send` values in order, then :meth:`close` it."""

    __slots__ = ("_closing", "_unanswered")

    def __init__(self, channels: Channels, grant: Grant) -> None:
        super().__init__(channels, grant)
        self._unanswered = 0  # sends whose wire reply has not arrived, cancelled ones included
        self._closing: asyncio.Task[object] | None = None

    async def send(self, value: JSONValue) -> None:
        """Return once the host accepted ``value`` (validated and queued, not processed); a
        full direct queue holds the reply back (back-pressure). Cancelling withdraws a value
        the host has not accepted yet."""
        if self._closing is not None:
            raise OperationError("DISCONNECTED", "this writer is closed")
        self._used = True
        self._unanswered += 1
        params: JSONObject = {"endpoint": self.reference, "value": value}
        await self._channels.invoke("channel/send", params, parse_null, on_reply=self._answered)

    async def close(self) -> None:
        """Seal the source: readers see a clean end after the values accepted. Refused with
        ``INVALID_INPUT`` while a send awaits its reply, as the host would; later calls
        join the one request."""
        if self._closing is None:
            if self._unanswered:
                raise OperationError("INVALID_INPUT", "a send of this writer is still unanswered")
            self._used = True
            self._closing = self._channels.track(self._settle("channel/close", parse_null))
        await asyncio.shield(self._closing)

    async def aclose(self) -> None:
        """:meth:`close` under the name ``contextlib.aclosing`` expects."""
        await self.close()

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.close()

    def _answered(self, reply: object) -> None:
        self._unanswered -= 1


class ChannelReceiver(ChannelEndpoint):
    """A reader: ``async for value in receiver`` yields the values in sequence order, one
    ``channel/next`` a step, no prefetch. A failure the host reports for a read is raised
    as :class:`OperationError`, then on every later read. Once read from (a subscription:
    once made) it must end, fail, be disposed of (:meth:`aclose`, ``async with``) or be
    offered to a callee before the handler returns, or the Run is ``EXECUTION_FAILED``.
    """

    __slots__ = (
        "_activated",
        "_cause",
        "_ended",
        "_last",
        "_read_idle",
        "_release",
        "_release_end",
        "_start",
    )

    def __init__(self, channels: Channels, grant: Grant, *, activated: bool = False) -> None:
        super().__init__(channels, grant)
        self._start = cast(int, grant.start_sequence)
        self._last = self._start - 1
        self._activated = activated
        self._ended = False
        self._cause: OperationError | None = None
        self._read_idle = asyncio.Event()
        self._read_idle.set()
        self._release: asyncio.Task[ReleaseStatus] | None = None
        self._release_end: int | None = None  # lastSequence of an ``ended`` release

    @property
    def start_sequence(self) -> int:
        """This reader's first sequence (1 for direct delivery)."""
        return self._start

    @property
    def last_sequence(self) -> int:
        """The sequence of the last value delivered; ``start_sequence - 1`` before any."""
        return self._last

    def __aiter__(self) -> ChannelReceiver:
        return self

    async def __anext__(self) -> JSONValue:
        """The next value; ``StopAsyncIteration`` at the end or after disposal. Cancelling a
        pending read disposes of the receiver (``request/cancel``, ``channel/release``)."""
        if self._cause is not None:
            raise self._cause
        if self._ended or self._release is not None:
            raise StopAsyncIteration
        if not self._read_idle.is_set():
            raise RuntimeError("this receiver already has a read pending")
        self._used = self._activated = True
        self._read_idle.clear()
        params: JSONObject = {"endpoint": self.reference}
        try:
            record = await self._channels.invoke(
                "channel/next", params, self._accept, on_reply=self._read_over
            )
        except asyncio.CancelledError:
            self._dispose()
            raise
        if isinstance(record, End):
            raise StopAsyncIteration
        return cast(Item, record).value

    async def aclose(self) -> ReleaseStatus:
        """Dispose of the receiver with one ``channel/release`` (repeated calls join it) and
        return the host's status once any pending read is over; after the end was
        delivered nothing is sent and the status is ``ended``."""
        if self._ended and self._release is None:
            return ReleaseStatus("ended", last_sequence=self._last)
        return await asyncio.shield(self._dispose())

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.aclose()

    def _abandoned(self) -> bool:
        """Activated, not offered (it may be the callee's now) and not finished."""
        finished = self._ended or self._cause is not None or self._release is not None
        return self._activated and not (self._offered or finished)

    def _dispose(self) -> asyncio.Task[ReleaseStatus]:
        if self._release is None:
            self._used = True
            self._release = self._channels.track(self._released())
        return self._release

    async def _released(self) -> ReleaseStatus:
        status = await self._settle("channel/release", self._accept_release)
        await self._read_idle.wait()
        return cast(ReleaseStatus, status)

    def _accept(self, result: JSONValue) -> Item | End:
        """Take one read into the history: items contiguous, the end where delivery stopped."""
        record = parse_next(result)
        if isinstance(record, Item):
            if record.sequence != self._last + 1:
                raise protocol_error(f"item {record.sequence} follows item {self._last}")
            self._last = record.sequence
        elif record.last_sequence != self._last:
            raise protocol_error(f"the end at {record.last_sequence} follows item {self._last}")
        else:
            self._ended = True
        self._check_release_end()
        return record

    def _read_over(self, reply: object) -> None:
        """A read is over: a host failure becomes sticky, but not the ``CANCELLED`` of a
        read cancelled by this receiver's own disposal."""
        self._read_idle.set()
        disposal = self._release is not None
        if isinstance(reply, OperationError) and not (disposal and reply.code == "CANCELLED"):
            self._cause = self._cause or reply

    def _accept_release(self, result: JSONValue) -> ReleaseStatus:
        status = parse_release(result)
        self._release_end = status.last_sequence
        self._check_release_end()
        return status

    def _check_release_end(self) -> None:
        """An ``ended`` release cannot precede a delivered item nor differ from a seen end;
        checked as either moves (the two replies may come in either order)."""
        end = self._release_end
        if end is not None and (end < self._last or (self._ended and end != self._last)):
            raise protocol_error(f"a release ended at {end}, but item {self._last} was delivered")


@dataclass(frozen=True, slots=True)
class ChannelPair:
    """A direct channel this Run created: its one writer and its one reader."""

    send: ChannelSender
    receive: ChannelReceiver


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class BroadcastSource:
    """A broadcast source this Run created: its one writer ``send`` (which may be offered to a
    callee) and the right to subscribe. ``reference``, the opaque source reference, names no
    endpoint: it cannot be mapped into a call, nor does moving the writer move it (§7.3)."""

    _channels: Channels
    send: ChannelSender
    reference: str

    async def subscribe(self) -> ChannelReceiver:
        """A new reader from the next accepted value on (no history); owned work at once:
        read it to its end or :meth:`~ChannelReceiver.aclose` it before the handler returns.
        """
        return await self._channels.subscribe(self)

    def __repr__(self) -> str:
        return f"BroadcastSource({self.reference!r})"


class Channels:
    """This Run's endpoints and sources: allocation, local limits, cleanup, completion checks."""

    def __init__(self, calls: CallTable, grants: Mapping[str, Grant]) -> None:
        self.invoke = calls.call
        self._endpoints: dict[str, ChannelEndpoint] = {}
        self._sources: set[str] = set()
        self._pairs: list[ChannelPair] = []
        self._allocating = 0  # endpoints requested and not yet granted or refused
        self._allocating_sources = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ports = {name: self._adopt_grant(grant) for name, grant in grants.items()}

    @property
    def idle(self) -> bool:
        """No settlement or cleanup task is running."""
        return not self._tasks

    def port(self, name: str, kind: type[E]) -> E:
        """The endpoint the host granted for port ``name``, if it is a ``kind``."""
        endpoint = self._ports.get(name)
        if endpoint is None:
            raise KeyError(f"the host granted no channel for port {name!r}")
        if not isinstance(endpoint, kind):
            granted = type(endpoint).__name__
            raise ValueError(f"port {name!r} is granted as a {granted}, not a {kind.__name__}")
        return endpoint

    async def create(self, delivery: Delivery, params: JSONObject) -> ChannelPair | BroadcastSource:
        """``channel/create``; late grants are cleaned up (a pair's reader released, a
        source's writer closed)."""
        if delivery == "direct":
            return await self._allocate(
                "channel/create", params, self._adopt_pair, lambda pair: pair.receive.aclose(), 2
            )
        return await self._allocate(
            "channel/create", params, self._adopt_source, lambda source: source.send.close(), 1, 1
        )

    async def subscribe(self, source: BroadcastSource) -> ChannelReceiver:
        """``channel/subscribe``: a reader whose contract must be the source writer's."""

        def adopt(result: JSONValue) -> ChannelReceiver:
            grant = parse_subscription(result)
            if grant.contract != source.send.contract:
                raise protocol_error("a subscription's contract differs from its source's")
            return self._adopt_receiver(grant, activated=True)

        params: JSONObject = {"source": source.reference}
        return await self._allocate(
            "channel/subscribe", params, adopt, lambda receiver: receiver.aclose(), 1
        )

    def offer(self, references: Collection[str]) -> None:
        """References mapped into a call may move: never release them implicitly. A source
        reference is no endpoint and cannot be mapped (§7.3)."""
        for reference in references:
            if reference in self._sources:
                raise ValueError(f"{reference!r} is a broadcast source, not an endpoint")
        for reference in references:
            if (endpoint := self._endpoints.get(reference)) is not None:
                endpoint._offered = True

    def abandoned(self) -> bool:
        """Whether a receiver is left activated but unfinished (checked when the handler ends)."""
        return any(
            isinstance(endpoint, ChannelReceiver) and endpoint._abandoned()
            for endpoint in self._endpoints.values()
        )

    def release_unused(self) -> None:
        """Release the reader of every direct pair this Run created and never touched (§7.6)."""
        for pair in self._pairs:
            if not any(end._used or end._offered for end in (pair.send, pair.receive)):
                self.track(pair.receive.aclose())

    def track(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run settlement or cleanup work as a task the Run waits for before its response."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._untrack)
        return task

    async def settle(self) -> None:
        """Wait for the tracked tasks running now (the runtime loops until none start)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    def _untrack(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # its waiters, if any, saw it through shield(); cleanup ignores it

    async def _allocate(
        self,
        method: str,
        params: JSONObject,
        adopt: Callable[[JSONValue], T],
        cleanup: Callable[[T], Coroutine[Any, Any, object]],
        endpoints: int,
        sources: int = 0,
    ) -> T:
        """Send an allocating request within the local limits; grants outlive the waiter."""
        if len(self._endpoints) + self._allocating + endpoints > MAX_ENDPOINTS:
            raise OperationError("RESOURCE_EXHAUSTED", f"a Run holds ≤{MAX_ENDPOINTS} endpoints")
        if len(self._sources) + self._allocating_sources + sources > MAX_SOURCES:
            raise OperationError("RESOURCE_EXHAUSTED", f"a Run creates ≤{MAX_SOURCES} sources")
        self._allocating += endpoints
        self._allocating_sources += sources

        def over(reply: object) -> None:
            self._allocating -= endpoints
            self._allocating_sources -= sources

        allocation = _Allocation(adopt, lambda created: self.track(cleanup(created)))
        try:
            created = await self.invoke(
                method, params, allocation.adopt, hold=endpoints, on_reply=over
            )
        except asyncio.CancelledError:
            allocation.abandon()
            raise
        return cast(T, created)

    def _adopt_pair(self, result: JSONValue) -> ChannelPair:
        send, receive = parse_pair(result)
        pair = ChannelPair(self._adopt_sender(send), self._adopt_receiver(receive))
        self._pairs.append(pair)
        return pair

    def _adopt_source(self, result: JSONValue) -> BroadcastSource:
        send, reference = parse_broadcast(result)
        if reference in self._sources:
            raise protocol_error(f"the host created the source {reference!r} twice")
        self._sources.add(reference)
        return BroadcastSource(self, self._adopt_sender(send), reference)

    def _adopt_grant(self, grant: Grant) -> ChannelEndpoint:
        if grant.direction == "send":
            return self._adopt_sender(grant)
        return self._adopt_receiver(grant)

    def _adopt_sender(self, grant: Grant) -> ChannelSender:
        return self._register(ChannelSender(self, grant))

    def _adopt_receiver(self, grant: Grant, *, activated: bool = False) -> ChannelReceiver:
        return self._register(ChannelReceiver(self, grant, activated=activated))

    def _register(self, endpoint: E) -> E:
        if endpoint.reference in self._endpoints:
            raise protocol_error(f"the host granted the endpoint {endpoint.reference!r} twice")
        self._endpoints[endpoint.reference] = endpoint
        return endpoint


class _Allocation(Generic[T]):
    """One create or subscribe whose caller may leave before the reply: late grants are
    adopted when it comes and, the caller gone, disposed of at once (§7.5)."""

    def __init__(self, adopt: Callable[[JSONValue], T], discard: Callable[[T], object]) -> None:
        self._adopt = adopt
        self._discard = discard
        self._created: T | None = None
        self._abandoned = False

    def adopt(self, result: JSONValue) -> T:
        self._created = self._adopt(result)
        if self._abandoned:
            self._discard(self._created)
        return self._created

    def abandon(self) -> None:
        self._abandoned = True
        if self._created is not None:
            self._discard(self._created)
