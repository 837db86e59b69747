"""A component for channel tests: carries out the channel plan its input lists.

Input: ``{"steps": [STEP, ...]}``; steps run in order, ``{"all": [STEP, ...]}`` runs
its steps at once. Endpoints are named: ``NAME.send`` / ``NAME.receive`` after
``create`` of a direct pair, ``NAME.send`` after a broadcast ``create``, the ``as``
name after ``subscribe``, and ``port:P`` for the grant the parent mapped to port P.

- ``{"create": NAME, "delivery"?, "contract"?, "schema"?}``
- ``{"subscribe": NAME, "as": READER}``
- ``{"send": END, "values": [...], "close"?: true, "log": KEY}`` → ``"ok"`` or the code
- ``{"read": END, "limit"?: N, "release"?: true, "log": KEY}`` → values, how it ended
- ``{"release": END, "log": KEY}``, ``{"close": END, "log": KEY}``
- ``{"child": SLOT, "op": ID, "input": PLAN, "channels": {PORT: END}, "log": KEY}``
- ``{"capability": SLOT, "method": M, "op": ID, "input": V, "channels": {...}, "log": KEY}``
- ``{"sleep": SECONDS}``

Output: ``{"log": {KEY: ...}}``. A child given a plan runs it the same way, so one
image serves every flow of a channel tree.
"""

from __future__ import annotations

import asyncio
from typing import Any

from runner.component import OperationError, RunContext, RunResult, handle


class Plan:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.ends: dict[str, Any] = {}
        self.log: dict[str, Any] = {}

    def end(self, name: str) -> Any:
        if name.startswith("port:"):
            port = name[5:]
            grant = self.ctx.channels[port]
            assert isinstance(grant, dict)
            if grant["direction"] == "send":
                return self.ctx.sender(port)
            return self.ctx.receiver(port)
        return self.ends[name]

    async def run(self, step: dict[str, Any]) -> None:
        key = step.get("log", "")
        try:
            await self.step(step, key)
        except OperationError as error:
            self.log[key] = {"error": error.code, "message": error.message}

    async def step(self, step: dict[str, Any], key: str) -> None:
        if "all" in step:
            await asyncio.gather(*(self.run(each) for each in step["all"]))
        elif "create" in step:
            name = step["create"]
            options = {k: step[k] for k in ("delivery", "contract", "schema") if k in step}
            made = await self.ctx.channel(**options)
            self.ends[f"{name}.send"] = made.send
            if hasattr(made, "receive"):
                self.ends[f"{name}.receive"] = made.receive
            else:
                self.ends[name] = made
        elif "subscribe" in step:
            reader = await self.ends[step["subscribe"]].subscribe()
            self.ends[step["as"]] = reader
            self.log[f"{step['as']}.start"] = reader.start_sequence
        elif "send" in step:
            sender = self.end(step["send"])
            for value in step["values"]:
                await sender.send(value)
            if step.get("close"):
                await sender.close()
            self.log[key] = "ok"
        elif "read" in step:
            await self.read(step, key)
        elif "release" in step:
            self.log[key] = status(await self.end(step["release"]).aclose())
        elif "close" in step:
            await self.end(step["close"]).close()
            self.log[key] = "ok"
        elif "child" in step:
            result = await self.ctx.run_child_flow(
                operation_id=step["op"],
                slot=step["child"],
                input=step.get("input"),
                channels={port: self.end(end) for port, end in step.get("channels", {}).items()},
            )
            self.log[key] = {"outcome": result.outcome, "output": result.output}
        elif "capability" in step:
            self.log[key] = await self.ctx.call_capability(
                operation_id=step["op"],
                slot=step["capability"],
                method=step["method"],
                input=step.get("input"),
                channels={port: self.end(end) for port, end in step.get("channels", {}).items()},
            )
        elif "sleep" in step:
            await asyncio.sleep(step["sleep"])

    async def read(self, step: dict[str, Any], key: str) -> None:
        reader = self.end(step["read"])
        seen: dict[str, Any] = {"start": reader.start_sequence, "values": []}
        self.log[key] = seen
        limit = step.get("limit")
        try:
            async for value in reader:
                seen["values"].append(value)
                if limit is not None and len(seen["values"]) >= limit:
                    break
            else:
                seen["end"] = reader.last_sequence
        except OperationError as error:
            seen["error"] = error.code
        if step.get("release"):
            seen["released"] = status(await reader.aclose())


def status(released: Any) -> dict[str, Any]:
    """A release status as JSON: ``{"status", "lastSequence"?, "code"?}``."""
    shown: dict[str, Any] = {"status": released.status}
    if released.last_sequence is not None:
        shown["lastSequence"] = released.last_sequence
    if released.code is not None:
        shown["code"] = released.code
    return shown


async def main(ctx: RunContext) -> RunResult:
    plan = Plan(ctx)
    steps = ctx.input.get("steps", []) if isinstance(ctx.input, dict) else []
    for step in steps:
        await plan.run(step)
    return RunResult("done", {"log": plan.log})


if __name__ == "__main__":
    handle(main)
