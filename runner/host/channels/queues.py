"""The channel hub's state: sources, the rights over them, waiting sends. All of it
belongs to one run tree's :class:`HubState` and changes only on the host's event loop."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, ClassVar, cast

import anyio

from runner.contracts.ports import Delivery, Direction, ItemSchema, SourceType
from runner.host.bounds import TreeBudget
from runner.json1 import JSONValue
from runner.protocol.codes import LOCAL_CODES, OperationError, WireCode

if TYPE_CHECKING:
    from pydantic import ConfigDict, Field
else:

    def Field(**constraints: int) -> object:
        """pydantic's ``Field``, imported only when the configuration validates
        :class:`ChannelLimits`: a hub with default limits never imports pydantic."""
        from pydantic import Field

        return Field(**constraints)


@dataclass(frozen=True)
class ChannelLimits:
    """Host-chosen channel bounds (the spec leaves every number to the host); the host
    configuration's ``[limits.channels]`` is validated as this class."""

    __pydantic_config__: ClassVar[ConfigDict] = {"extra": "forbid"}

    queue_items: Annotated[int, Field(ge=1, le=65_536)] = 64
    """Items a receiver may have waiting (a committed, unread item counts as one)."""
    queue_bytes: Annotated[int, Field(ge=1)] = 64 << 20
    """Bytes of JSON a receiver may have waiting; one item is always admitted."""
    item_bytes: Annotated[int, Field(ge=1, le=16 << 20)] = 16 << 20
    """The largest value one ``channel/send`` may carry (at most ``party.MAX_ITEM_BYTES``)."""
    source_bytes: Annotated[int, Field(ge=1)] = 4 << 30
    """Bytes one source may accept in its lifetime."""
    pending_sends: Annotated[int, Field(ge=1, le=64)] = 64
    """``channel/send`` requests one direct source may hold waiting for room."""
    allocations: Annotated[int, Field(ge=2, le=65_536)] = 1024
    """Endpoints, sources and subscriptions one invocation may create in its lifetime."""


class HubState:
    """One run tree's channel state: its limits, live sources and tree-wide budget; a source
    knows only this, not :class:`~runner.host.channels.party.ChannelHub`'s views."""

    def __init__(
        self, limits: ChannelLimits | None = None, budget: TreeBudget | None = None
    ) -> None:
        self.limits = limits or ChannelLimits()
        self.budget = budget or TreeBudget()
        """Charged with every queued item and every waiting send's value."""
        self.sources: set[Source] = set()
        """Live sources; empty again once every invocation of the tree has concluded."""


Checked = dict["Receiver", tuple[ItemSchema, bool]]
"""Readers whose own schema a value was checked against: that schema, and whether it fit
(a reader missing, or whose schema changed since, is checked on acceptance)."""


@dataclass(eq=False)
class PendingSend:
    value: JSONValue
    encoded: bytes
    """The value's ``json1.dumps``: its size, and what a ``channel/next`` answer carries."""
    checked: Checked
    done: anyio.Event = field(default_factory=anyio.Event)
    error: OperationError | None = None

    @property
    def size(self) -> int:
        return len(self.encoded)

    def finish(self, error: OperationError | None) -> None:
        self.error = error
        self.done.set()


class Source:
    """One single-writer sequence and its readers (one for direct, any for broadcast)."""

    def __init__(self, hub: HubState, delivery: Delivery, kind: SourceType) -> None:
        self.hub = hub
        self.delivery: Delivery = delivery
        self.identity = kind.identity
        self.schema = kind.schema
        self.last = 0
        """The last accepted sequence (0: none yet)."""
        self.sealed = False
        self.failure: OperationError | None = None
        self.accepted_bytes = 0
        self.pending_bytes = 0
        """Bytes of sends waiting for room: they count against the budget already."""
        self.writer = Endpoint(self)
        self.readers: list[Receiver] = []
        self.pending: deque[PendingSend] = deque()
        self.turns: deque[anyio.Event] = deque()
        """Sends checked in worker threads, in arrival order: each places its value when first."""
        self.receiver_gone = False
        """Direct only: the receiver was disposed; sends and close are DISCONNECTED."""

    @property
    def open(self) -> bool:
        return not self.sealed and self.failure is None

    def hold(self, pending: PendingSend) -> None:
        """Queue a send behind the reader; its value counts against the budgets."""
        self.pending.append(pending)
        self.pending_bytes += pending.size
        self.hub.budget.held += pending.size

    def let_go(self, pending: PendingSend) -> None:
        """A waiting send left the queue (accepted, withdrawn or dropped)."""
        self.pending_bytes -= pending.size
        self.hub.budget.held -= pending.size


