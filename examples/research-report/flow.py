#!/usr/bin/env python3
"""research-report: a child flow and a capability, side by side, and a declared error.

Concurrently runs the ``research`` child flow and writes a note through the ``artifacts``
capability; then reads an artifact that does not exist and handles the declared
``not-found`` error. Returns all three.
"""

import asyncio

from runner.component import CapabilityError, RunContext, RunResult, handle


async def report(ctx: RunContext) -> RunResult:
    subject = ctx.input.get("subject", "tides") if isinstance(ctx.input, dict) else "tides"
    research, written = await asyncio.gather(
        ctx.run_child_flow(
            operation_id=f"research:{subject}", slot="research", input={"subject": subject}
        ),
        ctx.call_capability(
            operation_id=f"note:{subject}",
            slot="artifacts",
            method="write",
            input={"path": f"notes/{subject}.txt", "text": f"A report on {subject}.\n"},
        ),
    )
    try:
        await ctx.call_capability(
            operation_id="read:missing",
            slot="artifacts",
            method="read",
            input={"path": "notes/missing.txt"},
        )
        missing = "found?!"
    except CapabilityError as error:
        missing = {"error": error.error_name, "data": error.data}
    return RunResult(
        "done",
        {
            "research": {"outcome": research.outcome, "output": research.output},
            "written": written,
            "missing": missing,
        },
    )


handle(report)
