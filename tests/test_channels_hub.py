"""The channel hub on its own: no containers, no processes (PROTOCOL.md §7, §15.2;
HOST-CASES §1.10 CH-01/CH-05/CH-07, §1.11 BC-01…BC-03).

Every test drives :class:`ChannelParty` methods directly, as the session would after
shape-checking a ``channel/*`` request. Waiting is shown with
``anyio.wait_all_tasks_blocked`` (everything that can run has run) rather than sleeps.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

from runner import json1
from runner.contracts.ports import ItemSchema, PortSpec, SourceType
from runner.host.channels import ChannelHub, ChannelLimits, ChannelParty
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

WIRE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
UPDATES = ("https://example.org/c/updates", "1.0.0", "sha256:" + "0" * 64)
OTHER = ("https://example.org/c/other", "1.0.0", "sha256:" + "1" * 64)
STRING = ItemSchema.compile({"type": "string"})
INTEGER = ItemSchema.compile({"type": "integer"})


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


# ----- helpers ------------------------------------------------------------------------


def bounded(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Fail, rather than hang, if a test waits for something that never comes."""

    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> None:
        with anyio.fail_after(5):
            await test(*args, **kwargs)

    return run


@contextmanager
def fails(code: str) -> Iterator[None]:
    """The block raises an OperationError with exactly ``code``."""
    with pytest.raises(OperationError) as info:
        yield
    assert info.value.code == code, f"expected {code}, got {info.value}"


def direct(party: ChannelParty, **params: JSONValue) -> tuple[str, str]:
    grants: Any = party.create(params)
    return grants["send"]["endpoint"], grants["receive"]["endpoint"]


def broadcast(party: ChannelParty, **params: JSONValue) -> tuple[str, str]:
    grants: Any = party.create({"delivery": "broadcast", **params})
    return grants["send"]["endpoint"], grants["source"]


def token(grant: Any) -> str:
    return str(grant["endpoint"])


def item(sequence: int, value: JSONValue) -> dict[str, JSONValue]:
    return {"item": {"sequence": sequence, "value": value}}


def end(last: int) -> dict[str, JSONValue]:
    return {"end": {"lastSequence": last}}


async def drain(party: ChannelParty, reader: str) -> tuple[list[JSONValue], JSONValue]:
    """Read to the end: the values and the end's lastSequence (contiguity checked)."""
    values: list[JSONValue] = []
    last: int | None = None
    while True:
        answer: Any = await party.next(reader)
        if "end" in answer:
            return values, answer["end"]["lastSequence"]
        sequence = answer["item"]["sequence"]
        assert last is None or sequence == last + 1, "sequences must be contiguous"
        last = sequence
        values.append(answer["item"]["value"])


async def read_out(party: ChannelParty, reader: str) -> tuple[list[JSONValue], JSONValue]:
    """Read to a terminal: the values and the end's lastSequence or the failure's code."""
    values: list[JSONValue] = []
    with anyio.fail_after(5):
        while True:
            try:
                answer: Any = await party.next(reader)
            except OperationError as exc:
                return values, exc.code
            if "end" in answer:
                return values, answer["end"]["lastSequence"]
            values.append(answer["item"]["value"])


async def handle(party: ChannelParty, method: str, params: dict[str, JSONValue]) -> JSONValue:
    """A ``channel/*`` request as the driver makes it, its answer decoded."""
    answer = party.answer(method, params)
    return json1.loads(answer if isinstance(answer, bytes) else await answer)


def conclude_all(hub: ChannelHub, *parties: ChannelParty) -> None:
    """Conclude callees first, then owners; the hub holds no source afterwards."""
    for party in parties:
        party.conclude(None)
    assert hub.sources == set()


def named(schema: ItemSchema | None = None, identity: tuple[str, str, str] = UPDATES) -> Any:
    """A contract resolver that knows one descriptor path, ``./updates.json``."""

    def resolve(path: str) -> SourceType:
        if path != "./updates.json":
            raise OperationError("INVALID_INPUT", f"no contract {path}")
        return SourceType(schema, identity)

    return resolve


# ----- direct: create, sequences, end -------------------------------------------------


def test_direct_create_grants_are_exactly_the_spec_shapes() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    grants: Any = a.create({})
    assert set(grants) == {"send", "receive"}
    send, receive = grants["send"], grants["receive"]
    assert send == {"endpoint": send["endpoint"], "direction": "send", "delivery": "direct"}
    assert receive == {
        "endpoint": receive["endpoint"],
        "direction": "receive",
        "delivery": "direct",
        "startSequence": 1,
    }
    assert send["endpoint"] != receive["endpoint"]
    explicit: Any = a.create({"delivery": "direct"})
    assert explicit["send"]["delivery"] == "direct" and "contract" not in explicit["receive"]
    typed: Any = a.create({"schema": {"type": "string"}})
    assert "contract" not in typed["send"] and "contract" not in typed["receive"]
    conclude_all(hub, a)


def test_named_create_carries_the_same_contract_on_both_grants() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    with fails("INVALID_INPUT"):  # no package to resolve a contract in
        a.create({"contract": "./updates.json"})
    assert hub.sources == set() and a.endpoints == {}
    a.resolve_contract = named(STRING)
    grants: Any = a.create({"contract": "./updates.json"})
    contract = {"id": UPDATES[0], "version": UPDATES[1], "digest": UPDATES[2]}
    assert grants["send"]["contract"] == contract
    assert grants["receive"]["contract"] == contract
    assert set(grants["send"]) == {"endpoint", "direction", "delivery", "contract"}
    assert grants["receive"]["startSequence"] == 1
    writer = token(grants["send"])
    source_ref: Any = a.create({"contract": "./updates.json", "delivery": "broadcast"})
    subscription: Any = a.subscribe(source_ref["source"])
    assert subscription["contract"] == contract and source_ref["send"]["contract"] == contract
    with fails("INVALID_INPUT"):  # the contract's item schema holds every value
        anyio.run(a.send, writer, 7)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_create_resolves_its_contract_off_the_event_loop() -> None:
    # The first use of a descriptor no port declares parses it (up to 256 KiB).
    hub = ChannelHub()
    a = hub.party("run:a")
    resolved_in: list[threading.Thread] = []
    known: Callable[[str], SourceType] = named(STRING)

    def resolve(path: str) -> SourceType:
        resolved_in.append(threading.current_thread())
        return known(path)

    a.resolve_contract = resolve
    grants: Any = await handle(a, "channel/create", {"contract": "./updates.json"})
    assert grants["send"]["contract"]["id"] == UPDATES[0]
    assert resolved_in and resolved_in[0] is not threading.current_thread()
    conclude_all(hub, a)


