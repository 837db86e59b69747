"""The channel hub: every queue of the Run/1 channels extension, owned by the host.

A component never talks to another component; it holds *endpoints* (opaque tokens) and
asks the host to ``channel/send`` or ``channel/next`` through them (PROTOCOL.md §7). All
invocations of one run tree share a :class:`ChannelHub`; each invocation sees it through
its own :class:`ChannelParty`, the table of tokens minted *for that invocation*. A token
is looked up only in its holder's table, so a string copied into ordinary data, or into
another invocation, grants nothing.

Rights move only by :meth:`ChannelParty.transfer`, which the host calls while admitting a
``flow/run-child`` or ``capability/call`` with a ``channels`` map: it checks every mapped
right and the callee's declared ports first and moves nothing unless all pass; the callee
gets freshly minted tokens. Operation joins and replays never reach it (the ledger
answers them), so a right never moves twice.

Everything is bounded by :class:`ChannelLimits`: a direct queue full of unread items holds
the next ``channel/send`` reply until the reader frees room (back-pressure on one writer,
never on the host); a broadcast reader that falls behind fails alone with a sticky
``LAGGED``; a source's lifetime bytes and an invocation's allocations are capped
(``RESOURCE_EXHAUSTED``). All of it runs on the host's event loop, one step at a time,
so no step needs a lock: a transfer is atomic because it never awaits.

When an invocation ends, :meth:`ChannelParty.conclude` settles what it held (§7.6): held
writers are sealed if the invocation succeeded and aborted if it did not, held receivers
are disposed, and the sources it created die with it.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, cast

import anyio

from runner import json1
from runner.json1 import JSONValue
from runner.protocol.codes import LOCAL_CODES, OperationError, WireCode

Delivery = Literal["direct", "broadcast"]
Direction = Literal["send", "receive"]
Identity = tuple[str, str, str]
"""A Channel Contract/1 source identity: (id, version, digest)."""

CHANNEL_METHODS: Final = frozenset(
    {
        "channel/create",
        "channel/subscribe",
        "channel/send",
        "channel/next",
        "channel/close",
        "channel/release",
    }
)


@dataclass(frozen=True)
class ChannelLimits:
    """Host-chosen channel bounds (the spec leaves every number to the host)."""

    queue_items: int = 64
    """Items a receiver may have waiting (a committed, unread item counts as one)."""
    queue_bytes: int = 64 << 20
    """Bytes of JSON a receiver may have waiting; one item is always admitted."""
    item_bytes: int = 16 << 20
    """The largest value one ``channel/send`` may carry (the frame bound)."""
    source_bytes: int = 4 << 30
    """Bytes one source may accept in its lifetime."""
    pending_sends: int = 64
    """``channel/send`` requests one direct source may hold waiting for room."""
    allocations: int = 1024
    """Endpoints, sources and subscriptions one invocation may create in its lifetime."""


class ItemSchema:
    """An item constraint: a compiled Schema/1 validator and its canonical bytes.

    Two nontrivial schemas are compatible only when canonically equal (§15.2: no
    subtyping); ``None`` stands for the generic item (omitted or ``true``).
    """

    __slots__ = ("canonical", "document", "first_error")

    def __init__(self, document: JSONValue, first_error: Callable[[JSONValue], object]) -> None:
        self.document = document
        self.canonical = json1.canonical(document)
        self.first_error = first_error

    @classmethod
    def compile(cls, document: JSONValue) -> ItemSchema | None:
        """``None`` for the generic schema; raises ``SchemaError`` outside Schema/1."""
        if document is True:
            return None
        from runner.host.capabilities.schema1 import compile_schema1

        return cls(document, compile_schema1(document, defs={}).first_error)


def compatible(a: ItemSchema | None, b: ItemSchema | None) -> bool:
    """Generic fits anything; two nontrivial item schemas must be canonically equal."""
    return a is None or b is None or a.canonical == b.canonical


@dataclass(frozen=True)
class PortSpec:
    """A callee's declared channel port (FLOW.md ``channels``), resolved for matching."""

    direction: Direction
    required: bool = True
    schema: ItemSchema | None = None
    identity: Identity | None = None
    delivery: Delivery | None = None
    start: Literal["beginning", "suffix"] | None = None


@dataclass(frozen=True)
class SourceType:
    """What ``channel/create`` named: an item schema and, for a contract, its identity."""

    schema: ItemSchema | None = None
    identity: Identity | None = None


