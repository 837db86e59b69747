#!/usr/bin/env python3
"""hello: greet ``input.name``; without a name, end with the declared outcome ``anonymous``."""

from runner.component import RunContext, RunResult, handle


async def greet(ctx: RunContext) -> RunResult:
    name = ctx.input.get("name") if isinstance(ctx.input, dict) else None
    if not isinstance(name, str) or not name:
        return RunResult("anonymous", {"greeting": "Hello, whoever you are!"})
    return RunResult("done", {"greeting": f"Hello, {name}!"})


handle(greet)