def test_create_with_an_invalid_schema_allocates_nothing() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    with fails("INVALID_INPUT"):
        a.create({"schema": {"type": "no-such-type"}})
    assert hub.sources == set() and a.endpoints == {} and a.allocations == 0


@pytest.mark.anyio
@bounded
async def test_direct_sequences_start_at_one_and_end_reports_last_delivered() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    for value in ["one", {"two": [2]}, None]:
        assert await a.send(writer, value) is None
    assert await a.next(reader) == item(1, "one")
    assert await a.next(reader) == item(2, {"two": [2]})
    assert await a.next(reader) == item(3, None)
    a.close(writer)
    assert await a.next(reader) == end(3)
    assert await a.next(reader) == end(3), "end is repeated on later reads"
    assert await a.next(reader) == end(3)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_end_with_nothing_delivered_reports_zero() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    a.close(writer)
    assert await a.next(reader) == end(0)
    assert await a.next(reader) == end(0)
    assert a.release(reader) == {"status": "ended", "lastSequence": 0}
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_blocked_read_is_woken_by_a_send_and_by_close() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    answers: list[JSONValue] = []

    async def read_twice() -> None:
        answers.append(await a.next(reader))
        answers.append(await a.next(reader))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_twice)
        await anyio.wait_all_tasks_blocked()
        assert answers == []
        await a.send(writer, "x")
        await anyio.wait_all_tasks_blocked()
        assert answers == [item(1, "x")]
        a.close(writer)
    assert answers == [item(1, "x"), end(1)]
    conclude_all(hub, a)


# ----- back-pressure ------------------------------------------------------------------


