"""One run tree's channel hub, and one invocation's rights in it (PROTOCOL.md §7):
:class:`ChannelParty` answers the ``channel/*`` methods and moves rights to a callee."""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, cast

import anyio

from runner import json1
from runner.contracts.meter import Unfinished
from runner.contracts.ports import (
    ContractResolver,
    Delivery,
    Direction,
    ItemSchema,
    PortSpec,
    SourceType,
    check_required,
    compatible,
)
from runner.host.bounds import SLICE_UNITS, SMALL_REQUEST, offload
from runner.host.channels.queues import (
    Checked,
    Endpoint,
    HubState,
    PendingSend,
    Receiver,
    Source,
    abort_error,
    again,
    disconnected,
    drop_pending,
    fail,
    invalid,
    new_token,
    seal,
)
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError
from runner.protocol.frames import MAX_PAYLOAD_BYTES
from runner.protocol.names import MAX_WIRE_ID_BYTES

MAX_ITEM_BYTES = MAX_PAYLOAD_BYTES - len(
    b'{"jsonrpc":"2.0","id":"%s","result":{"item":{"sequence":%d,"value":}}}'
    % (b"i" * MAX_WIRE_ID_BYTES, 2**53 - 1)
)
"""The largest encoded value whose ``channel/next`` answer fits one frame for any reader:
a larger one is refused at its send, not lost at its read."""


class ChannelHub(HubState):
    """The channels of one run tree; each invocation sees them through its own party."""

    def party(self, name: str) -> ChannelParty:
        """A fresh table for the invocation ``name`` (a run id, used in messages)."""
        return ChannelParty(self, name)


