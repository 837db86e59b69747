"""A component for the SDK's channel tests: ``input.scenario`` picks what the handler does.

Run it like ``scenarios.py``, whose registry and runner it shares: ``PYTHONPATH`` at the
checkout, a scripted host on its stdin/stdout, ``FLOW_TEST_LIFETIME`` to shrink the
request lifetime budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from scenarios import scenario, serve, store

from runner.component import OperationError, RunContext


async def failure(attempt: Awaitable[Any]) -> str | None:
    """The OperationError code (or the class name) an attempt raises; None if it succeeds."""
    try:
        await attempt
    except OperationError as error:
        return error.code
    except (ValueError, KeyError, RuntimeError, StopAsyncIteration) as error:
        return type(error).__name__
    return None


def refusal(attempt: Callable[[], Any]) -> str | None:
    """The class name a synchronous attempt raises; None if it succeeds."""
    try:
        attempt()
    except (ValueError, KeyError) as error:
        return type(error).__name__
    return None


@scenario
async def pair_send_close(ctx: RunContext, args: dict[str, Any]) -> Any:
    pair = await ctx.channel()
    for value in args["values"]:
        await pair.send.send(value)
    await pair.send.close()
    await pair.send.close()  # joins the first close: nothing more on the wire
    return {
        "send": pair.send.reference,
        "receive": pair.receive.reference,
        "start": pair.receive.start_sequence,
        "delivery": pair.send.delivery,
    }


@scenario
async def cancel_create(ctx: RunContext, args: dict[str, Any]) -> Any:
    creating = asyncio.ensure_future(ctx.channel())
    await asyncio.sleep(0)  # the task's first step puts the create on the wire
    creating.cancel()
    await asyncio.wait([creating])
    return creating.cancelled()


@scenario
async def exhaust(ctx: RunContext, args: dict[str, Any]) -> Any:
    """Create pairs until the SDK's local endpoint limit refuses one."""
    created = 0
    while (code := await failure(ctx.channel())) is None:
        created += 1
    return {"created": created, "refused": code}


@scenario
async def create_params(ctx: RunContext, args: dict[str, Any]) -> Any:
    """Each create in turn; the host answers with a pair or a source. Then local refusals."""
    await ctx.channel(delivery="direct", schema={"type": "integer"})
    await ctx.channel(schema=False)
    await ctx.channel(delivery="broadcast", contract="./contracts/events.json")
    return {
        "both": await failure(ctx.channel(schema=True, contract="./c.json")),
        "delivery": await failure(ctx.channel(delivery="fanout")),  # type: ignore[call-overload]
        "contract": await failure(ctx.channel(contract="c.json")),
        "schema": await failure(ctx.channel(schema=[])),  # type: ignore[call-overload]
    }


@scenario
async def read_all(ctx: RunContext, args: dict[str, Any]) -> Any:
    receiver = ctx.receiver("in")
    values = [value async for value in receiver]
    after_end = await failure(receiver.__anext__())
    return {"values": values, "last": receiver.last_sequence, "after": after_end}


@scenario
async def read_one(ctx: RunContext, args: dict[str, Any]) -> Any:
    """Read one value and return: the receiver is left active (abandonment)."""
    return await ctx.receiver("in").__anext__()


@scenario
async def read_one_in_context(ctx: RunContext, args: dict[str, Any]) -> Any:
    async with ctx.receiver("in") as receiver:
        async for value in receiver:
            return value
    return None


@scenario
async def lagged(ctx: RunContext, args: dict[str, Any]) -> Any:
    receiver = ctx.receiver("in")
    codes = [await failure(receiver.__anext__()) for _ in range(2)]
    status = await receiver.aclose()
    return {"codes": codes, "status": [status.status, status.code, status.details]}


@scenario
async def release(ctx: RunContext, args: dict[str, Any]) -> Any:
    receiver = ctx.receiver("in")
    first = await receiver.__anext__()
    status, again = await asyncio.gather(receiver.aclose(), receiver.aclose())
    assert status is again
    return {
        "first": first,
        "status": [status.status, status.last_sequence, status.code, status.details],
        "after": await failure(receiver.__anext__()),
    }


@scenario
async def release_after_end(ctx: RunContext, args: dict[str, Any]) -> Any:
    receiver = ctx.receiver("in")
    values = [value async for value in receiver]
    status = await receiver.aclose()
    return {"values": values, "status": [status.status, status.last_sequence]}