@pytest.mark.anyio
@bounded
async def test_a_full_queue_holds_the_send_until_a_read_frees_room() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=2))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, "v1")
    await a.send(writer, "v2")
    with anyio.move_on_after(0.02) as scope:
        await a.send(writer, "withdrawn")
    assert scope.cancelled_caught, "two unread items fill a two-item queue"
    assert await a.next(reader) == item(1, "v1")
    accepted = anyio.Event()

    async def third() -> None:
        await a.send(writer, "v3")
        accepted.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(third)
        await anyio.wait_all_tasks_blocked()
        assert not accepted.is_set(), "the committed v1 occupies room until the next read"
        assert await a.next(reader) == item(2, "v2")
        await anyio.wait_all_tasks_blocked()
        assert accepted.is_set(), "the read of v2 freed v1's room"
        with anyio.move_on_after(0.02) as scope:  # v2 (committed) and v3 fill it again
            await a.send(writer, "withdrawn")
        assert scope.cancelled_caught
    assert await a.next(reader) == item(3, "v3")
    a.close(writer)
    assert await a.next(reader) == end(3)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_waiting_sends_are_accepted_in_arrival_order() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=1))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, "v0")
    done: list[str] = []

    async def send(value: str) -> None:
        await a.send(writer, value)
        done.append(value)

    async with anyio.create_task_group() as tg:
        for value in ["v1", "v2", "v3"]:
            tg.start_soon(send, value)
            await anyio.wait_all_tasks_blocked()  # fixes the arrival order
        assert done == []
        with fails("INVALID_INPUT"):  # close is refused while sends wait
            a.close(writer)
        got = [await a.next(reader) for _ in range(4)]
    assert got == [item(1, "v0"), item(2, "v1"), item(3, "v2"), item(4, "v3")]
    assert done == ["v1", "v2", "v3"]
    a.close(writer)
    assert await a.next(reader) == end(4)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_cancelled_waiting_send_withdraws_its_value() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=1))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, "v1")
    with anyio.move_on_after(0.05) as scope:
        await a.send(writer, "withdrawn")
    assert scope.cancelled_caught, "the send waited for room"
    a.close(writer)  # nothing waits any more, so close is allowed
    values, last = await drain(a, reader)
    assert values == ["v1"] and last == 1
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_withdrawn_send_leaves_no_gap_before_later_sends() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=1))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, "v1")
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def withdrawn() -> None:
            with scope:
                await a.send(writer, "withdrawn")

        tg.start_soon(withdrawn)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(a.send, writer, "kept")
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert await a.next(reader) == item(1, "v1")
        assert await a.next(reader) == item(2, "kept")
    a.close(writer)
    assert await a.next(reader) == end(2)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_too_many_waiting_sends_are_resource_exhausted() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=1, pending_sends=2))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, 1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.send, writer, 2)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(a.send, writer, 3)
        await anyio.wait_all_tasks_blocked()
        with fails("RESOURCE_EXHAUSTED"):
            await a.send(writer, 4)
        values = [await a.next(reader) for _ in range(3)]
    assert values == [item(1, 1), item(2, 2), item(3, 3)], "the refusal did not fail the source"
    a.close(writer)
    assert await a.next(reader) == end(3)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_queue_bytes_bound_holds_sends_in_arrival_order() -> None:
    big = "x" * 40  # 42 bytes of JSON
    hub = ChannelHub(ChannelLimits(queue_bytes=50))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, big)  # an empty queue always admits one item
    order: list[str] = []

    async def send(value: str) -> None:
        await a.send(writer, value)
        order.append(value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(send, big + "2")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(send, "s")  # 3 bytes would fit, but waits behind the big one
        await anyio.wait_all_tasks_blocked()
        assert order == []
        assert await a.next(reader) == item(1, big)
        assert await a.next(reader) == item(2, big + "2")
        assert await a.next(reader) == item(3, "s")
    assert order == [big + "2", "s"]
    a.close(writer)
    assert await a.next(reader) == end(3)
    conclude_all(hub, a)


# ----- one outstanding read -----------------------------------------------------------


@pytest.mark.anyio
@bounded
async def test_a_second_concurrent_next_is_invalid_input() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    answers: list[JSONValue] = []

    async def read() -> None:
        answers.append(await a.next(reader))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        with fails("INVALID_INPUT"):
            await a.next(reader)
        await a.send(writer, "only")
    assert answers == [item(1, "only")], "the first read was not disturbed"
    a.close(writer)
    assert await a.next(reader) == end(1)
    conclude_all(hub, a)


# ----- release ------------------------------------------------------------------------


@pytest.mark.anyio
@bounded
async def test_release_before_end_is_released_and_repeats() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, 1)
    assert await a.next(reader) == item(1, 1)
    assert a.release(reader) == {"status": "released"}
    assert a.release(reader) == {"status": "released"}
    with fails("INVALID_INPUT"):
        await a.next(reader)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_repeated_release_joins_the_first_answer_after_the_source_moved_on() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, source = broadcast(a)
    reader = token(a.subscribe(source))
    await a.send(writer, 1)
    assert a.release(reader) == {"status": "released"}
    a.close(writer)  # the source ends after the release: the answer stays "released"
    assert a.release(reader) == {"status": "released"}
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_release_after_close_is_ended_with_last_sequence() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    for value in range(3):
        await a.send(writer, value)
    a.close(writer)
    assert await a.next(reader) == item(1, 0)
    status = a.release(reader)
    assert status == {"status": "ended", "lastSequence": 3}
    assert a.release(reader) == status
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_release_after_a_failure_reports_the_sticky_code() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=1))
    a = hub.party("run:a")
    writer, source = broadcast(a)
    reader = token(a.subscribe(source))
    await a.send(writer, 1)
    await a.send(writer, 2)  # the reader is over its one item: LAGGED
    with fails("LAGGED"):
        await a.next(reader)
    with fails("LAGGED"):
        await a.next(reader)
    a.close(writer)
    with fails("LAGGED"):  # sealing later does not turn the failure into an end
        await a.next(reader)
    assert a.release(reader) == {"status": "failed", "code": "LAGGED"}
    assert a.release(reader) == {"status": "failed", "code": "LAGGED"}
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_read_pending_at_release_is_answered_cancelled() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    errors: list[str] = []

    async def read() -> None:
        try:
            await a.next(reader)
        except OperationError as exc:
            errors.append(exc.code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        assert a.release(reader) == {"status": "released"}
    assert errors == ["CANCELLED"]
    with fails("DISCONNECTED"):
        await a.send(writer, "late")
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_after_a_direct_receiver_is_released_sends_and_close_are_disconnected() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=1))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, 1)
    errors: list[str] = []

    async def waiting_send() -> None:
        try:
            await a.send(writer, 2)
        except OperationError as exc:
            errors.append(exc.code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiting_send)
        await anyio.wait_all_tasks_blocked()
        assert errors == []
        assert a.release(reader) == {"status": "released"}
    assert errors == ["DISCONNECTED"]
    with fails("DISCONNECTED"):
        await a.send(writer, 3)
    with fails("DISCONNECTED"):
        a.close(writer)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_releasing_an_open_writer_aborts_the_reader() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, 1)
    assert a.release(writer) == {"status": "released"}
    with fails("DISCONNECTED"):
        await a.next(reader)
    assert a.release(reader) == {"status": "failed", "code": "DISCONNECTED"}
    conclude_all(hub, a)


# ----- close --------------------------------------------------------------------------


@pytest.mark.anyio
@bounded
async def test_close_is_refused_while_a_send_waits() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=1))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, "v1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.send, writer, "v2")
        await anyio.wait_all_tasks_blocked()
        with fails("INVALID_INPUT"):
            a.close(writer)
        assert await a.next(reader) == item(1, "v1")
        assert await a.next(reader) == item(2, "v2")
    a.close(writer)
    assert await a.next(reader) == end(2)
    with fails("INVALID_INPUT"):  # a sealed writer accepts nothing more
        await a.send(writer, "v3")
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_close_seals_at_once_and_the_reader_drains_the_rest() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    for value in ["a", "b", "c"]:
        await a.send(writer, value)
    a.close(writer)  # returns without waiting for the reader
    a.close(writer)  # and a second close of a sealed writer is harmless
    values, last = await drain(a, reader)
    assert values == ["a", "b", "c"] and last == 3
    assert await a.next(reader) == end(3)
    conclude_all(hub, a)


# ----- broadcast ----------------------------------------------------------------------