class ChannelParty:
    """One invocation's channel rights, and the six ``channel/*`` methods as it calls them."""

    def __init__(self, hub: ChannelHub, name: str) -> None:
        self.hub = hub
        self.name = name
        self.endpoints: dict[str, Endpoint] = {}
        self.broadcasts: dict[str, Source] = {}
        """Source reference → broadcast source this invocation may subscribe to."""
        self.moved: set[str] = set()
        """Tokens moved to a callee: releasing one is a no-op (only the host knows, §7.3)."""
        self.owned: list[Source] = []
        self.allocations = 0
        self.closed = False
        self.resolve_contract: ContractResolver | None = None
        """Set once the invocation's package is known; without it ``contract`` is refused."""

    def answer(
        self, method: str, params: dict[str, JSONValue], size: int = 0
    ) -> bytes | Coroutine[Any, Any, bytes]:
        """A component's ``channel/*`` request (``params`` shape-checked, from a frame of
        ``size`` bytes): the encoded result if it needs no wait, else the coroutine that
        waits for it (await it at once, in the call's cancel scope); or OperationError.
        So most requests need no task: only a large send, or one whose schemas need more
        than a slice of work, is encoded and checked in a worker thread, and a create with
        a schema or a contract has its source type made there."""
        self._check_open()
        if method == "channel/send":
            return self._send(_ref(params, "endpoint"), params["value"], size)
        if method == "channel/next":
            return self._next(_ref(params, "endpoint"))
        if method == "channel/create":
            if params.get("schema", True) is not True or "contract" in params:
                return self._create_offloaded(params)
            return json1.dumps(self.create(params))
        if method == "channel/subscribe":
            return json1.dumps(self.subscribe(_ref(params, "source")))
        if method == "channel/close":
            self.close(_ref(params, "endpoint"))
            return b"null"
        if method == "channel/release":
            return json1.dumps(self.release(_ref(params, "endpoint")))
        raise OperationError("UNAVAILABLE", f"{method!r} is not a channel method")

    def _check_open(self) -> None:
        if self.closed:
            raise OperationError("OWNER_CLOSED", "this invocation's channels are closed")

    def create(
        self, params: Mapping[str, JSONValue], kind: SourceType | None = None
    ) -> dict[str, JSONValue]:
        """``channel/create``; ``kind`` is its source type if worked out already."""
        delivery: Delivery = "broadcast" if params.get("delivery") == "broadcast" else "direct"
        kind = kind or self._source_type(params)
        self._allocate(2)
        source = Source(self.hub, delivery, kind)
        self.hub.sources.add(source)
        self.owned.append(source)
        send = self._mint(source.writer)
        if delivery == "direct":
            receiver = Receiver(source, 1)
            source.readers.append(receiver)
            return {"send": send, "receive": self._mint(receiver)}
        reference = new_token("src")
        self.broadcasts[reference] = source
        return {"send": send, "source": reference}

    def subscribe(self, reference: str) -> dict[str, JSONValue]:
        source = self.broadcasts.get(reference)
        if source is None:
            raise _denied(f"{reference!r} is not a broadcast source this invocation created")
        _live(source, "the source is closed; nothing more will come")
        self._allocate(1)
        receiver = Receiver(source, source.last + 1)
        source.readers.append(receiver)
        return self._mint(receiver)

    async def _create_offloaded(self, params: Mapping[str, JSONValue]) -> bytes:
        """A ``channel/create`` whose item schema (up to 256 KiB) compiles, or whose
        contract is resolved (a descriptor parsed on first use), in a worker thread."""
        kind = await offload(self._source_type, params)
        self._check_open()
        return json1.dumps(self.create(params, kind))

    def _source_type(self, params: Mapping[str, JSONValue]) -> SourceType:
        if "contract" in params:
            path = _ref(params, "contract")
            if self.resolve_contract is None:
                raise invalid(f"contract {path!r}: this invocation has no package to resolve it in")
            return self.resolve_contract(path)
        if "schema" in params:
            return _schema_type(params["schema"])
        return SourceType()

    def _allocate(self, count: int) -> None:
        limit = self.hub.limits.allocations
        if self.allocations + count > limit:
            raise _exhausted(f"this invocation has made its {limit} channel allocations")
        self.allocations += count

    async def send(self, token: str, value: JSONValue) -> None:
        """A provider's send: checked away from the loop, as a large one of a component."""
        answer = self._send(token, value, MAX_PAYLOAD_BYTES)
        if not isinstance(answer, bytes):
            await answer

    def _send(self, token: str, value: JSONValue, size: int) -> bytes | Coroutine[Any, Any, bytes]:
        """A ``channel/send``: ``b"null"`` if accepted at once, else the coroutine that
        finishes it (checks in a worker thread, the wait for room)."""
        writer = self._claim(token, "send")
        source = writer.source
        _writable(source)
        if not source.turns and size <= SMALL_REQUEST:
            encoded = json1.dumps(value)  # at most 64 KiB of JSON: about a millisecond
            try:
                verdict = _check(value, _schemas(source, writer), SLICE_UNITS)
            except Unfinished:
                pass
            else:
                pending = self._place(source, value, encoded, *verdict)
                return b"null" if pending is None else self._accepted(source, pending)
        turn = anyio.Event()
        source.turns.append(turn)
        return self._send_in_turn(writer, value, turn)

    def _claim(self, token: str, direction: Direction | None) -> Endpoint:
        """The endpoint ``token`` names, marked used (a used right no longer moves)."""
        endpoint = self._endpoint(token, direction)
        endpoint.used = True
        return endpoint

    async def _send_in_turn(self, writer: Endpoint, value: JSONValue, turn: anyio.Event) -> bytes:
        """Encode and check ``value`` in a worker thread, then place it once every send
        that arrived before it on the source has placed its own (``turn``)."""
        source = writer.source
        try:
            schemas = _schemas(source, writer)
            encoded, violation, checked = await offload(_encode_and_check, value, schemas)
            while source.turns[0] is not turn:
                await source.turns[0].wait()
            _writable(source)
            pending = self._place(source, value, encoded, violation, checked)
        finally:
            source.turns.remove(turn)
            turn.set()
        return b"null" if pending is None else await self._accepted(source, pending)

    def _place(
        self,
        source: Source,
        value: JSONValue,
        encoded: bytes,
        violation: str | None,
        checked: Checked,
    ) -> PendingSend | None:
        """Accept a checked value, or queue it behind the reader (returned, for
        :meth:`_accepted`); a value over the bounds or the source's schemas fails the
        source, one the tree's budget cannot hold is refused."""
        limits = self.hub.limits
        size = len(encoded)
        committed = source.accepted_bytes + source.pending_bytes
        item_bytes = min(limits.item_bytes, MAX_ITEM_BYTES)
        if size > item_bytes or committed + size > limits.source_bytes:
            error = _exhausted(
                f"a {size}-byte value is over the channel's bounds "
                f"({item_bytes} per item, {limits.source_bytes} per source)"
            )
            fail(source, error)
            raise error
        if violation is not None:
            error = invalid(f"the value does not fit the channel's item schema: {violation}")
            fail(source, error)
            raise error
        if not self.hub.budget.fits(size):
            raise _exhausted(self.hub.budget.refusal(f"a {size}-byte channel item"))
        if source.delivery == "broadcast":
            self._accept(source, value, encoded, checked)
            return None
        receiver = source.readers[0]
        if not source.pending and receiver.has_room(size, limits):
            self._accept(source, value, encoded, checked)
            return None
        if len(source.pending) >= limits.pending_sends:
            raise _exhausted(f"{limits.pending_sends} sends already wait for the reader")
        pending = PendingSend(value, encoded, checked)
        source.hold(pending)
        return pending

    async def _accepted(self, source: Source, pending: PendingSend) -> bytes:
        """Wait until the reader made room for a queued send; cancelled, withdraw it."""
        try:
            await pending.done.wait()
        finally:
            if not pending.done.is_set():  # cancelled: withdraw the value, never half-send
                source.pending.remove(pending)
                source.let_go(pending)
        if pending.error is not None:
            raise again(pending.error)
        return b"null"

    async def next(self, token: str) -> dict[str, JSONValue]:
        """A provider's read: the answer a component would get, decoded."""
        encoded = self._next(token)
        if not isinstance(encoded, bytes):
            encoded = await encoded
        small = len(encoded) <= SMALL_REQUEST
        decoded = json1.loads(encoded) if small else await offload(json1.loads, encoded)
        return cast(dict[str, JSONValue], decoded)

    def _next(self, token: str) -> bytes | Coroutine[Any, Any, bytes]:
        """A ``channel/next`` on ``token``: its encoded answer, or the wait for it."""
        receiver = self._claim(token, "receive")
        assert isinstance(receiver, Receiver)
        if receiver.disposed:
            raise invalid("the receiver was released")
        if receiver.reading:
            raise invalid("a channel/next is already pending here")
        receiver.committed = False  # this read frees the room of the previous one
        self._pump(receiver.source)
        answer = self._read_now(receiver)
        return self._read_later(receiver) if answer is None else _encoded(answer)

    def _read_now(self, receiver: Receiver) -> tuple[int, bytes] | int | None:
        """The item (sequence, encoding), or at the end the last sequence; None: wait."""
        if receiver.failure is not None:
            raise again(receiver.failure)
        if receiver.queue:
            item = receiver.take()
            receiver.delivered = item[0]
            receiver.committed = True
            return item
        if receiver.source.sealed:
            receiver.ended = True
            return receiver.delivered
        return None

    async def _read_later(self, receiver: Receiver) -> bytes:
        """Wait for the read's answer, encoded (one read at a time per receiver)."""
        receiver.reading = True
        try:
            while True:
                receiver.wake = anyio.Event()
                await receiver.wake.wait()
                if receiver.disposed:
                    raise OperationError("CANCELLED", "the receiver was released during the read")
                answer = self._read_now(receiver)
                if answer is not None:
                    return _encoded(answer)
        finally:
            receiver.reading = False
            receiver.wake = None

    def close(self, token: str) -> None:
        source = self._claim(token, "send").source
        if source.sealed:
            return
        _writable(source)
        if source.pending:
            raise invalid("sends are still waiting to be accepted; close after them")
        seal(source)

    def release(self, token: str) -> dict[str, JSONValue]:
        if token in self.moved:
            return {"status": "released"}
        endpoint = self._claim(token, None)
        if endpoint.status is None:
            endpoint.status = self._dispose(endpoint)
        return endpoint.status

    def transfer(
        self,
        mapping: Mapping[str, str],
        ports: Mapping[str, PortSpec] | None,
        into: ChannelParty,
    ) -> dict[str, JSONValue]:
        """Move the mapped rights to ``into`` and return its grants, or move nothing: every
        check runs first, with no await. ``ports`` are the callee's declared ports; with
        ``None`` (an image without a package) any mapping is taken as it stands."""
        staged = [(port, *self._stage(port, token, ports)) for port, token in mapping.items()]
        if len({id(endpoint) for _, endpoint, _ in staged}) != len(staged):
            raise invalid("one endpoint is mapped to two ports")
        for port, endpoint, constraint in staged:  # ports of one call bound to one source
            for other, peer, theirs in staged:
                if peer.source is endpoint.source and not compatible(constraint, theirs):
                    raise invalid(
                        f"channels.{port} and channels.{other}: the ports' item schemas differ"
                    )
        check_required(ports, mapping)
        grants: dict[str, JSONValue] = {}
        for port, endpoint, constraint in staged:
            del self.endpoints[endpoint.token]
            self.moved.add(endpoint.token)
            if constraint is not None:
                endpoint.schema = constraint
            grants[port] = into._mint(endpoint)
        return grants

    def _stage(
        self, port: str, token: str, ports: Mapping[str, PortSpec] | None
    ) -> tuple[Endpoint, ItemSchema | None]:
        where = f"channels.{port}"
        if token in self.broadcasts:
            raise invalid(f"{where}: a broadcast source reference is not an endpoint")
        endpoint = self._endpoint(token, None, where=where)
        source = endpoint.source
        if endpoint.used or endpoint.disposed:
            raise invalid(f"{where}: the endpoint was already used here; only unused ones move")
        if endpoint.direction == "send" and not source.open:
            raise invalid(f"{where}: the source is closed or failed")
        if ports is None:
            return endpoint, None
        spec = ports.get(port)
        if spec is None:
            raise invalid(f"{where}: the callee declares no such port")
        return endpoint, _match(where, endpoint, spec)

    def unfinished(self) -> list[str]:
        """Tokens of receivers read from and left before end, failure or release."""
        return [
            token
            for token, endpoint in self.endpoints.items()
            if isinstance(endpoint, Receiver) and endpoint.used and not endpoint.finished
        ]

    def conclude(self, error: OperationError | None) -> None:
        """Settle what this invocation held or created (``error`` None: it succeeded), once:
        held writers are sealed if it succeeded, else their sources abort; held receivers
        are disposed; the sources it created end with it (aborted if still open)."""
        if self.closed:
            return
        self.closed = True
        abort = abort_error(error, self.name)
        for endpoint in self.endpoints.values():
            if endpoint.disposed:
                continue
            source = endpoint.source
            if endpoint.direction == "send" and source.open:
                drop_pending(source, OperationError("OWNER_CLOSED", "the sender's run ended"))
                if error is None:
                    seal(source)
                else:
                    fail(source, abort)
            endpoint.status = self._dispose(endpoint)
        for source in self.owned:
            if source.open:
                fail(source, abort_error(error, self.name, owner=True))
            for receiver in source.readers:
                receiver.dispose()
            self.hub.sources.discard(source)
        self.endpoints.clear()
        self.broadcasts.clear()
        self.moved.clear()
        self.owned.clear()

    def _mint(self, endpoint: Endpoint) -> dict[str, JSONValue]:
        """A fresh token for ``endpoint`` in this table, and its grant object."""
        endpoint.token = new_token("ep")
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
        if isinstance(endpoint, Receiver):
            grant["startSequence"] = endpoint.start
        return grant

    def _endpoint(
        self, token: str, direction: Direction | None, *, where: str = "endpoint"
    ) -> Endpoint:
        endpoint = self.endpoints.get(token)
        if endpoint is None and token in self.moved:
            raise _denied(f"{where}: {token!r} was handed to a callee; it is theirs now")
        if endpoint is None:
            raise _denied(f"{where}: this invocation holds no endpoint {token!r}")
        if direction is not None and endpoint.direction != direction:
            kind = endpoint.direction
            raise _denied(f"{where}: {token!r} is a {kind} endpoint; it grants no {direction}")
        return endpoint

    def _accept(self, source: Source, value: JSONValue, encoded: bytes, checked: Checked) -> None:
        """Number the value and queue it for the readers (broadcast: those with room)."""
        size = len(encoded)
        source.last += 1
        source.accepted_bytes += size
        limits, budget = self.hub.limits, self.hub.budget
        for receiver in source.readers:
            if receiver.finished:
                continue
            if not _fits_reader(receiver, value, checked):
                receiver.fail(invalid("a value does not fit this reader's schema"))
            elif source.delivery == "broadcast" and not receiver.has_room(size, limits):
                behind = f"this reader fell {limits.queue_items} items behind the writer"
                receiver.fail(OperationError("LAGGED", behind))
            elif source.delivery == "broadcast" and not budget.fits(size):
                receiver.fail(OperationError("LAGGED", budget.refusal("this reader's next item")))
            else:
                receiver.push(source.last, encoded)

    def _pump(self, source: Source) -> None:
        """Accept waiting direct sends, in arrival order, while the receiver has room."""
        if source.delivery != "direct":
            return
        receiver = source.readers[0]
        while source.pending and receiver.has_room(source.pending[0].size, self.hub.limits):
            pending = source.pending.popleft()
            source.let_go(pending)
            self._accept(source, pending.value, pending.encoded, pending.checked)
            pending.finish(None)

    def _dispose(self, endpoint: Endpoint) -> dict[str, JSONValue]:
        """Dispose one held endpoint and say how its stream stood (the release answer)."""
        source = endpoint.source
        if isinstance(endpoint, Receiver):
            failure = endpoint.failure
            endpoint.dispose()
            if source.delivery == "direct":
                source.receiver_gone = True
                drop_pending(source, disconnected())
            elif endpoint in source.readers:
                source.readers.remove(endpoint)
        else:
            endpoint.disposed = True
            failure = source.failure
            if source.open:
                fail(source, disconnected("the writer was released without closing"))
                return {"status": "released"}
        if failure is not None:
            status: dict[str, JSONValue] = {"status": "failed", "code": failure.code}
            if failure.details is not None:
                status["details"] = failure.details
            return status
        if source.sealed:
            return {"status": "ended", "lastSequence": source.last}
        return {"status": "released"}


