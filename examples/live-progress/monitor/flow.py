#!/usr/bin/env python3
"""live-progress-monitor: read a progress subscription to its end, summarise it."""

from runner.component import RunContext, RunResult, handle


async def monitor(ctx: RunContext) -> RunResult:
    seen, last = 0, None
    async for event in ctx.receiver("progress"):
        seen, last = seen + 1, event
    return RunResult("done", {"seen": seen, "last": last})


handle(monitor)