def test_broadcast_create_returns_send_and_a_source_reference() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    grants: Any = a.create({"delivery": "broadcast"})
    assert set(grants) == {"send", "source"}
    send = grants["send"]
    assert send == {"endpoint": send["endpoint"], "direction": "send", "delivery": "broadcast"}
    assert isinstance(grants["source"], str) and WIRE_ID.match(grants["source"])
    subscription: Any = a.subscribe(grants["source"])
    assert subscription == {
        "endpoint": subscription["endpoint"],
        "direction": "receive",
        "delivery": "broadcast",
        "startSequence": 1,
    }
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_bc01_early_and_late_readers_see_independent_intervals() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, source = broadcast(a)
    early: Any = a.subscribe(source)
    assert early["startSequence"] == 1
    assert await a.send(writer, "before-late") is None
    late: Any = a.subscribe(source)
    assert late["startSequence"] == 2
    await a.send(writer, "after-late")
    a.close(writer)
    assert await drain(a, token(early)) == (["before-late", "after-late"], 2)
    assert await a.next(token(late)) == item(2, "after-late")
    assert await a.next(token(late)) == end(2)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_late_reader_with_nothing_delivered_ends_at_start_minus_one() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, source = broadcast(a)
    await a.send(writer, 1)
    await a.send(writer, 2)
    late: Any = a.subscribe(source)
    assert late["startSequence"] == 3
    a.close(writer)
    assert await a.next(token(late)) == end(2)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_broadcast_with_zero_readers_still_advances_the_sequence() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, source = broadcast(a)
    for value in range(3):
        await a.send(writer, value)  # acceptance never waits, even for nobody
    assert not any(r.queue for s in hub.sources for r in s.readers), "nothing retained"
    reader: Any = a.subscribe(source)
    assert reader["startSequence"] == 4
    await a.send(writer, "seen")
    assert await a.next(token(reader)) == item(4, "seen")
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_bc02_a_slow_reader_fails_alone_with_sticky_lagged() -> None:
    hub = ChannelHub(ChannelLimits(queue_items=2))
    a = hub.party("run:a")
    writer, source = broadcast(a)
    slow = token(a.subscribe(source))
    fast = token(a.subscribe(source))
    for sequence in range(1, 6):
        await a.send(writer, sequence)  # never waits for the slow reader
        assert await a.next(fast) == item(sequence, sequence)
    with fails("LAGGED"):
        await a.next(slow)
    with fails("LAGGED"):
        await a.next(slow)
    late = token(a.subscribe(source))  # the source itself is fine
    await a.send(writer, 6)
    a.close(writer)
    assert await drain(a, fast) == ([6], 6)
    assert await drain(a, late) == ([6], 6)
    assert a.release(slow) == {"status": "failed", "code": "LAGGED"}
    assert a.release(fast) == {"status": "ended", "lastSequence": 6}
    conclude_all(hub, a)


def test_a_sealed_or_failed_source_refuses_subscribe() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, source = broadcast(a)
    a.close(writer)
    with fails("INVALID_INPUT"):
        a.subscribe(source)
    writer2, source2 = broadcast(a, schema={"type": "string"})
    with fails("INVALID_INPUT"):
        anyio.run(a.send, writer2, 1)  # the source fails
    with pytest.raises(OperationError):
        a.subscribe(source2)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_source_reference_is_not_an_endpoint() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    b = hub.party("run:b")
    _writer, source = broadcast(a)
    with fails("PERMISSION_DENIED"):
        await a.send(source, 1)
    with fails("PERMISSION_DENIED"):
        await a.next(source)
    with fails("PERMISSION_DENIED"):
        a.close(source)
    with fails("PERMISSION_DENIED"):
        a.release(source)
    with pytest.raises(OperationError) as mapped:
        a.transfer({"events": source}, None, b)
    assert mapped.value.code in {"INVALID_INPUT", "PERMISSION_DENIED"}
    assert b.endpoints == {}
    with fails("PERMISSION_DENIED"):  # subscription authority is the creator's only
        b.subscribe(source)
    conclude_all(hub, b, a)


@pytest.mark.anyio
@bounded
async def test_moving_the_writer_does_not_move_subscription_authority() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    b = hub.party("run:b")
    writer, source = broadcast(a)
    grants: Any = a.transfer({"out": writer}, None, b)
    assert grants["out"]["delivery"] == "broadcast"
    reader = token(a.subscribe(source))
    with fails("PERMISSION_DENIED"):
        b.subscribe(source)
    await b.send(token(grants["out"]), "from-b")
    b.conclude(None)  # the callee succeeded: its writer is sealed
    assert await drain(a, reader) == (["from-b"], 1)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_value_failing_a_readers_own_schema_fails_only_that_subscription() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    b = hub.party("run:b")
    writer, source = broadcast(a)
    typed = token(a.subscribe(source))
    other = token(a.subscribe(source))
    grants: Any = a.transfer({"words": typed}, {"words": PortSpec("receive", schema=STRING)}, b)
    words = token(grants["words"])
    await a.send(writer, "ok")
    assert await b.next(words) == item(1, "ok")  # committed before the failure
    await a.send(writer, 2)  # fails only the string-typed subscription
    await a.send(writer, "fine")  # and the source goes on
    a.close(writer)
    with fails("INVALID_INPUT"):
        await b.next(words)
    with fails("INVALID_INPUT"):  # sticky
        await b.next(words)
    assert await drain(a, other) == (["ok", 2, "fine"], 3)
    assert b.release(words) == {"status": "failed", "code": "INVALID_INPUT"}
    conclude_all(hub, b, a)