ContractResolver = Callable[[str], SourceType]
"""Resolve a package-local ``./`` contract path of the invoking package, or raise
``OperationError``."""


# ----- the state ----------------------------------------------------------------------


@dataclass(eq=False)
class _PendingSend:
    value: JSONValue
    size: int
    done: anyio.Event = field(default_factory=anyio.Event)
    error: OperationError | None = None
    accepted: bool = False

    def finish(self, error: OperationError | None) -> None:
        self.accepted = error is None
        self.error = error
        self.done.set()


class _Source:
    """One single-writer sequence and its readers (one for direct, any for broadcast)."""

    def __init__(self, hub: ChannelHub, delivery: Delivery, kind: SourceType) -> None:
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
        self.writer: _Endpoint | None = None
        self.readers: list[_Receiver] = []
        self.pending: deque[_PendingSend] = deque()
        self.receiver_gone = False
        """Direct only: the receiver was disposed; sends and close are DISCONNECTED."""

    @property
    def open(self) -> bool:
        return not self.sealed and self.failure is None


class _Endpoint:
    """One right over a source. ``holder`` is the invocation whose table has its token."""

    direction: Direction = "send"

    def __init__(self, source: _Source) -> None:
        self.source = source
        self.holder: ChannelParty | None = None
        self.token = ""
        self.used = False
        """Claimed by first local use; only an unused right moves (§7.3)."""
        self.disposed = False
        self.status: dict[str, JSONValue] | None = None
        """The ``channel/release`` answer, kept so that a repeated release joins it."""
        self.schema: ItemSchema | None = None
        """A port's own item constraint, added when the right moved to that port."""


class _Receiver(_Endpoint):
    direction: Direction = "receive"

    def __init__(self, source: _Source, start: int) -> None:
        super().__init__(source)
        self.start = start
        self.queue: deque[tuple[int, JSONValue, int]] = deque()
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

    def push(self, sequence: int, value: JSONValue, size: int) -> None:
        self.queue.append((sequence, value, size))
        self.queued_bytes += size
        self._wake()

    def fail(self, error: OperationError) -> None:
        """A sticky failure: uncommitted items are dropped, the next read reports it."""
        if self.finished:
            return
        self.failure = error
        self.queue.clear()
        self.queued_bytes = 0
        self._wake()

    def _wake(self) -> None:
        if self.wake is not None:
            self.wake.set()


# ----- the hub and one invocation's view of it ------------------------------------------


class ChannelHub:
    """The channel state of one run tree: its limits and every live source."""

    def __init__(self, limits: ChannelLimits | None = None) -> None:
        self.limits = limits or ChannelLimits()
        self.sources: set[_Source] = set()
        """Live sources; empty again once every invocation of the tree has concluded."""

    def party(self, name: str) -> ChannelParty:
        """A fresh table for the invocation ``name`` (a run id, used in messages)."""
        return ChannelParty(self, name)

    @property
    def queued_items(self) -> int:
        """Items held in every receiver queue (a test and diagnostics figure)."""
        return sum(len(r.queue) for s in self.sources for r in s.readers)


