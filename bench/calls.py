"""Benchmark: ``capability/call`` round trips through the host vs a raw echo host.

Both sides run the same component (``call_component.py``) over the same kind of pipes in
one process run. The raw host answers every line it reads with a fixed response and has no
protocol logic at all; flow-runner parses, validates, admits, dispatches to a broker and
answers. Reported: calls/s sequential and with 64 in flight, the per-call overhead ratio,
and the peak RSS of a host process running one invocation.

    python bench/calls.py [--calls N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import anyio

from runner.api import Invocation, execute
from runner.host.broker import CallContext
from runner.json1 import JSONValue
from runner.sandbox.process import ProcessSandbox

ANSWER = b'{"jsonrpc":"2.0","id":"%s","result":{"value":null}}\n'
COMPONENT = [sys.executable, str(Path(__file__).with_name("call_component.py"))]


class PingBroker:
    """A provider that answers at once."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        return {"value": None}


def via_host(calls: int, window: int) -> float:
    async def main() -> float:
        execution = await execute(
            ProcessSandbox(COMPONENT),
            Invocation.within(600, input={"calls": calls, "window": window}),
            target="bench",
            backend="process",
            broker=PingBroker(),
        )
        assert execution.verdict.result is not None, execution.report
        output = execution.verdict.result["output"]
        assert isinstance(output, dict)
        return float(output["seconds"])  # type: ignore[arg-type]

    return anyio.run(main)


def via_raw_echo(calls: int, window: int) -> float:
    """The same component and the same anyio pipes, answered with no host logic."""

    async def main() -> float:
        params = {"protocol": "run/1", "input": {"calls": calls, "window": window},
                  "settings": {}, "attachments": {}, "scratch": "/tmp",
                  "deadlineUnixMs": 2**52}  # fmt: skip
        root = {"jsonrpc": "2.0", "id": "host:1", "method": "flow/run", "params": params}
        async with await anyio.open_process(COMPONENT) as proc:
            assert proc.stdin and proc.stdout
            await proc.stdin.send(json.dumps(root).encode() + b"\n")
            pending = b""
            async for chunk in proc.stdout:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines and b'"result"' in lines[-1]:
                    return float(json.loads(lines[-1])["result"]["output"]["seconds"])
                ids = (line[line.index(b'"id":"') + 6 :].split(b'"', 1)[0] for line in lines)
                await proc.stdin.send(b"".join(ANSWER % rid for rid in ids))
        raise RuntimeError("the component ended without a result")

    return anyio.run(main)


def peak_rss_mib(mode: str, calls: int) -> float:
    """Peak RSS of a fresh process that runs one invocation in ``mode``."""
    code = (
        "import resource, sys; sys.path.insert(0, 'bench'); import calls as b; "
        f"b.{mode}({calls}, 64); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.calls
    rows = []
    for window in (1, 64):
        raw = min(via_raw_echo(n, window) for _ in range(args.repeat))
        host = min(via_host(n, window) for _ in range(args.repeat))
        rows.append((window, n / raw, n / host, raw / n * 1e6, host / n * 1e6))
    print(f"{'in flight':>9} {'raw calls/s':>12} {'host calls/s':>13} {'raw µs':>8} "
          f"{'host µs':>8} {'host/raw':>9}")  # fmt: skip
    for window, raw_rate, host_rate, raw_us, host_us in rows:
        print(f"{window:>9} {raw_rate:>12,.0f} {host_rate:>13,.0f} {raw_us:>8.1f} "
              f"{host_us:>8.1f} {host_us / raw_us:>8.2f}x")  # fmt: skip
    raw_mem, host_mem = peak_rss_mib("via_raw_echo", n), peak_rss_mib("via_host", n)
    print(f"peak RSS for one run of {n:,} calls: raw {raw_mem:.1f} MiB, host {host_mem:.1f} MiB")


if __name__ == "__main__":
    main()