def _schema_type(schema: JSONValue) -> SourceType:
    """The source type of a ``channel/create``'s item ``schema``, compiled."""
    from runner.contracts.schema1 import SchemaError  # loaded with the first schema

    try:
        return SourceType(ItemSchema.compile(schema))
    except SchemaError as exc:
        raise invalid(f"schema{exc.pointer}: {exc.code}: {exc.message}") from None


def _live(source: Source, sealed: str) -> None:
    """Raise the source's failure, or ``INVALID_INPUT`` saying ``sealed`` if it is sealed."""
    if source.failure is not None:
        raise again(source.failure)
    if source.sealed:
        raise invalid(sealed)


def _writable(source: Source) -> None:
    """Raise what a send to ``source`` gets if it cannot take a value now."""
    _live(source, "the writer is closed; nothing more is accepted")
    if source.delivery == "direct" and source.receiver_gone:
        raise disconnected()


Schemas = tuple[Delivery, list[ItemSchema], list[tuple[Receiver, ItemSchema]]]
"""What a send is checked against, taken on the loop: the delivery; the source's and the
writer's schemas (a misfit fails the source); live readers' own schemas (a misfit fails
a broadcast reader alone, a direct source whole)."""


def _schemas(source: Source, writer: Endpoint) -> Schemas:
    constraints = [schema for schema in (source.schema, writer.schema) if schema is not None]
    readers = [(r, r.schema) for r in source.readers if r.schema is not None and not r.finished]
    return source.delivery, constraints, readers


