"""Heavy but valid traffic: the host's loop stays responsive, and a run tree's memory stays
within its stated bound (runner/host/bounds.py) with every holder driven to its limit.

The components are short stdlib scripts run as local processes (the host's process
backend, its real pipes): they write valid frames as fast as the pipes take them, and read
only what the scenario says.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio

from runner.api import Invocation, execute
from runner.host.driver import Graces
from runner.sandbox.process import ProcessSandbox

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20

# --- the loop is never held long ------------------------------------------------------

SCHEMA_SENDS = r"""
import json, sys
out, inp = sys.stdout.buffer, sys.stdin.buffer
def send(message):
    out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
root = json.loads(inp.readline())
# 12 branches of anyOf per item, 20,000 items: about 980,000 of the 1,000,000 work units
# Schema/1 allows one check (about half a second of CPU each).
branches = [{"type": "integer", "minimum": i} for i in range(12)]
schema = {"type": "array", "items": {"anyOf": branches}}
send({"jsonrpc": "2.0", "id": "c", "method": "channel/create", "params": {"schema": schema}})
out.flush()
writer = json.loads(inp.readline())["result"]["send"]["endpoint"]
value = [20] * 20_000
for i in range(64):  # all in one write
    send({"jsonrpc": "2.0", "id": f"s:{i}", "method": "channel/send",
          "params": {"endpoint": writer, "value": value}})
out.flush()
for line in inp:  # read every answer, ignore the cancel: killed after the grace
    pass
"""


def test_sixty_four_costly_channel_sends_hold_neither_the_loop_nor_the_deadline() -> None:
    """64 sends in one write, each item near Schema/1's work limit (about 0.5 s of CPU to
    check): the checks run in worker threads, the deadline (2 s) ends the run within its
    grace, and the loop answers a 10 ms sleep on time throughout. Bounds: the end within
    deadline + grace + 3 s, the loop's largest lag 100 ms (measured 2.6 s and 10-20 ms;
    before: 30 to 33 s, the loop held for all of it)."""
    deadline, graces = 4.0, Graces(cancel=0.5, exit=0.5)
    sandbox = ProcessSandbox([sys.executable, "-c", SCHEMA_SENDS])
    lag = 0.0

    async def main() -> tuple[Any, float]:
        nonlocal lag
        async with anyio.create_task_group() as tg:

            async def probe() -> None:
                nonlocal lag
                while True:
                    before = time.monotonic()
                    await anyio.sleep(0.01)
                    lag = max(lag, time.monotonic() - before - 0.01)

            tg.start_soon(probe)
            started = time.monotonic()
            execution = await execute(
                sandbox, Invocation.within(deadline), target="sends", graces=graces
            )
            tg.cancel_scope.cancel()
        return execution, time.monotonic() - started

    execution, took = anyio.run(main)
    error = execution.verdict.error
    assert error is not None and error.code == "DEADLINE_EXCEEDED", execution.verdict
    assert took < deadline + graces.cancel + 3, f"the run took {took:.1f} s"
    assert lag < 0.3, f"the loop was held {lag * 1000:.0f} ms at once"
