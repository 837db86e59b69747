"""The operation ledger on its own (PROTOCOL.md §8; HOST-CASES OP-01…OP-04)."""

from __future__ import annotations

import anyio
import pytest

from runner import json1
from runner.host.operations import ENTRY_BYTES, OperationLedger, Work
from runner.json1 import JSONValue
from runner.protocol.codes import OperationError

CALL = "capability/call"


async def run(
    ledger: OperationLedger, rid: str, method: str, params: dict[str, JSONValue], work: Work
) -> JSONValue:
    """Join, replay or dispatch the operation named by ``params["operationId"]``, in the
    request's own cancel scope as the driver does (None: that scope was cancelled)."""
    with anyio.CancelScope() as scope:
        ticket = ledger.admit(rid, method, params, scope)
        return json1.loads(await ledger.settle_encoded(ticket, work))
    return None


def params(**extra: JSONValue) -> dict[str, JSONValue]:
    base: dict[str, JSONValue] = {"operationId": "op:1", "slot": "s", "method": "m", "input": 1}
    return {**base, **extra}


def test_op04_identity_uses_json1_equality_and_ignores_operation_id() -> None:
    same = OperationLedger.digest
    assert same(CALL, params(input={"a": 1, "b": [1.0, -0.0]})) == same(
        CALL, {"input": {"b": [1, 0], "a": 1.0}, "method": "m", "slot": "s", "operationId": "x"}
    )
    assert same(CALL, params()) != same("flow/run-child", params())
    assert same(CALL, params()) != same(CALL, params(input=2))
    assert same(CALL, params()) != same(CALL, params(channels={})), "presence is significant"
    child = {"operationId": "c", "slot": "s", "input": 1}
    assert same("flow/run-child", child) != same("flow/run-child", {**child, "intent": "x"})


def test_join_dispatches_once_and_replays_the_settled_result() -> None:
    async def main() -> None:
        ledger = OperationLedger()
        gate = anyio.Event()
        runs = 0

        async def work() -> JSONValue:
            nonlocal runs
            runs += 1
            await gate.wait()
            return "shared"

        results: list[JSONValue] = []

        async def call(rid: str) -> None:
            results.append(await run(ledger, rid, CALL, params(), work))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "c:1")
            tg.start_soon(call, "c:2")
            await anyio.wait_all_tasks_blocked()
            gate.set()
        assert await run(ledger, "c:3", CALL, params(), work) == "shared"
        assert results == ["shared", "shared"]
        assert runs == 1 and ledger.dispatches == 1
        with pytest.raises(OperationError) as conflict:
            await run(ledger, "c:4", CALL, params(input=2), work)
        assert conflict.value.code == "OPERATION_CONFLICT"

    anyio.run(main)


def test_cancelled_dispatcher_keeps_the_work_while_a_waiter_remains() -> None:
    async def main() -> None:
        ledger = OperationLedger()
        gate = anyio.Event()

        async def work() -> JSONValue:
            await gate.wait()
            return "survived"

        survivor: list[JSONValue] = []

        async def waiter() -> None:
            survivor.append(await run(ledger, "c:2", CALL, params(), work))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, ledger, "c:1", CALL, params(), work)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert ledger.cancel_waiter("c:1"), "the dispatcher's task must keep running"
            gate.set()
        assert survivor == ["survived"]

    anyio.run(main)


def test_work_abandoned_by_every_waiter_is_cancelled_and_uncertain() -> None:
    async def main() -> None:
        ledger = OperationLedger()
        cancelled = anyio.Event()

        async def work() -> JSONValue:
            try:
                await anyio.sleep(30)
            finally:
                cancelled.set()
            return None

        outcome: list[JSONValue] = []

        async def dispatcher() -> None:  # its own answer is CANCELLED on the wire
            outcome.append(await run(ledger, "c:1", CALL, params(), work))

        async with anyio.create_task_group() as tg:
            tg.start_soon(dispatcher)
            await anyio.wait_all_tasks_blocked()
            assert not ledger.cancel_waiter("c:1"), "no other waiter: let the task go"
        assert outcome == [None], "the abandoned work's own request was cancelled"
        assert cancelled.is_set()
        with pytest.raises(OperationError) as replay:
            await run(ledger, "c:2", CALL, params(), work)
        assert replay.value.code == "UNCERTAIN"
        assert ledger.dispatches == 1

    anyio.run(main)


def test_retained_byte_budget_refuses_new_ids_but_still_replays() -> None:
    async def main() -> None:
        kept = ENTRY_BYTES + len(b'"done"')  # an operation and its encoded result
        ledger = OperationLedger(budget=2 * kept)

        async def work() -> JSONValue:
            return "done"

        assert await run(ledger, "c:1", CALL, params(operationId="a"), work) == "done"
        assert await run(ledger, "c:2", CALL, params(operationId="b"), work) == "done"
        assert ledger.retained == 2 * kept
        with pytest.raises(OperationError) as refused:
            await run(ledger, "c:3", CALL, params(operationId="c"), work)
        assert refused.value.code == "RESOURCE_EXHAUSTED"
        assert await run(ledger, "c:4", CALL, params(operationId="a"), work) == "done"
        assert ledger.dispatches == 2

    anyio.run(main)


def test_results_and_errors_are_charged_and_params_are_not() -> None:
    """Large params cost only their digest; a kept result or error costs its bytes, and a
    replayed error is raised anew each time (the kept one holds no traceback)."""

    async def main() -> None:
        ledger = OperationLedger(budget=1 << 20)
        big = params(operationId="big", input="p" * (8 << 20))

        async def small() -> JSONValue:
            return {"value": None}

        async def large() -> JSONValue:
            return {"value": "r" * 100_000}

        async def failing() -> JSONValue:
            raise OperationError("INVALID_INPUT", "no", {"why": "x" * 1000})

        await run(ledger, "c:1", CALL, big, small)
        assert ledger.retained == ENTRY_BYTES + len(b'{"value":null}')
        await run(ledger, "c:2", CALL, params(operationId="large"), large)
        assert ledger.retained > ENTRY_BYTES * 2 + 100_000
        before = ledger.retained
        with pytest.raises(OperationError):
            await run(ledger, "c:3", CALL, params(operationId="bad"), failing)
        assert ledger.retained == before + ENTRY_BYTES + len(b"no") + 1000 + len(b'{"why":""}')
        replays = []
        for rid in ("c:4", "c:5"):
            with pytest.raises(OperationError) as replay:
                await run(ledger, rid, CALL, params(operationId="bad"), failing)
            replays.append(replay.value)
        assert replays[0] is not replays[1] and replays[0].details == {"why": "x" * 1000}
        assert await run(ledger, "c:6", CALL, big, small) == {"value": None}
        assert ledger.dispatches == 3

    anyio.run(main)