# ----- item schemas and bounds --------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("delivery", ["direct", "broadcast"])
@bounded
async def test_a_value_failing_the_source_schema_aborts_the_source(delivery: str) -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    grants: Any = a.create({"delivery": delivery, "schema": {"type": "string"}})
    writer = token(grants["send"])
    reader = token(grants["receive"] if delivery == "direct" else a.subscribe(grants["source"]))
    await a.send(writer, "fine")
    with fails("INVALID_INPUT"):
        await a.send(writer, 42)
    with fails("INVALID_INPUT"):  # the source stays failed
        await a.send(writer, "fine again")
    with fails("INVALID_INPUT"):
        await a.next(reader)
    assert a.release(reader) == {"status": "failed", "code": "INVALID_INPUT"}
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_an_oversized_item_is_resource_exhausted_and_aborts_the_source() -> None:
    hub = ChannelHub(ChannelLimits(item_bytes=10))
    a = hub.party("run:a")
    writer, reader = direct(a)
    fits = "x" * 8
    assert len(json1.dumps(fits)) == 10
    await a.send(writer, fits)
    with fails("RESOURCE_EXHAUSTED"):
        await a.send(writer, "x" * 9)
    with fails("RESOURCE_EXHAUSTED"):
        await a.next(reader)
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_source_byte_budget_is_never_exceeded_by_waiting_sends() -> None:
    # Each value is 6 bytes of JSON ("abcd"); the source may accept 14 bytes in all, so
    # two values fit and a third must be refused, also when the second one still waits.
    hub = ChannelHub(ChannelLimits(queue_items=1, source_bytes=14))
    a = hub.party("run:a")
    writer, reader = direct(a)
    await a.send(writer, "abcd")
    outcomes: list[str] = []

    async def send(value: str) -> None:
        try:
            await a.send(writer, value)
            outcomes.append("accepted")
        except OperationError as exc:
            outcomes.append(exc.code)

    received: list[JSONValue] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(send, "efgh")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(send, "ijkl")
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(5):
            while len(outcomes) < 2:  # read until both waiting sends are answered
                answer: Any = await a.next(reader)
                received.append(answer["item"]["value"])
                await anyio.wait_all_tasks_blocked()
    if "accepted" in outcomes:
        a.close(writer)
        more, _ = await read_out(a, reader)
        received += more
    accepted_bytes = sum(len(json1.dumps(value)) for value in received)
    assert accepted_bytes <= 14, f"the source accepted {received} ({accepted_bytes} bytes)"
    assert "RESOURCE_EXHAUSTED" in outcomes
    conclude_all(hub, a)


def test_allocations_bound_is_resource_exhausted_with_nothing_allocated() -> None:
    hub = ChannelHub(ChannelLimits(allocations=5))
    a = hub.party("run:a")
    direct(a)  # 2
    _writer, source = broadcast(a)  # 4
    reader = token(a.subscribe(source))  # 5
    assert a.release(reader) == {"status": "released"}  # gives no allowance back
    sources, endpoints = set(hub.sources), dict(a.endpoints)
    with fails("RESOURCE_EXHAUSTED"):
        a.create({})
    with fails("RESOURCE_EXHAUSTED"):
        a.subscribe(source)
    assert hub.sources == sources and a.endpoints == endpoints
    assert a.allocations == 5
    conclude_all(hub, a)


# ----- tokens -------------------------------------------------------------------------


def test_tokens_are_wire_ids_and_unguessable() -> None:
    def tokens(hub: ChannelHub) -> list[str]:
        a = hub.party("run:a")
        made: list[str] = []
        for _ in range(20):
            made.extend(direct(a))
            made.extend(broadcast(a))
        return made

    first, second = tokens(ChannelHub()), tokens(ChannelHub())
    for text in first + second:
        assert WIRE_ID.match(text) and len(text) <= 128, text
    assert len(set(first)) == len(first), "every token is fresh"
    assert not set(first) & set(second), "the same steps in another hub give other tokens"
    for one, after in itertools.pairwise(first):  # not a counter: most places differ
        differing = sum(x != y for x, y in zip(one, after, strict=False))
        assert differing + abs(len(one) - len(after)) >= 16, (one, after)


@pytest.mark.anyio
@bounded
async def test_a_token_grants_nothing_to_another_party_or_in_the_wrong_direction() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    b = hub.party("run:b")
    writer, reader = direct(a)
    with fails("PERMISSION_DENIED"):
        await b.send(writer, 1)
    with fails("PERMISSION_DENIED"):
        await b.next(reader)
    with fails("PERMISSION_DENIED"):
        b.close(writer)
    with fails("PERMISSION_DENIED"):
        b.release(reader)
    with fails("PERMISSION_DENIED"):
        await a.send(reader, 1)
    with fails("PERMISSION_DENIED"):
        await a.next(writer)
    with fails("PERMISSION_DENIED"):
        a.close(reader)
    with fails("PERMISSION_DENIED"):
        await a.send("ep-" + "0" * 32, 1)
    await a.send(writer, "still mine")  # none of that used up or harmed a's rights
    assert await a.next(reader) == item(1, "still mine")
    conclude_all(hub, b, a)


# ----- transfer -----------------------------------------------------------------------


@pytest.mark.anyio
@bounded
async def test_transfer_mints_fresh_tokens_and_items_flow_to_the_caller() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/worker")
    caller.resolve_contract = named(STRING)
    grants: Any = caller.create({"contract": "./updates.json"})
    writer, reader = token(grants["send"]), token(grants["receive"])
    moved: Any = caller.transfer(
        {"events": writer}, {"events": PortSpec("send", identity=UPDATES)}, callee
    )
    assert set(moved) == {"events"}
    assert moved["events"] == {
        "endpoint": moved["events"]["endpoint"],
        "direction": "send",
        "delivery": "direct",
        "contract": grants["send"]["contract"],
    }
    fresh = token(moved["events"])
    assert fresh != writer and WIRE_ID.match(fresh)
    assert list(callee.endpoints) == [fresh]
    with fails("PERMISSION_DENIED"):  # the caller's old token grants nothing now
        await caller.send(writer, "x")
    with fails("PERMISSION_DENIED"):
        caller.close(writer)
    with fails("PERMISSION_DENIED"):  # nor does the old string in the callee
        await callee.send(writer, "x")
    await callee.send(fresh, "hello")
    await callee.send(fresh, "world")
    callee.conclude(None)
    assert await drain(caller, reader) == (["hello", "world"], 2)
    conclude_all(hub, caller)


@pytest.mark.anyio
@bounded
async def test_a_forwarded_receiver_keeps_its_identity_and_start() -> None:
    hub = ChannelHub()
    parent = hub.party("run:a")
    monitor = hub.party("run:a/monitor")
    parent.resolve_contract = named()
    grants: Any = parent.create({"contract": "./updates.json"})
    writer, reader = token(grants["send"]), token(grants["receive"])
    await parent.send(writer, "queued before the move")
    moved: Any = parent.transfer(
        {"events": reader}, {"events": PortSpec("receive", identity=UPDATES)}, monitor
    )
    assert moved["events"]["startSequence"] == 1
    assert moved["events"]["contract"] == grants["receive"]["contract"]
    assert moved["events"]["endpoint"] != reader
    parent.close(writer)
    assert await drain(monitor, token(moved["events"])) == (["queued before the move"], 1)
    conclude_all(hub, monitor, parent)