def _check(
    value: JSONValue, schemas: Schemas, units: int | None = None
) -> tuple[str | None, Checked]:
    """The violation that fails the source (or None) and how ``value`` fits each reader;
    given ``units``, each schema may spend only that many (else :class:`Unfinished`)."""
    delivery, constraints, readers = schemas
    if units is not None and len(constraints) + len(readers) > 3:
        raise Unfinished(units)  # many slices would hold the loop as long as one check
    limit: tuple[int, ...] = () if units is None else (units,)
    for schema in constraints:
        violation = schema.first_error(value, *limit)
        if violation is not None:
            return str(violation), {}
    checked: Checked = {}
    for receiver, schema in readers:
        violation = schema.first_error(value, *limit)
        if violation is not None and delivery == "direct":
            return str(violation), {}
        checked[receiver] = (schema, violation is None)
    return None, checked


def _encode_and_check(value: JSONValue, schemas: Schemas) -> tuple[bytes, str | None, Checked]:
    """A large or costly send's work, for a worker thread (it only reads its arguments)."""
    return (json1.dumps(value), *_check(value, schemas))


def _fits_reader(receiver: Receiver, value: JSONValue, checked: Checked) -> bool:
    """Whether the value fits ``receiver``'s own schema: as checked before, or now if its
    schema was added since (a right moved to a port with one while the value waited)."""
    schema = receiver.schema
    if schema is None:
        return True
    seen = checked.get(receiver)
    if seen is not None and seen[0] is schema:
        return seen[1]
    return schema.first_error(value) is None