class Endpoint:
    """One right over a source, held under ``token`` in one invocation's table."""

    direction: Direction = "send"

    def __init__(self, source: Source) -> None:
        self.source = source
        self.token = ""
        self.used = False
        """Claimed by first local use; only an unused right moves (§7.3)."""
        self.disposed = False
        self.status: dict[str, JSONValue] | None = None
        """The ``channel/release`` answer, kept so that a repeated release joins it."""
        self.schema: ItemSchema | None = None
        """A port's own item constraint, added when the right moved to that port."""


class Receiver(Endpoint):
    direction: Direction = "receive"

    def __init__(self, source: Source, start: int) -> None:
        super().__init__(source)
        self.start = start
        self.queue: deque[tuple[int, bytes]] = deque()
        """(sequence, encoding): a decoded value could take many times ``queue_bytes``."""
        self.queued_bytes = 0
        self.committed = False
        """An item was answered and no later read has freed its room yet."""
        self.delivered = start - 1
        self.failure: OperationError | None = None
        self.ended = False
        self.reading = False
        self.wake: anyio.Event | None = None

    @property
    def finished(self) -> bool:
        return self.ended or self.failure is not None or self.disposed

    def has_room(self, size: int, limits: ChannelLimits) -> bool:
        if len(self.queue) + self.committed >= limits.queue_items:
            return False
        return not self.queue or self.queued_bytes + size <= limits.queue_bytes

    def push(self, sequence: int, encoded: bytes) -> None:
        self.queue.append((sequence, encoded))
        self.queued_bytes += len(encoded)
        self.source.hub.budget.held += len(encoded)
        self._wake()

    def take(self) -> tuple[int, bytes]:
        """The first queued item, out of the queue and the tree's budget."""
        item = self.queue.popleft()
        self.queued_bytes -= len(item[1])
        self.source.hub.budget.held -= len(item[1])
        return item

    def drop(self) -> None:
        """Drop every queued item."""
        self.queue.clear()
        self.source.hub.budget.held -= self.queued_bytes
        self.queued_bytes = 0

    def dispose(self) -> None:
        """Drop the queue; a pending read is answered ``CANCELLED``."""
        self.disposed = True
        self.drop()
        self._wake()

    def fail(self, error: OperationError) -> None:
        """A sticky failure: uncommitted items are dropped, the next read reports it."""
        if self.finished:
            return
        self.failure = error
        self.drop()
        self._wake()

    def _wake(self) -> None:
        if self.wake is not None:
            self.wake.set()


def drop_pending(source: Source, error: OperationError) -> None:
    """Answer every waiting send with ``error``; none of their values is accepted."""
    for pending in source.pending:
        pending.finish(error)
    source.hub.budget.held -= source.pending_bytes
    source.pending.clear()
    source.pending_bytes = 0


def seal(source: Source) -> None:
    source.sealed = True
    for receiver in source.readers:
        receiver._wake()


def fail(source: Source, error: OperationError) -> None:
    """Abort an unsealed source: waiting sends and every unfinished reader fail with it."""
    if not source.open:
        return
    source.failure = error
    drop_pending(source, error)
    for receiver in source.readers:
        receiver.fail(error)


def abort_error(error: OperationError | None, name: str, *, owner: bool = False) -> OperationError:
    """What readers of an aborted source see: the writer side's own failure code."""
    if error is None:
        return disconnected(f"invocation {name} ended; the sources it created are gone")
    code = "EXECUTION_FAILED" if error.code in LOCAL_CODES else cast(WireCode, error.code)
    whose = "that created the source" if owner else "holding the writer"
    return OperationError(code, f"the invocation {whose} failed ({error.code})")


def disconnected(message: str = "the receiver was released") -> OperationError:
    return OperationError("DISCONNECTED", message)


def invalid(message: str) -> OperationError:
    return OperationError("INVALID_INPUT", message)


def again(error: OperationError) -> OperationError:
    """A fresh copy of a kept error: one with no traceback, cause or context, which would
    hold the raising call's frames and params for as long as it is kept."""
    return OperationError(error.code, error.message, error.details)


def new_token(kind: str) -> str:
    """An unguessable reference in the wire-id grammar (128 random bits); ``secrets`` is
    imported by the first channel made, not with the hub every run imports."""
    import secrets

    return f"{kind}-{secrets.token_hex(16)}"
