"""Benchmark component on the project's SDK: ``capability/call`` round trips, timed inside.

Input ``{"calls": N, "window": W}``: N calls through ``ctx.call_capability``, W of them
awaited at once (W tasks, each calling one after another). Output ``{"calls": N,
"seconds": S}``. Unlike ``call_component.py`` (raw frames), this is what a real component
pays: the SDK's checks, its call table, its frames and its stdin reader.
"""

from __future__ import annotations

import asyncio
import time

from runner.component import RunContext, RunResult, handle


async def main(ctx: RunContext) -> RunResult:
    plan = ctx.input
    assert isinstance(plan, dict)
    calls, window = plan["calls"], plan["window"]
    assert isinstance(calls, int) and isinstance(window, int)
    numbers = iter(range(calls))

    async def worker() -> None:
        for i in numbers:
            await ctx.call_capability(
                operation_id=f"o:{i}", slot="bench", method="ping", input=None
            )

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    seconds = time.perf_counter() - started
    return RunResult("done", {"calls": calls, "seconds": seconds})


if __name__ == "__main__":
    handle(main)
