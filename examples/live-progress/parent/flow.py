#!/usr/bin/env python3
"""live-progress: feed a worker child over one channel, follow its progress over another."""

import asyncio

from runner.component import RunContext, RunResult, handle


async def feed(items: list[str], sender) -> None:  # type: ignore[no-untyped-def]
    async with sender:  # closes the writer: the worker's loop ends after the last item
        for item in items:
            await sender.send(item)


async def follow(reader) -> list:  # type: ignore[no-untyped-def]
    async with reader:
        return [event async for event in reader]


async def live_progress(ctx: RunContext) -> RunResult:
    items = ctx.input.get("items", []) if isinstance(ctx.input, dict) else []
    work = await ctx.channel(schema={"type": "string"})
    progress = await ctx.channel(delivery="broadcast", contract="./contracts/progress.json")
    # Both subscriptions exist before the first progress item: each sees all of them.
    mine = await progress.subscribe()
    theirs = await progress.subscribe()
    worker, monitor, _, seen = await asyncio.gather(
        ctx.run_child_flow(
            operation_id="worker",
            slot="worker",
            input={},
            channels={"items": work.receive, "progress": progress.send},
        ),
        ctx.run_child_flow(
            operation_id="monitor", slot="monitor", input={}, channels={"progress": theirs}
        ),
        feed(items, work.send),
        follow(mine),
    )
    return RunResult(
        "done",
        {"progress": seen, "worker": worker.output, "monitor": monitor.output},
    )


handle(live_progress)