async def _bad_entries(caller: ChannelParty) -> dict[str, tuple[str, str, PortSpec | None]]:
    """Bad entries to map next to a good ``good: <unused writer>`` one.

    Values: (expected code, token, the spec of the ``bad`` port or None if undeclared).
    """
    used_writer = direct(caller)[0]
    await caller.send(used_writer, "used")
    caller.resolve_contract = named()
    named_grants: Any = caller.create({"contract": "./updates.json"})
    named_writer = token(named_grants["send"])
    plain_writer, plain_reader = direct(caller)
    string_writer = direct(caller, schema={"type": "string"})[0]
    bc_writer, source = broadcast(caller)
    await caller.send(bc_writer, 1)
    late_reader = token(caller.subscribe(source))
    return {
        "used endpoint": ("INVALID_INPUT", used_writer, PortSpec("send")),
        "unknown token": ("PERMISSION_DENIED", "ep-" + "f" * 32, PortSpec("send")),
        "port not declared": ("INVALID_INPUT", plain_writer, None),
        "direction mismatch": ("INVALID_INPUT", plain_reader, PortSpec("send")),
        "contract mismatch": ("INVALID_INPUT", named_writer, PortSpec("send", identity=OTHER)),
        "unnamed to named": ("INVALID_INPUT", plain_writer, PortSpec("send", identity=UPDATES)),
        "schema mismatch": ("INVALID_INPUT", string_writer, PortSpec("send", schema=INTEGER)),
        "delivery mismatch": (
            "INVALID_INPUT",
            plain_writer,
            PortSpec("send", delivery="broadcast"),
        ),
        "late reader into beginning": ("INVALID_INPUT", late_reader, PortSpec("receive")),
        "source reference": ("INVALID_INPUT", source, PortSpec("receive")),
    }


BAD_CASES = [
    "used endpoint",
    "unknown token",
    "port not declared",
    "direction mismatch",
    "contract mismatch",
    "unnamed to named",
    "schema mismatch",
    "delivery mismatch",
    "late reader into beginning",
    "source reference",
]


@pytest.mark.anyio
@pytest.mark.parametrize("case", BAD_CASES)
@bounded
async def test_a_rejected_transfer_moves_nothing(case: str) -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    good_writer, good_reader = direct(caller)
    code, bad_token, bad_spec = (await _bad_entries(caller))[case]
    ports = {"good": PortSpec("send")}
    if bad_spec is not None:
        ports["bad"] = bad_spec
    held = dict(caller.endpoints)
    with fails(code):
        caller.transfer({"good": good_writer, "bad": bad_token}, ports, callee)
    assert callee.endpoints == {}, "the callee holds nothing"
    assert caller.endpoints == held, "the caller still holds everything"
    # the good endpoint is still unused and transferable
    moved: Any = caller.transfer({"good": good_writer}, {"good": PortSpec("send")}, callee)
    await callee.send(token(moved["good"]), "after")
    assert await caller.next(good_reader) == item(1, "after")
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_a_missing_required_port_or_a_doubly_mapped_endpoint_moves_nothing() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    with fails("INVALID_INPUT"):
        caller.transfer(
            {"good": writer}, {"good": PortSpec("send"), "need": PortSpec("receive")}, callee
        )
    with fails("INVALID_INPUT"):
        caller.transfer(
            {"good": writer, "again": writer},
            {"good": PortSpec("send"), "again": PortSpec("send")},
            callee,
        )
    with fails("INVALID_INPUT"):
        caller.transfer({"good": writer, "again": writer}, None, callee)
    assert callee.endpoints == {}
    assert writer in caller.endpoints
    # an optional port may stay unwired
    moved: Any = caller.transfer(
        {"good": writer},
        {"good": PortSpec("send"), "maybe": PortSpec("receive", required=False)},
        callee,
    )
    await callee.send(token(moved["good"]), 1)
    assert await caller.next(reader) == item(1, 1)
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_a_used_receiver_or_a_released_one_cannot_move() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    await caller.send(writer, 1)
    await caller.next(reader)
    with fails("INVALID_INPUT"):
        caller.transfer({"in": reader}, None, callee)
    _writer2, reader2 = direct(caller)
    caller.release(reader2)
    with fails("INVALID_INPUT"):
        caller.transfer({"in": reader2}, None, callee)
    assert callee.endpoints == {}
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_a_closed_writer_cannot_move() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, _reader = direct(caller)
    caller.close(writer)
    with fails("INVALID_INPUT"):
        caller.transfer({"out": writer}, None, callee)
    assert callee.endpoints == {}
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_a_late_reader_may_go_to_a_suffix_port() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, source = broadcast(caller)
    await caller.send(writer, "missed")
    late = token(caller.subscribe(source))
    moved: Any = caller.transfer(
        {"feed": late}, {"feed": PortSpec("receive", start="suffix")}, callee
    )
    assert moved["feed"]["startSequence"] == 2
    await caller.send(writer, "seen")
    caller.close(writer)
    assert await drain(callee, token(moved["feed"])) == (["seen"], 2)
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_a_queued_prefix_must_fit_the_ports_schema() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    await caller.send(writer, 1)
    with fails("INVALID_INPUT"):
        caller.transfer({"in": reader}, {"in": PortSpec("receive", schema=STRING)}, callee)
    assert callee.endpoints == {}
    moved: Any = caller.transfer(
        {"in": reader}, {"in": PortSpec("receive", schema=INTEGER)}, callee
    )
    assert await callee.next(token(moved["in"])) == item(1, 1)
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_conflicting_schemas_bound_writer_first_are_rejected() -> None:
    """§7.4/§15.2: admission rejects conflicting writer/reader schemas in either order."""
    hub = ChannelHub()
    caller = hub.party("run:a")
    worker = hub.party("run:a/worker")
    monitor = hub.party("run:a/monitor")
    writer, reader = direct(caller)
    caller.transfer({"out": writer}, {"out": PortSpec("send", schema=STRING)}, worker)
    with fails("INVALID_INPUT"):
        caller.transfer({"in": reader}, {"in": PortSpec("receive", schema=INTEGER)}, monitor)
    assert monitor.endpoints == {}
    conclude_all(hub, monitor, worker, caller)


