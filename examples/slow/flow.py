#!/usr/bin/env python3
"""slow: sleep ``input.seconds`` in steps; on cancellation log how far it got and re-raise."""

import asyncio
import sys
import time

from runner.component import RunContext, RunResult, handle

STEP_SECONDS = 0.1
DEFAULT_SECONDS = 30.0


async def sleep(ctx: RunContext) -> RunResult:
    requested = ctx.input.get("seconds") if isinstance(ctx.input, dict) else None
    seconds = float(requested) if isinstance(requested, int | float) else DEFAULT_SECONDS
    left = ctx.deadline_unix_ms / 1000 - time.time()
    log(f"sleeping {seconds} s; the deadline is in {left:.1f} s and is the host's to enforce")
    started = time.monotonic()
    reported = 0
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            if int(elapsed) > reported:
                reported = int(elapsed)
                log(f"{reported} s of {seconds}")
            await asyncio.sleep(min(STEP_SECONDS, seconds - elapsed))
    except asyncio.CancelledError:
        log(f"cancelled after {time.monotonic() - started:.1f} s of {seconds}")
        raise
    return RunResult("done", {"slept": seconds})


def log(message: str) -> None:
    print(f"slow: {message}", file=sys.stderr, flush=True)


handle(sleep)