@scenario
async def cancel_read(ctx: RunContext, args: dict[str, Any]) -> Any:
    receiver = ctx.receiver("in")
    read = asyncio.ensure_future(receiver.__anext__())
    await asyncio.sleep(0)  # the task's first step puts the read on the wire
    read.cancel()
    await asyncio.wait([read])
    status = await receiver.aclose()  # joins the disposal the cancellation started
    await store(ctx, 1)  # the host sees this only once aclose has returned
    return {"cancelled": read.cancelled(), "status": status.status}


@scenario
async def close_while_sending(ctx: RunContext, args: dict[str, Any]) -> Any:
    sender = ctx.sender("out")
    sending = asyncio.ensure_future(sender.send("v"))
    await asyncio.sleep(0)  # the send is on the wire, its reply cannot be here yet
    refused = await failure(sender.close())
    await sending
    async with sender:
        pass  # a clean exit closes
    return {"refused": refused, "after-close": await failure(sender.send("late"))}


@scenario
async def cancel_close(ctx: RunContext, args: dict[str, Any]) -> Any:
    sender = ctx.sender("out")
    closing = asyncio.ensure_future(sender.close())
    await asyncio.sleep(0)  # the task's first step puts the close on the wire
    closing.cancel()
    await asyncio.wait([closing])
    await sender.close()  # joins the close still on the wire
    return closing.cancelled()


@scenario
async def unused_pair(ctx: RunContext, args: dict[str, Any]) -> Any:
    pair = await ctx.channel()
    return pair.receive.reference


@scenario
async def broadcast(ctx: RunContext, args: dict[str, Any]) -> Any:
    source = await ctx.channel(delivery="broadcast")
    async with await source.subscribe() as receiver:
        values = [value async for value in receiver]
    return {
        "source": source.reference,
        "send": [source.send.reference, source.send.delivery],
        "start": receiver.start_sequence,
        "values": values,
        "mapped": await failure(
            ctx.call_capability(
                operation_id="a", slot="s", method="m", input=None, channels={"p": source.reference}
            )
        ),
    }


@scenario
async def subscribe_only(ctx: RunContext, args: dict[str, Any]) -> Any:
    """A fresh subscription is owned work even if never read."""
    source = await ctx.channel(delivery="broadcast")
    await source.subscribe()
    return "subscribed"


@scenario
async def offered_subscription(ctx: RunContext, args: dict[str, Any]) -> Any:
    """A subscription handed to a child is not abandoned, and not released implicitly."""
    source = await ctx.channel(delivery="broadcast")
    subscription = await source.subscribe()
    await ctx.run_child_flow(
        operation_id="monitor", slot="monitor", input=None, channels={"progress": subscription}
    )
    return "offered"


@scenario
async def reserve(ctx: RunContext, args: dict[str, Any]) -> Any:
    """64 ordinary calls with a root grant held: 63 go out, the close still gets through."""
    calls = [asyncio.ensure_future(store(ctx, n)) for n in range(1, 65)]
    await asyncio.sleep(0)  # each task's first step admits its call: 63 on the wire, 1 queued
    await ctx.sender("out").close()
    await asyncio.gather(*calls)
    return "settled"


@scenario
async def lifetime(ctx: RunContext, args: dict[str, Any]) -> Any:
    """Ordinary calls until the budget refuses; the pair's settlements still go out."""
    pair = await ctx.channel()
    accepted = 0
    while (code := await failure(store(ctx, accepted + 1))) is None:
        accepted += 1
    await pair.send.close()
    await pair.receive.aclose()
    return {"accepted": accepted, "refused": code}


@scenario
async def wrap(ctx: RunContext, args: dict[str, Any]) -> Any:
    sender, receiver = ctx.sender("out"), ctx.receiver("in")
    assert ctx.sender("out") is sender
    contract = sender.contract
    return {
        "sender": [sender.reference, sender.delivery],
        "contract": None if contract is None else [contract.id, contract.version, contract.digest],
        "receiver": [receiver.reference, receiver.delivery, receiver.start_sequence],
        "wrong": [
            refusal(lambda: ctx.receiver("out")),
            refusal(lambda: ctx.sender("in")),
            refusal(lambda: ctx.sender("absent")),
        ],
    }


@scenario
async def mapped(ctx: RunContext, args: dict[str, Any]) -> Any:
    pair = await ctx.channel()
    await ctx.call_capability(
        operation_id="cap:1", slot="sink", method="drain", input=None, channels={"in": pair.receive}
    )
    await ctx.run_child_flow(
        operation_id="child:1", slot="producer", input=None, channels={"out": pair.send.reference}
    )
    return "mapped"


if __name__ == "__main__":
    serve()