@pytest.mark.anyio
@bounded
async def test_conflicting_schemas_bound_reader_first_are_rejected() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    worker = hub.party("run:a/worker")
    monitor = hub.party("run:a/monitor")
    writer, reader = direct(caller)
    caller.transfer({"in": reader}, {"in": PortSpec("receive", schema=INTEGER)}, monitor)
    with fails("INVALID_INPUT"):
        caller.transfer({"out": writer}, {"out": PortSpec("send", schema=STRING)}, worker)
    assert worker.endpoints == {}
    conclude_all(hub, monitor, worker, caller)


@pytest.mark.anyio
@bounded
async def test_conflicting_schemas_in_one_staged_mapping_are_rejected() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/loop")
    writer, reader = direct(caller)
    ports = {"out": PortSpec("send", schema=STRING), "in": PortSpec("receive", schema=INTEGER)}
    with fails("INVALID_INPUT"):
        caller.transfer({"out": writer, "in": reader}, ports, callee)
    assert callee.endpoints == {}
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_an_unused_writer_stays_transferable_after_its_receiver_was_released() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    assert caller.release(reader) == {"status": "released"}
    moved: Any = caller.transfer({"out": writer}, {"out": PortSpec("send")}, callee)
    with fails("DISCONNECTED"):  # transferring cannot revive delivery
        await callee.send(token(moved["out"]), 1)
    conclude_all(hub, callee, caller)


@pytest.mark.anyio
@bounded
async def test_without_declared_ports_any_mapping_is_accepted() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/image")
    writer, reader = direct(caller)
    writer2, reader2 = direct(caller, schema={"type": "string"})
    moved: Any = caller.transfer({"whatever": writer, "reads": reader2}, None, callee)
    assert moved["whatever"]["direction"] == "send"
    assert moved["reads"] == {
        "endpoint": moved["reads"]["endpoint"],
        "direction": "receive",
        "delivery": "direct",
        "startSequence": 1,
    }
    await callee.send(token(moved["whatever"]), "to caller")
    await caller.send(writer2, "to callee")
    assert await caller.next(reader) == item(1, "to caller")
    assert await callee.next(token(moved["reads"])) == item(1, "to callee")
    conclude_all(hub, callee, caller)


# ----- conclude -----------------------------------------------------------------------


@pytest.mark.anyio
@bounded
async def test_a_succeeding_callee_seals_its_held_writer() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    moved: Any = caller.transfer({"out": writer}, None, callee)
    await callee.send(token(moved["out"]), "done")
    callee.conclude(None)
    assert await caller.next(reader) == item(1, "done")
    assert await caller.next(reader) == end(1)
    assert caller.release(reader) == {"status": "ended", "lastSequence": 1}
    conclude_all(hub, caller)


@pytest.mark.anyio
@bounded
async def test_a_succeeding_callee_that_never_sent_ends_the_stream_at_zero() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    caller.transfer({"out": writer}, None, callee)
    callee.conclude(None)
    assert await caller.next(reader) == end(0)
    conclude_all(hub, caller)


@pytest.mark.anyio
@bounded
async def test_a_failing_callee_aborts_its_held_writer() -> None:
    hub = ChannelHub()
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    moved: Any = caller.transfer({"out": writer}, None, callee)
    await callee.send(token(moved["out"]), "partial")
    callee.conclude(OperationError("EXECUTION_FAILED", "the worker crashed"))
    with fails("EXECUTION_FAILED"):
        await caller.next(reader)
    status: Any = caller.release(reader)
    assert status["status"] == "failed" and status["code"] == "EXECUTION_FAILED"
    conclude_all(hub, caller)


@pytest.mark.anyio
@bounded
async def test_conclude_answers_a_send_waiting_in_the_ending_invocation() -> None:
    """A send still unaccepted when its invocation ends must not slip in after the seal."""
    hub = ChannelHub(ChannelLimits(queue_items=1))
    caller = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(caller)
    moved: Any = caller.transfer({"out": writer}, None, callee)
    out = token(moved["out"])
    await callee.send(out, "v1")
    outcome: list[str] = []

    async def waiting_send() -> None:
        try:
            await callee.send(out, "v2")
            outcome.append("accepted")
        except OperationError as exc:
            outcome.append(exc.code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiting_send)
        await anyio.wait_all_tasks_blocked()
        callee.conclude(None)
        await anyio.wait_all_tasks_blocked()
        answered_at_conclude = list(outcome)
        values, terminal = await read_out(caller, reader)
        tg.cancel_scope.cancel()  # should the send still be waiting
    assert "v2" not in values, f"a value was accepted after the seal: {values}, end {terminal}"
    assert values == ["v1"]
    assert terminal in (1, "CANCELLED", "DISCONNECTED", "EXECUTION_FAILED", "OWNER_CLOSED")
    assert answered_at_conclude, "the waiting send is answered when its invocation ends"
    assert answered_at_conclude != ["accepted"]
    conclude_all(hub, caller)