def _match(where: str, endpoint: Endpoint, spec: PortSpec) -> ItemSchema | None:
    """Check one right against the port it goes to; return the port's added constraint."""
    source = endpoint.source
    if spec.direction != endpoint.direction:
        raise invalid(
            f"{where}: the port takes a {spec.direction} endpoint, not a {endpoint.direction} one"
        )
    if spec.delivery is not None and spec.delivery != source.delivery:
        raise invalid(f"{where}: the port takes {spec.delivery} delivery, not {source.delivery}")
    if spec.identity is not None and spec.identity != source.identity:
        named = "an unnamed source" if source.identity is None else f"contract {source.identity[0]}"
        raise invalid(f"{where}: the port needs contract {spec.identity[0]}, got {named}")
    constraint = spec.schema if spec.identity is None else None
    _, constraints, readers = _schemas(source, source.writer)
    bound = [*constraints, *(schema for _, schema in readers)]
    if not all(compatible(constraint, schema) for schema in bound):
        raise invalid(f"{where}: the port's item schema differs from the source's")
    if isinstance(endpoint, Receiver):
        if spec.start != "suffix" and endpoint.start != 1:
            raise invalid(
                f"{where}: the port reads from the beginning; this reader starts at "
                f"{endpoint.start}"
            )
        if constraint is not None and endpoint.queue:
            _check_prefix(where, constraint, endpoint.queue)
    return constraint