class ChannelParty:
    """One invocation's channel rights, and the six ``channel/*`` methods as it calls them."""

    def __init__(self, hub: ChannelHub, name: str) -> None:
        self.hub = hub
        self.name = name
        self.endpoints: dict[str, _Endpoint] = {}
        self.broadcasts: dict[str, _Source] = {}
        """Source reference → broadcast source this invocation may subscribe to."""
        self.moved: set[str] = set()
        """Tokens whose right moved to a callee: releasing one is a no-op (§7.3: only the
        host knows whether a right moved, so a component may well dispose of it)."""
        self.owned: list[_Source] = []
        self.allocations = 0
        self.closed = False
        self.resolve_contract: ContractResolver | None = None
        """Set once the invocation's package is known; without it ``contract`` is refused."""

    # ----- dispatch ------------------------------------------------------------------

    async def handle(self, method: str, params: dict[str, JSONValue]) -> JSONValue:
        """Answer one ``channel/*`` request (params already shape-checked), or raise."""
        if self.closed:
            raise OperationError("OWNER_CLOSED", "this invocation's channels are closed")
        if method == "channel/send":
            await self.send(_ref(params, "endpoint"), params["value"])
            return None
        if method == "channel/next":
            return await self.next(_ref(params, "endpoint"))
        if method == "channel/create":
            return self.create(params)
        if method == "channel/subscribe":
            return self.subscribe(_ref(params, "source"))
        if method == "channel/close":
            self.close(_ref(params, "endpoint"))
            return None
        if method == "channel/release":
            return self.release(_ref(params, "endpoint"))
        raise OperationError("UNAVAILABLE", f"{method!r} is not a channel method")

    # ----- create / subscribe --------------------------------------------------------

    def create(self, params: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
        delivery: Delivery = "broadcast" if params.get("delivery") == "broadcast" else "direct"
        kind = self._source_type(params)
        self._allocate(2)
        source = _Source(self.hub, delivery, kind)
        self.hub.sources.add(source)
        self.owned.append(source)
        writer = source.writer = _Endpoint(source)
        send = self._mint(writer)
        if delivery == "direct":
            receiver = _Receiver(source, 1)
            source.readers.append(receiver)
            return {"send": send, "receive": self._mint(receiver)}
        reference = _token("src")
        self.broadcasts[reference] = source
        return {"send": send, "source": reference}

    def subscribe(self, reference: str) -> dict[str, JSONValue]:
        source = self.broadcasts.get(reference)
        if source is None:
            raise OperationError(
                "PERMISSION_DENIED",
                f"{reference!r} is not a broadcast source this invocation created",
            )
        if source.failure is not None:
            raise _again(source.failure)
        if source.sealed:
            raise OperationError("INVALID_INPUT", "the source is closed; nothing more will come")
        self._allocate(1)
        receiver = _Receiver(source, source.last + 1)
        source.readers.append(receiver)
        return self._mint(receiver)

    def _source_type(self, params: Mapping[str, JSONValue]) -> SourceType:
        if "contract" in params:
            path = params["contract"]
            assert isinstance(path, str)
            if self.resolve_contract is None:
                raise OperationError(
                    "INVALID_INPUT",
                    f"contract {path!r}: this invocation has no package to resolve it in",
                )
            return self.resolve_contract(path)
        if "schema" in params:
            from runner.host.capabilities.schema1 import SchemaError

            try:
                return SourceType(ItemSchema.compile(params["schema"]))
            except SchemaError as exc:
                raise OperationError(
                    "INVALID_INPUT", f"schema{exc.pointer}: {exc.code}: {exc.message}"
                ) from None
        return SourceType()

    def _allocate(self, count: int) -> None:
        limit = self.hub.limits.allocations
        if self.allocations + count > limit:
            raise OperationError(
                "RESOURCE_EXHAUSTED",
                f"this invocation has made its {limit} channel allocations",
            )
        self.allocations += count

    # ----- send / next / close / release ---------------------------------------------

    async def send(self, token: str, value: JSONValue) -> None:
        writer = self._endpoint(token, "send")
        writer.used = True
        source = writer.source
        if source.failure is not None:
            raise _again(source.failure)
        if source.sealed:
            raise OperationError("INVALID_INPUT", "the writer is closed; nothing more is accepted")
        if source.delivery == "direct" and source.receiver_gone:
            raise _disconnected()
        size = self._admit_value(source, writer, value)
        if source.delivery == "broadcast":
            self._accept(source, value, size)
            return
        receiver = source.readers[0]
        if not source.pending and receiver.has_room(size, self.hub.limits):
            self._accept(source, value, size)
            return
        if len(source.pending) >= self.hub.limits.pending_sends:
            raise OperationError(
                "RESOURCE_EXHAUSTED",
                f"{self.hub.limits.pending_sends} sends already wait for the reader",
            )
        pending = _PendingSend(value, size)
        source.pending.append(pending)
        source.pending_bytes += size
        try:
            await pending.done.wait()
        finally:
            if not pending.done.is_set():  # cancelled: withdraw the value, never half-send
                source.pending.remove(pending)
                source.pending_bytes -= size
        if pending.error is not None:
            raise _again(pending.error)

    async def next(self, token: str) -> dict[str, JSONValue]:
        receiver = self._endpoint(token, "receive")
        assert isinstance(receiver, _Receiver)
        receiver.used = True
        if receiver.disposed:
            raise OperationError("INVALID_INPUT", "the receiver was released")
        if receiver.reading:
            raise OperationError("INVALID_INPUT", "a channel/next is already pending here")
        source = receiver.source
        receiver.committed = False  # this read frees the room of the previous one
        self._pump(source)
        receiver.reading = True
        try:
            while True:
                if receiver.failure is not None:
                    raise _again(receiver.failure)
                if receiver.queue:
                    sequence, value, size = receiver.queue.popleft()
                    receiver.queued_bytes -= size
                    receiver.delivered = sequence
                    receiver.committed = True
                    return {"item": {"sequence": sequence, "value": value}}
                if source.sealed:
                    receiver.ended = True
                    return {"end": {"lastSequence": receiver.delivered}}
                receiver.wake = anyio.Event()
                await receiver.wake.wait()
                if receiver.disposed:
                    raise OperationError("CANCELLED", "the receiver was released during the read")
        finally:
            receiver.reading = False
            receiver.wake = None

    def close(self, token: str) -> None:
        writer = self._endpoint(token, "send")
        writer.used = True
        source = writer.source
        if source.sealed:
            return
        if source.failure is not None:
            raise _again(source.failure)
        if source.delivery == "direct" and source.receiver_gone:
            raise _disconnected()
        if source.pending:
            raise OperationError(
                "INVALID_INPUT", "sends are still waiting to be accepted; close after them"
            )
        _seal(source)

    def release(self, token: str) -> dict[str, JSONValue]:
        if token in self.moved:
            return {"status": "released"}
        endpoint = self._endpoint(token, None)
        endpoint.used = True
        if endpoint.status is None:
            endpoint.status = self._dispose(endpoint)
        return endpoint.status

    # ----- transfer ------------------------------------------------------------------

    def transfer(
        self,
        mapping: Mapping[str, str],
        ports: Mapping[str, PortSpec] | None,
        into: ChannelParty,
    ) -> dict[str, JSONValue]:
        """Move the mapped rights to ``into`` and return its grants, or move nothing.

        ``ports`` are the callee's declared ports; ``None`` when it declares none (an
        image without a package), in which case any mapping is accepted as it stands.
        Every check runs before the first right moves; there is no await in between.
        """
        staged: list[tuple[str, _Endpoint, ItemSchema | None]] = []
        for port, token in mapping.items():
            spec = None if ports is None else ports.get(port)
            staged.append((port, *self._stage(port, token, spec, ports)))
        if len({id(endpoint) for _, endpoint, _ in staged}) != len(staged):
            raise OperationError("INVALID_INPUT", "one endpoint is mapped to two ports")
        for port, endpoint, constraint in staged:  # ports of one call bound to one source
            for other, peer, theirs in staged:
                if peer.source is endpoint.source and not compatible(constraint, theirs):
                    raise OperationError(
                        "INVALID_INPUT",
                        f"channels.{port} and channels.{other}: the ports' item schemas differ",
                    )
        _check_required(ports, mapping)
        grants: dict[str, JSONValue] = {}
        for port, endpoint, constraint in staged:
            del self.endpoints[endpoint.token]
            self.moved.add(endpoint.token)
            if constraint is not None:
                endpoint.schema = constraint
            grants[port] = into._mint(endpoint)
        return grants

    def _stage(
        self,
        port: str,
        token: str,
        spec: PortSpec | None,
        ports: Mapping[str, PortSpec] | None,
    ) -> tuple[_Endpoint, ItemSchema | None]:
        where = f"channels.{port}"
        if token in self.broadcasts:
            raise OperationError(
                "INVALID_INPUT", f"{where}: a broadcast source reference is not an endpoint"
            )
        endpoint = self._endpoint(token, None, where=where)
        source = endpoint.source
        if endpoint.used or endpoint.disposed:
            raise OperationError(
                "INVALID_INPUT",
                f"{where}: the endpoint was already used here; only unused ones move",
            )
        if endpoint.direction == "send" and not source.open:
            raise OperationError("INVALID_INPUT", f"{where}: the source is closed or failed")
        if ports is None:
            return endpoint, None
        if spec is None:
            raise OperationError("INVALID_INPUT", f"{where}: the callee declares no such port")
        return endpoint, _match(where, endpoint, spec)

    # ----- ending --------------------------------------------------------------------

    def unfinished(self) -> list[str]:
        """Tokens of receivers read from and left before end, failure or release."""
        return [
            token
            for token, endpoint in self.endpoints.items()
            if isinstance(endpoint, _Receiver) and endpoint.used and not endpoint.finished
        ]

    def conclude(self, error: OperationError | None) -> None:
        """Settle everything this invocation held or created; ``error`` None = succeeded.

        Held writers are sealed when it succeeded, else their sources abort; held
        receivers are disposed; the sources it created end with it (a source still open
        then aborts: its owner is gone). Idempotent.
        """
        if self.closed:
            return
        self.closed = True
        abort = _abort_error(error, self.name)
        for endpoint in self.endpoints.values():
            if endpoint.disposed:
                continue
            source = endpoint.source
            if endpoint.direction == "send" and source.open:
                _drop_pending(source, OperationError("OWNER_CLOSED", "the sender's run ended"))
                if error is None:
                    _seal(source)
                else:
                    _fail(source, abort)
            endpoint.status = self._dispose(endpoint)
        for source in self.owned:
            if source.open:
                _fail(source, _abort_error(error, self.name, owner=True))
            for receiver in source.readers:
                receiver.disposed = True
                receiver.queue.clear()
                receiver._wake()
            self.hub.sources.discard(source)
        self.endpoints.clear()
        self.broadcasts.clear()
        self.moved.clear()
        self.owned.clear()

    # ----- internals -----------------------------------------------------------------

    def _mint(self, endpoint: _Endpoint) -> dict[str, JSONValue]:
        """A fresh token for ``endpoint`` in this table, and its grant object."""
        endpoint.token = _token("ep")
        endpoint.holder = self
        self.endpoints[endpoint.token] = endpoint
        source = endpoint.source
        grant: dict[str, JSONValue] = {
            "endpoint": endpoint.token,
            "direction": endpoint.direction,
            "delivery": source.delivery,
        }
        if source.identity is not None:
            id_, version, digest = source.identity
            grant["contract"] = {"id": id_, "version": version, "digest": digest}
        if isinstance(endpoint, _Receiver):
            grant["startSequence"] = endpoint.start
        return grant

    def _endpoint(
        self, token: str, direction: Direction | None, *, where: str = "endpoint"
    ) -> _Endpoint:
        endpoint = self.endpoints.get(token)
        if endpoint is None and token in self.moved:
            raise OperationError(
                "PERMISSION_DENIED", f"{where}: {token!r} was handed to a callee; it is theirs now"
            )
        if endpoint is None:
            raise OperationError(
                "PERMISSION_DENIED", f"{where}: this invocation holds no endpoint {token!r}"
            )
        if direction is not None and endpoint.direction != direction:
            raise OperationError(
                "PERMISSION_DENIED",
                f"{where}: {token!r} is a {endpoint.direction} endpoint; it grants no {direction}",
            )
        return endpoint

    def _admit_value(self, source: _Source, writer: _Endpoint, value: JSONValue) -> int:
        """Check a value against the source's bounds and constraints; a failure aborts it."""
        limits = self.hub.limits
        size = len(json1.dumps(value))
        committed = source.accepted_bytes + source.pending_bytes
        if size > limits.item_bytes or committed + size > limits.source_bytes:
            error = OperationError(
                "RESOURCE_EXHAUSTED",
                f"a {size}-byte value is over the channel's bounds "
                f"({limits.item_bytes} per item, {limits.source_bytes} per source)",
            )
            _fail(source, error)
            raise error
        constraints = [source.schema, writer.schema]
        if source.delivery == "direct":
            constraints.append(source.readers[0].schema)
        for schema in constraints:
            if schema is not None and (violation := schema.first_error(value)) is not None:
                error = OperationError(
                    "INVALID_INPUT",
                    f"the value does not fit the channel's item schema: {violation}",
                )
                _fail(source, error)
                raise error
        return size

    def _accept(self, source: _Source, value: JSONValue, size: int) -> None:
        """Number the value and hand it to the readers (broadcast: those with room)."""
        source.last += 1
        source.accepted_bytes += size
        limits = self.hub.limits
        for receiver in source.readers:
            if receiver.finished:
                continue
            if receiver.schema is not None and receiver.schema.first_error(value) is not None:
                receiver.fail(
                    OperationError("INVALID_INPUT", "a value does not fit this reader's schema")
                )
            elif source.delivery == "broadcast" and not receiver.has_room(size, limits):
                receiver.fail(
                    OperationError(
                        "LAGGED", f"this reader fell {limits.queue_items} items behind the writer"
                    )
                )
            else:
                receiver.push(source.last, value, size)

    def _pump(self, source: _Source) -> None:
        """Accept waiting direct sends, in arrival order, while the receiver has room."""
        if source.delivery != "direct":
            return
        receiver = source.readers[0]
        while source.pending and receiver.has_room(source.pending[0].size, self.hub.limits):
            pending = source.pending.popleft()
            source.pending_bytes -= pending.size
            self._accept(source, pending.value, pending.size)
            pending.finish(None)

    def _dispose(self, endpoint: _Endpoint) -> dict[str, JSONValue]:
        """Dispose one held endpoint and say how its stream stood (the release answer)."""
        source = endpoint.source
        endpoint.disposed = True
        if isinstance(endpoint, _Receiver):
            failure = endpoint.failure
            endpoint.queue.clear()
            endpoint.queued_bytes = 0
            endpoint._wake()  # a pending read is answered CANCELLED
            if source.delivery == "direct":
                source.receiver_gone = True
                _drop_pending(source, _disconnected())
            elif endpoint in source.readers:
                source.readers.remove(endpoint)
        else:
            failure = source.failure
            if source.open:
                _fail(source, _disconnected("the writer was released without closing"))
                return {"status": "released"}
        if failure is not None:
            status: dict[str, JSONValue] = {"status": "failed", "code": failure.code}
            if failure.details is not None:
                status["details"] = failure.details
            return status
        if source.sealed:
            return {"status": "ended", "lastSequence": source.last}
        return {"status": "released"}


# ----- helpers ------------------------------------------------------------------------


def _match(where: str, endpoint: _Endpoint, spec: PortSpec) -> ItemSchema | None:
    """Check one right against the port it goes to; return the port's added constraint."""
    source = endpoint.source
    if spec.direction != endpoint.direction:
        raise OperationError(
            "INVALID_INPUT",
            f"{where}: the port takes a {spec.direction} endpoint, not a {endpoint.direction} one",
        )
    if spec.delivery is not None and spec.delivery != source.delivery:
        raise OperationError(
            "INVALID_INPUT",
            f"{where}: the port takes {spec.delivery} delivery, not {source.delivery}",
        )
    if spec.identity is not None and spec.identity != source.identity:
        named = "an unnamed source" if source.identity is None else f"contract {source.identity[0]}"
        raise OperationError(
            "INVALID_INPUT", f"{where}: the port needs contract {spec.identity[0]}, got {named}"
        )
    constraint = spec.schema if spec.identity is None else None
    writer = source.writer
    bound = [
        source.schema,
        writer.schema if writer is not None else None,
        *(r.schema for r in source.readers if not r.finished),
    ]
    if not all(compatible(constraint, schema) for schema in bound):
        raise OperationError(
            "INVALID_INPUT", f"{where}: the port's item schema differs from the source's"
        )
    if isinstance(endpoint, _Receiver):
        if spec.start != "suffix" and endpoint.start != 1:
            raise OperationError(
                "INVALID_INPUT",
                f"{where}: the port reads from the beginning; this reader starts at "
                f"{endpoint.start}",
            )
        if constraint is not None:
            for _, value, _ in endpoint.queue:  # the queued prefix, before the constraint binds
                if constraint.first_error(value) is not None:
                    raise OperationError(
                        "INVALID_INPUT", f"{where}: a queued item does not fit the port's schema"
                    )
    return constraint


def _check_required(ports: Mapping[str, PortSpec] | None, mapping: Mapping[str, str]) -> None:
    missing = [p for p, spec in (ports or {}).items() if spec.required and p not in mapping]
    if missing:
        raise OperationError(
            "INVALID_INPUT",
            f"required channel port(s) {', '.join(sorted(missing))} are not connected",
        )


def required_ports(ports: Mapping[str, PortSpec] | None) -> list[str]:
    """The ports an invocation cannot start without (a root run has nobody to wire them)."""
    return sorted(p for p, spec in (ports or {}).items() if spec.required)


def _drop_pending(source: _Source, error: OperationError) -> None:
    """Answer every waiting send with ``error``; none of their values is accepted."""
    for pending in source.pending:
        pending.finish(error)
    source.pending.clear()
    source.pending_bytes = 0


def _seal(source: _Source) -> None:
    source.sealed = True
    for receiver in source.readers:
        receiver._wake()


def _fail(source: _Source, error: OperationError) -> None:
    """Abort an unsealed source: waiting sends and every unfinished reader fail with it."""
    if not source.open:
        return
    source.failure = error
    _drop_pending(source, error)
    for receiver in source.readers:
        receiver.fail(error)


def _abort_error(error: OperationError | None, name: str, *, owner: bool = False) -> OperationError:
    """What readers of an aborted source see: the writer side's own failure code."""
    if error is None:
        return _disconnected(f"invocation {name} ended; the sources it created are gone")
    code = "EXECUTION_FAILED" if error.code in LOCAL_CODES else cast(WireCode, error.code)
    whose = "that created the source" if owner else "holding the writer"
    return OperationError(code, f"the invocation {whose} failed ({error.code})")


def _disconnected(message: str = "the receiver was released") -> OperationError:
    return OperationError("DISCONNECTED", message)


def _again(error: OperationError) -> OperationError:
    """A fresh exception with a sticky failure's code, message and details."""
    return OperationError(error.code, error.message, error.details)


def _token(kind: str) -> str:
    """An unguessable reference in the wire-id grammar (128 random bits)."""
    return f"{kind}-{secrets.token_hex(16)}"


def _ref(params: Mapping[str, JSONValue], key: str) -> str:
    value = params[key]
    assert isinstance(value, str)
    return value


@dataclass
class ChannelOffer:
    """The channel side of admitting one invocation: its own table, and what a caller maps.

    ``giver`` is the calling invocation whose rights ``mapping`` (port → token) names;
    ``None`` for a root run, which nobody wires.
    """

    party: ChannelParty
    giver: ChannelParty | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)

    def admit(self, ports: Mapping[str, PortSpec] | None) -> dict[str, JSONValue]:
        """Move the mapped rights into :attr:`party` and return its grants, or raise."""
        if self.giver is None:
            _check_required(ports, {})
            return {}
        return self.giver.transfer(self.mapping, ports, self.party)


