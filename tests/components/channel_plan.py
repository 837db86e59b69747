"""A component for channel tests: carries out the channel plan its input lists.

Input: ``{"steps": [STEP, ...]}``; steps run in order, ``{"all": [STEP, ...]}`` runs
its steps at once. Endpoints are named: ``NAME.send`` / ``NAME.receive`` after
``create`` of a direct pair, ``NAME.send`` after a broadcast ``create``, the ``as``
name after ``subscribe``, and ``port:P`` for the grant the parent mapped to port P.

- ``{"create": NAME, "delivery"?, "contract"?, "schema"?}``
- ``{"subscribe": NAME, "as": READER}``
- ``{"send": END, "values": [...], "close"?: true, "log": KEY}`` → ``"ok"`` or the code;
  ``"repeat": N, "item": V`` in place of ``values`` sends ``V`` N times (no N-long input)
- ``{"read": END, "limit"?: N, "release"?: true, "count"?: true, "log": KEY}`` → values
  (with ``count``: only how many, under ``"count"``), how it ended
- ``{"release": END, "log": KEY}``, ``{"close": END, "log": KEY}``
- ``{"child": SLOT, "op": ID, "input": PLAN, "channels": {PORT: END}, "log": KEY}``
- ``{"capability": SLOT, "method": M, "op": ID, "input": V, "channels": {...}, "log": KEY}``
- ``{"sleep": SECONDS}``, ``{"fail": CODE}`` (the Run ends with that error)
- ``{"clock": KEY}`` → ``[time.monotonic(), time.process_time()]`` when the step runs
  (CLOCK_MONOTONIC is one clock for every container on the kernel, so benchmarks compare
  it across flows; the second is this process's CPU seconds)

Output: ``{"log": {KEY: ...}}``. A child given a plan runs it the same way, so one
image serves every flow of a channel tree.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from runner.component import OperationError, RunContext, RunResult, handle


class Failing(Exception):
    """A planned failure of the whole Run (step errors are only logged)."""


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
            values = step["values"] if "values" in step else [step["item"]] * step["repeat"]
            for value in values:
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
        elif "fail" in step:
            raise Failing(step["fail"])
        elif "clock" in step:
            self.log[step["clock"]] = [time.monotonic(), time.process_time()]

    async def read(self, step: dict[str, Any], key: str) -> None:
        reader = self.end(step["read"])
        counting = step.get("count", False)
        seen: dict[str, Any] = {"start": reader.start_sequence, "values": []}
        if counting:
            seen = {"start": reader.start_sequence, "count": 0}
        self.log[key] = seen
        limit = step.get("limit")
        count = 0
        try:
            async for value in reader:
                count += 1
                if counting:
                    seen["count"] = count
                else:
                    seen["values"].append(value)
                if limit is not None and count >= limit:
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
    try:
        for step in steps:
            await plan.run(step)
    except Failing as failing:
        raise OperationError(str(failing), "failing as planned") from None
    return RunResult("done", {"log": plan.log})


if __name__ == "__main__":
    handle(main)
