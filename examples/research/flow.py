#!/usr/bin/env python3
"""research: a child flow that "researches" ``input.subject`` (deterministically)."""

from runner.component import RunContext, RunResult, handle

FACTS = {
    "football": ["11 players a side", "90 minutes", "the ball is round"],
    "tides": ["two a day", "driven by the moon", "springs at new and full moon"],
}


async def research(ctx: RunContext) -> RunResult:
    subject = ctx.input.get("subject") if isinstance(ctx.input, dict) else None
    if not isinstance(subject, str) or not subject:
        return RunResult("no-subject", None)
    facts = FACTS.get(subject.lower(), [f"{subject} is worth a closer look"])
    return RunResult("done", {"subject": subject, "facts": facts})


handle(research)