def _check_prefix(where: str, constraint: ItemSchema, queue: Iterable[tuple[int, bytes]]) -> None:
    """Check a moving receiver's queued items against its new port's schema. A transfer
    never waits, so this is done on the loop in one slice (:data:`SMALL_REQUEST` bytes,
    :data:`SLICE_UNITS` work units); a prefix that needs more is ``RESOURCE_EXHAUSTED``."""
    items = list(queue)
    size = sum(len(encoded) for _, encoded in items)
    units = max(SLICE_UNITS // len(items), 1)
    costly = _exhausted(
        f"{where}: the receiver's {len(items)} queued item(s) ({size} bytes) are more than "
        "the host checks against the port's schema during a transfer; move the receiver "
        "before items are sent to it, or read them first"
    )
    if size > SMALL_REQUEST:
        raise costly
    for _, encoded in items:
        try:
            violation = constraint.first_error(json1.loads(encoded), units)
        except Unfinished:
            raise costly from None
        if violation is not None:
            raise invalid(f"{where}: a queued item does not fit the port's schema")


def _encoded(answer: tuple[int, bytes] | int) -> bytes:
    """A ``channel/next`` result as ``json1.dumps`` writes it, the item's encoding spliced in."""
    if isinstance(answer, int):
        return b'{"end":{"lastSequence":%d}}' % answer
    sequence, encoded = answer
    return b'{"item":{"sequence":%d,"value":%b}}' % (sequence, encoded)


def _denied(message: str) -> OperationError:
    return OperationError("PERMISSION_DENIED", message)


def _exhausted(message: str) -> OperationError:
    return OperationError("RESOURCE_EXHAUSTED", message)


def _ref(params: Mapping[str, JSONValue], key: str) -> str:
    value = params[key]
    assert isinstance(value, str)
    return value
