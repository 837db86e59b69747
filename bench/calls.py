"""Benchmark: ``capability/call`` round trips through the host vs a raw echo host.

Both sides run the same component (``call_component.py``) over the same kind of pipes in
one process run. The raw host answers every line it reads with a fixed response and has no
protocol logic at all; flow-runner parses, validates, admits, dispatches to a broker and
answers. Reported: calls/s sequential and with 64 in flight, the per-call overhead ratio,
and the peak RSS of a fresh process running one invocation (64 in flight) either way.

    python bench/calls.py [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:  # imported where used, so that the raw echo's process loads anyio alone
    from runner.host.broker import CallContext
    from runner.json1 import JSONValue

ANSWER = b'{"jsonrpc":"2.0","id":"%s","result":{"value":null}}\n'
COMPONENT = [sys.executable, str(Path(__file__).with_name("call_component.py"))]


class PingBroker:
    """A provider that answers at once."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        return {"value": None}


def via_host(calls: int, window: int) -> float:
    from runner.api import Invocation, execute
    from runner.sandbox.process import ProcessSandbox

    async def main() -> float:
        execution = await execute(
            ProcessSandbox(COMPONENT),
            Invocation.within(600, input={"calls": calls, "window": window}),
            target="bench",
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


def rss_mib(mode: str, calls: int) -> tuple[float, float]:
    """RSS of a fresh process that runs one invocation in ``mode``: (at start, peak).

    Read from ``/proc/self/status`` (Linux): ``ru_maxrss`` would report the high-water
    mark of the parent's memory that a forked child starts from, not the child's own.
    "At start" is after the imports that ``mode`` needs, before the run.
    """
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import calls as b; "
        f"b.rss_of_one_run(b.{mode}, {calls})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    start, peak = out.stdout.split()[-2:]
    return int(start) / 1024, int(peak) / 1024


def rss_of_one_run(mode: Callable[[int, int], float], calls: int) -> None:
    """Print this process's RSS before ``mode`` runs (its imports done) and its peak, in KiB."""
    if mode is via_host:
        import runner.api
        import runner.sandbox.process  # noqa: F401
    start = _status_kib("VmRSS")
    mode(calls, 64)
    print(start, _status_kib("VmHWM"))


def _status_kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:", 1)[1].split()[0])


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
    print(f"peak RSS of one run of {n:,} calls, 64 in flight (MiB):")
    for name, mode in (("raw echo", "via_raw_echo"), ("host", "via_host")):
        start, peak = rss_mib(mode, n)
        print(f"{name:>9} {peak:>6.1f}  ({start:.1f} at start, {peak - start:+.1f} in the run)")


if __name__ == "__main__":
    main()
