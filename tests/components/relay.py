"""A component for child-flow tests: runs the child calls its input lists.

Input: ``{"calls": [{"op": ID, "slot": SLOT, "input": ANY}, ...], "concurrent": bool,
"sleep": SECONDS}``. Output: ``{"deadline": its deadlineUnixMs, "depth": input.depth,
"results": [child result, or the error code, per call]}``. A child given the same shape
of input relays further, so one image serves every level of a tree.
"""

from __future__ import annotations

import asyncio
from typing import Any

from runner.component import OperationError, RunContext, RunResult, handle


async def one(ctx: RunContext, call: dict[str, Any]) -> Any:
    try:
        result = await ctx.run_child_flow(
            operation_id=call["op"], slot=call["slot"], input=call.get("input")
        )
    except OperationError as error:
        return error.code
    return {"outcome": result.outcome, "output": result.output}


async def main(ctx: RunContext) -> RunResult:
    plan: dict[str, Any] = ctx.input if isinstance(ctx.input, dict) else {}
    calls = plan.get("calls", [])
    if plan.get("concurrent"):
        results = list(await asyncio.gather(*(one(ctx, call) for call in calls)))
    else:
        results = [await one(ctx, call) for call in calls]
    if plan.get("sleep"):
        await asyncio.sleep(plan["sleep"])
    return RunResult("done", {"deadline": ctx.deadline_unix_ms, "results": results})


if __name__ == "__main__":
    handle(main)