@pytest.mark.anyio
@bounded
async def test_unfinished_lists_only_activated_receivers_not_at_end() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    w1, reading = direct(a)
    _, untouched = direct(a)
    w3, ended = direct(a)
    w4, released = direct(a)
    await a.send(w1, 1)
    await a.next(reading)
    a.close(w3)
    await a.next(ended)
    await a.send(w4, 1)
    await a.next(released)
    a.release(released)
    assert a.unfinished() == [reading]
    assert untouched not in a.unfinished()
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_a_receiver_with_a_pending_read_is_unfinished() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    assert a.unfinished() == []
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.next, reader)
        await anyio.wait_all_tasks_blocked()
        assert a.unfinished() == [reader]
        a.close(writer)
    assert a.unfinished() == []
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_concluding_the_owner_ends_its_sources_and_closes_its_table() -> None:
    hub = ChannelHub()
    owner = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, reader = direct(owner)
    bc_writer, source = broadcast(owner)
    moved: Any = owner.transfer({"in": reader}, None, callee)
    assert len(hub.sources) == 2
    owner.conclude(None)
    assert hub.sources == set()
    # the callee's receiver dies with the source's owner
    with pytest.raises(OperationError):
        await callee.next(token(moved["in"]))
    calls: list[tuple[str, dict[str, JSONValue]]] = [
        ("channel/create", {}),
        ("channel/subscribe", {"source": source}),
        ("channel/send", {"endpoint": writer, "value": 1}),
        ("channel/next", {"endpoint": reader}),
        ("channel/close", {"endpoint": bc_writer}),
        ("channel/release", {"endpoint": writer}),
    ]
    for method, params in calls:
        with fails("OWNER_CLOSED"):
            await handle(owner, method, params)
    assert hub.sources == set(), "a refused create allocated nothing"
    owner.conclude(None)  # idempotent
    conclude_all(hub, callee)


@pytest.mark.anyio
@bounded
async def test_a_failing_owner_aborts_its_open_sources_for_other_holders() -> None:
    hub = ChannelHub()
    owner = hub.party("run:a")
    callee = hub.party("run:a/child")
    writer, _reader = direct(owner)
    moved: Any = owner.transfer({"out": writer}, None, callee)
    owner.conclude(OperationError("EXECUTION_FAILED", "the owner failed"))
    assert hub.sources == set()
    with pytest.raises(OperationError) as info:
        await callee.send(token(moved["out"]), 1)
    assert info.value.code == "EXECUTION_FAILED"
    conclude_all(hub, callee)


# ----- the dispatcher -----------------------------------------------------------------


@pytest.mark.anyio
@bounded
async def test_answer_dispatches_the_six_methods() -> None:
    hub = ChannelHub()
    a = hub.party("run:a")
    grants: Any = await handle(a, "channel/create", {})
    writer, reader = token(grants["send"]), token(grants["receive"])
    assert await handle(a, "channel/send", {"endpoint": writer, "value": [1]}) is None
    assert await handle(a, "channel/next", {"endpoint": reader}) == item(1, [1])
    assert await handle(a, "channel/close", {"endpoint": writer}) is None
    assert await handle(a, "channel/next", {"endpoint": reader}) == end(1)
    released = await handle(a, "channel/release", {"endpoint": reader})
    assert released == {"status": "ended", "lastSequence": 1}
    bc: Any = await handle(a, "channel/create", {"delivery": "broadcast"})
    sub: Any = await handle(a, "channel/subscribe", {"source": bc["source"]})
    assert sub["startSequence"] == 1 and sub["delivery"] == "broadcast"
    with fails("UNAVAILABLE"):
        await handle(a, "channel/peek", {"endpoint": reader})
    conclude_all(hub, a)


@pytest.mark.anyio
@bounded
async def test_encoded_answers_are_the_encoding_of_the_answers() -> None:
    """``answer`` (the driver's path, params from a decoded frame) splices a read's item
    from the encoding made at its send: byte for byte ``json1.dumps`` of what ``next``
    answers, whether the read waited for it or not."""
    hub = ChannelHub()
    a = hub.party("run:a")
    values: list[JSONValue] = ['é\u2028"\\', {"n": -0.0, "l": [1, 2.5]}, None, "x" * 70_000]
    plain, plain_reader = direct(a)
    wire, wire_reader = direct(a)

    async def answered(method: str, params: dict[str, JSONValue]) -> bytes:
        decoded = json1.loads(json1.dumps(params))  # what a frame's params are
        assert isinstance(decoded, dict)
        answer = a.answer(method, decoded)
        return answer if isinstance(answer, bytes) else await answer

    async with anyio.create_task_group() as tg:
        first = b""

        async def read_first() -> None:
            nonlocal first
            first = await answered("channel/next", {"endpoint": wire_reader})

        tg.start_soon(read_first)
        await anyio.wait_all_tasks_blocked()  # the first read waits for its item
        for value in values:
            await a.send(plain, value)
            assert await answered("channel/send", {"endpoint": wire, "value": value}) == b"null"
    a.close(plain)
    a.close(wire)
    assert first == json1.dumps(await a.next(plain_reader))
    for _ in range(len(values)):
        expected = json1.dumps(await a.next(plain_reader))
        assert await answered("channel/next", {"endpoint": wire_reader}) == expected
    conclude_all(hub, a)


@pytest.mark.anyio
async def test_a_queue_holds_its_items_encoded_not_decoded() -> None:
    """``queue_bytes`` bounds what a queue holds: 65,530 empty objects are 197 KB of JSON
    text and ~5 MB as Python objects, so a queue that kept the decoded values would hold
    25 times its bound."""
    import gc
    import tracemalloc

    hub = ChannelHub()
    a = hub.party("run:a")
    writer, reader = direct(a)
    items = 8
    encoded = len(json1.dumps([{} for _ in range(65_530)]))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(items):
            value: JSONValue = [{} for _ in range(65_530)]
            await a.send(writer, value)
            del value
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * items * encoded, (held, items * encoded)
    first = await a.next(reader)
    assert first == item(1, [{} for _ in range(65_530)])
    conclude_all(hub, a)