class HostEndpoint:
    """An endpoint as an in-process capability provider holds it.

    A ``capability/call`` whose ``channels`` map moves rights to a provider runs in a
    table of its own; the provider gets one of these per port and uses them like a
    component would: ``await send(v)`` / ``close()`` on a writer, ``async for v in``
    (or ``next()``) and ``release()`` on a receiver.
    """

    def __init__(self, party: ChannelParty, grant: Mapping[str, JSONValue]) -> None:
        self._party = party
        self.token = str(grant["endpoint"])
        self.direction = grant["direction"]
        self.delivery = grant["delivery"]
        self.start_sequence = grant.get("startSequence")

    async def send(self, value: JSONValue) -> None:
        await self._party.send(self.token, value)

    async def close(self) -> None:
        self._party.close(self.token)

    async def next(self) -> dict[str, JSONValue]:
        """``{"item": {"sequence", "value"}}`` or ``{"end": {"lastSequence"}}``."""
        return await self._party.next(self.token)

    async def release(self) -> dict[str, JSONValue]:
        return self._party.release(self.token)

    def __aiter__(self) -> HostEndpoint:
        return self

    async def __anext__(self) -> JSONValue:
        answer = await self.next()
        item = answer.get("item")
        if not isinstance(item, dict):
            raise StopAsyncIteration
        return item["value"]


def ports_of(declarations: Mapping[str, JSONValue]) -> dict[str, PortSpec]:
    """Ports declared inline (a capability method's ``channels``), resolved for matching.

    A port that names a ``contract`` needs a package to resolve the path in; a provider's
    descriptor has none, so a call that maps channels to such a method is refused.
    """
    ports: dict[str, PortSpec] = {}
    for name, spec in declarations.items():
        assert isinstance(spec, dict)
        if "contract" in spec:
            raise OperationError(
                "INVALID_INPUT",
                f"port {name!r} names a channel contract; this host resolves channel "
                "contracts only inside FLOW packages",
            )
        ports[name] = PortSpec(
            direction="receive" if spec["direction"] == "receive" else "send",
            required=spec.get("required", True) is not False,
            schema=ItemSchema.compile(spec["schema"]) if "schema" in spec else None,
            delivery=cast(Delivery | None, spec.get("delivery")),
            start=cast(Literal["beginning", "suffix"] | None, spec.get("start")),
        )
    return ports
