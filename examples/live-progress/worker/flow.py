#!/usr/bin/env python3
"""live-progress-worker: one progress item per item read, until the items end."""

import asyncio

from runner.component import RunContext, RunResult, handle


async def worker(ctx: RunContext) -> RunResult:
    done = 0
    async with ctx.sender("progress") as progress:
        async for item in ctx.receiver("items"):
            await asyncio.sleep(0.05)  # the "work"
            done += 1
            await progress.send({"item": item, "done": done, "result": item.upper()})
    return RunResult("done", {"processed": done})


handle(worker)
