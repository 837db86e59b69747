"""A component for SDK tests: ``input.scenario`` picks what the handler does.

Run it with ``PYTHONPATH`` at the checkout and a scripted host on its stdin/stdout.
``FLOW_TEST_LIFETIME`` shrinks the request lifetime budget so its end is cheap to reach.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from runner.component import CapabilityError, OperationError, RunContext, RunResult, handle
from runner.component.runtime import Limits, run

Scenario = Callable[[RunContext, dict[str, Any]], Awaitable[Any]]
SCENARIOS: dict[str, Scenario] = {}
LEFT_BEHIND: set[asyncio.Future[Any]] = set()


def scenario(function: Scenario) -> Scenario:
    SCENARIOS[function.__name__.replace("_", "-")] = function
    return function


async def store(ctx: RunContext, n: int) -> Any:
    return await ctx.call_capability(
        operation_id=f"op:{n}", slot="store", method="write", input={"n": n}
    )


@scenario
async def echo(ctx: RunContext, args: dict[str, Any]) -> Any:
    attachments = {k: [a.path, a.access] for k, a in ctx.attachments.items()}
    return {
        "input": ctx.input,
        "settings": ctx.settings,
        "attachments": attachments,
        "channels": ctx.channels,
        "scratch": ctx.scratch,
        "deadline": ctx.deadline_unix_ms,
    }


@scenario
async def golden(ctx: RunContext, args: dict[str, Any]) -> Any:
    child, stored = await asyncio.gather(
        ctx.run_child_flow(
            operation_id="research:1", slot="research", intent="Find facts.", input=args
        ),
        ctx.call_capability(
            operation_id="store:1", slot="artifacts", method="write", input={"source": "r"}
        ),
    )
    try:
        await ctx.call_capability(
            operation_id="missing:1", slot="artifacts", method="read", input={}
        )
    except CapabilityError as error:
        missing = [error.error_name, error.data]
    return {"research": [child.outcome, child.output], "stored": stored, "missing": missing}


@scenario
async def fanout(ctx: RunContext, args: dict[str, Any]) -> Any:
    results = await asyncio.gather(*(store(ctx, n) for n in range(1, args["calls"] + 1)))
    return {"settled": len(results)}


@scenario
async def lifetime(ctx: RunContext, args: dict[str, Any]) -> Any:
    """Issue ``calls`` calls (64 at a time), then one more that must be refused locally."""
    accepted = 0
    for first in range(1, args["calls"] + 1, 64):
        batch = range(first, min(first + 64, args["calls"] + 1))
        accepted += len(await asyncio.gather(*(store(ctx, n) for n in batch)))
    try:
        await store(ctx, 0)
    except OperationError as error:
        return {"accepted": accepted, "rejected": error.code}
    return {"accepted": accepted, "rejected": None}


@scenario
async def cancel_one(ctx: RunContext, args: dict[str, Any]) -> Any:
    child = asyncio.ensure_future(
        ctx.run_child_flow(operation_id="child:1", slot="child", input=None)
    )
    await ctx.call_capability(operation_id="release:1", slot="gate", method="open", input=None)
    child.cancel()
    try:
        await child
    except asyncio.CancelledError:
        return "cancelled-locally"
    return "not-cancelled"


@scenario
async def cancel_queued(ctx: RunContext, args: dict[str, Any]) -> Any:
    """65 calls; the 65th, still queued, is cancelled: it must never reach the wire."""
    calls = [asyncio.ensure_future(store(ctx, n)) for n in range(1, 66)]
    await asyncio.sleep(0)  # each task's first step admits its call: 64 on the wire, 1 queued
    calls[64].cancel()
    results = await asyncio.gather(*calls, return_exceptions=True)
    return {"cancelled": sum(isinstance(r, asyncio.CancelledError) for r in results)}


@scenario
async def wait_forever(ctx: RunContext, args: dict[str, Any]) -> Any:
    await asyncio.gather(store(ctx, 1), store(ctx, 2))
    return "unreachable"


@scenario
async def sleep(ctx: RunContext, args: dict[str, Any]) -> Any:
    if args.get("announce"):
        await store(ctx, 1)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        print("sleep: cancelled", file=sys.stderr)
        raise
    return "slept"


@scenario
async def swallow_cancel(ctx: RunContext, args: dict[str, Any]) -> Any:
    await store(ctx, 1)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        return "swallowed"
    return "slept"


@scenario
async def abandon(ctx: RunContext, args: dict[str, Any]) -> Any:
    LEFT_BEHIND.add(asyncio.ensure_future(store(ctx, 1)))
    await asyncio.sleep(0)  # the task's first step puts the call on the wire
    return "left a call behind"


@scenario
async def invalid_result(ctx: RunContext, args: dict[str, Any]) -> Any:
    return args["result"]


@scenario
async def non_json_output(ctx: RunContext, args: dict[str, Any]) -> Any:
    return RunResult("done", float("nan"))


@scenario
async def explode(ctx: RunContext, args: dict[str, Any]) -> Any:
    raise ZeroDivisionError("kaboom")


@scenario
async def operation_error(ctx: RunContext, args: dict[str, Any]) -> Any:
    raise OperationError(args["code"], args.get("message"), args.get("details"))


@scenario
async def propagate(ctx: RunContext, args: dict[str, Any]) -> Any:
    return await store(ctx, 1)


@scenario
async def bad_arguments(ctx: RunContext, args: dict[str, Any]) -> Any:
    attempts: dict[str, Callable[[], Awaitable[Any]]] = {
        "operation_id": lambda: ctx.call_capability(
            operation_id=" bad", slot="s", method="m", input=None
        ),
        "slot": lambda: ctx.run_child_flow(operation_id="a", slot="Bad", input=None),
        "method": lambda: ctx.call_capability(operation_id="a", slot="s", method="", input=None),
        "intent": lambda: ctx.run_child_flow(operation_id="a", slot="s", input=None, intent=""),
        "input": lambda: ctx.call_capability(
            operation_id="a", slot="s", method="m", input=float("inf")
        ),
        "channels": lambda: ctx.call_capability(
            operation_id="a", slot="s", method="m", input=None, channels={"p": "?"}
        ),
    }
    failures = {}
    for name, attempt in attempts.items():
        try:
            await attempt()
        except ValueError as error:
            failures[name] = type(error).__name__
    return failures


@scenario
async def stray_output(ctx: RunContext, args: dict[str, Any]) -> Any:
    print("print() output")
    sys.stdout.write("sys.stdout output\n")
    os.write(1, b"raw fd 1 output\n")
    subprocess.run(["/bin/echo", "subprocess output"], check=True)
    return "printed"


async def main(ctx: RunContext) -> Any:
    args: dict[str, Any] = ctx.input if isinstance(ctx.input, dict) else {}
    result = await SCENARIOS[args.get("scenario", "echo")](ctx, args)
    if isinstance(result, RunResult) or args.get("scenario") == "invalid-result":
        return result
    return RunResult("done", result)


def serve() -> None:
    """Serve one Run with every registered scenario (also those of sibling scripts)."""
    budget = os.environ.get("FLOW_TEST_LIFETIME")
    if budget:
        sys.exit(run(main, Limits(lifetime=int(budget))))
    handle(main)


if __name__ == "__main__":
    serve()
