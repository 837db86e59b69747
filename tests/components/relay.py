"""A component for child-flow tests: runs the child calls its input lists.

Input: ``{"calls": [CALL or [CALL, ...], ...], "concurrent": bool, "sleep": SECONDS}``.
A CALL is ``{"op": ID, "slot": SLOT, "input": ANY}`` (a child flow) or, with a
``"method"``, a capability call. Calls run one after another (all at once with
``concurrent``); a list of calls in the list runs at once and its results form a list.
Output: ``{"deadline": its deadlineUnixMs, "results": [per call: the child's
``{outcome, output}``, a capability's ``{"value": v}`` or ``{"error": name, "data": d}``,
or the error code], "messages": {op: message of each error code}}``. A child given the
same shape of input relays further, so one image serves every level of a tree.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from runner.component import CapabilityError, OperationError, RunContext, RunResult, handle


async def one(ctx: RunContext, call: Any, messages: dict[str, str]) -> Any:
    if isinstance(call, list):
        return list(await asyncio.gather(*(one(ctx, each, messages) for each in call)))
    try:
        if "method" in call:
            value = await ctx.call_capability(
                operation_id=call["op"],
                slot=call["slot"],
                method=call["method"],
                input=call.get("input"),
            )
            return {"value": value}
        result = await ctx.run_child_flow(
            operation_id=call["op"], slot=call["slot"], input=call.get("input")
        )
    except CapabilityError as error:
        return {"error": error.error_name, "data": error.data}
    except OperationError as error:
        messages[call["op"]] = error.message
        return error.code
    return {"outcome": result.outcome, "output": result.output}


async def main(ctx: RunContext) -> RunResult:
    plan: dict[str, Any] = ctx.input if isinstance(ctx.input, dict) else {}
    calls = plan.get("calls", [])
    messages: dict[str, str] = {}
    if plan.get("concurrent"):
        results = await one(ctx, calls, messages)
    else:
        results = [await one(ctx, call, messages) for call in calls]
    if plan.get("sleep"):
        print(f"relay: sleeping {plan['sleep']} s", file=sys.stderr, flush=True)  # a readiness line
        await asyncio.sleep(plan["sleep"])
    output = {"deadline": ctx.deadline_unix_ms, "results": results, "messages": messages}
    return RunResult("done", output)


if __name__ == "__main__":
    handle(main)
