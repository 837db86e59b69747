"""Benchmark: ``capability/call`` round trips through the host vs a minimal host.

Two components, each run by both hosts over the same pipes (the process backend's own) in
one process run, interleaved round by round (best of the rounds):

- *raw*: ``call_component.py`` writes frames by hand (no SDK), so the host is what is
  measured; the minimal host there is the old "raw echo".
- *sdk*: ``sdk_call_component.py`` calls through the project's SDK (``runner.component``),
  which is what a real component pays. Issue 17 asks that flow-runner's host reach 0.97×
  the minimal host's throughput here: the component, not the host, must be the limit.

The minimal host (:func:`via_minimal_host`) answers every request line with
``{"value": null}`` and validates nothing; flow-runner parses, validates, admits, dispatches
to a broker and answers. Reported: calls/s sequential and with 64 in flight, the ratios,
and the peak RSS of a fresh process running one invocation (64 in flight) either way.
``--cpu`` adds flow-runner's own CPU per call (user + system, ``getrusage``): the
difference between a run of N calls and one of N/11, so that what a run costs once (the
component's start, the session's set-up) drops out. It moves with the machine's load as
throughput does; compare trees with it in alternating pairs.

    python bench/calls.py [--calls N] [--repeat R] [--no-rss] [--cpu] [--profile FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:  # imported where used, so that the raw echo's process loads little
    from runner.host.broker import CallContext
    from runner.json1 import JSONValue

ANSWER = b'{"jsonrpc":"2.0","id":"%s","result":{"value":null}}\n'
HERE = Path(__file__).parent
COMPONENTS = {
    "raw": [sys.executable, str(HERE / "call_component.py")],
    "sdk": [sys.executable, str(HERE / "sdk_call_component.py")],
}
ENV = {"PYTHONPATH": str(HERE.parent), **os.environ}  # default: this checkout's SDK


class PingBroker:
    """A provider that answers at once."""

    async def handle(
        self, method: str, params: dict[str, JSONValue], call: CallContext
    ) -> JSONValue:
        return {"value": None}


def via_host(component: str, calls: int, window: int) -> float:
    from runner.api import Invocation, execute
    from runner.sandbox.process import ProcessSandbox

    async def main() -> float:
        execution = await execute(
            ProcessSandbox(COMPONENTS[component], env=ENV),
            Invocation.within(600, input={"calls": calls, "window": window}),
            target="bench",
            broker=PingBroker(),
        )
        assert execution.verdict.result is not None, execution.report
        output = execution.verdict.result["output"]
        assert isinstance(output, dict)
        return float(output["seconds"])  # type: ignore[arg-type]

    return anyio.run(main)


def host_cpu(component: str, calls: int, window: int) -> float:
    """flow-runner's CPU seconds per call beyond what a run costs once (see the docstring)."""
    few = max(calls // 11, 1)
    spent = []
    for n in (few, calls):
        before = resource.getrusage(resource.RUSAGE_SELF)
        via_host(component, n, window)
        after = resource.getrusage(resource.RUSAGE_SELF)
        spent.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return (spent[1] - spent[0]) / (calls - few)


def via_minimal_host(component: str, calls: int, window: int) -> float:
    """The same component over the same pipes as the host's (the process backend's own),
    answered with no host logic: every line but the root response is a request, answered
    ``{"value": null}`` by its id."""
    from runner.sandbox.base import LaunchRequest
    from runner.sandbox.process import ProcessSandbox

    async def main() -> float:
        params = {"protocol": "run/1", "input": {"calls": calls, "window": window},
                  "settings": {}, "attachments": {}, "scratch": "/tmp",
                  "deadlineUnixMs": 2**52}  # fmt: skip
        root = {"jsonrpc": "2.0", "id": "host:1", "method": "flow/run", "params": params}
        sandbox = ProcessSandbox(COMPONENTS[component], env=ENV)
        async with sandbox.launch(LaunchRequest()) as proc:
            await proc.stdin.send(json.dumps(root).encode() + b"\n")
            pending = b""
            async for chunk in proc.stdout:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines and b'"host:1"' in lines[-1]:
                    return float(json.loads(lines[-1])["result"]["output"]["seconds"])
                await proc.stdin.send(answered(lines))
        raise RuntimeError("the component ended without a result")

    return anyio.run(main)


def answered(lines: list[bytes]) -> bytes:
    """The minimal host's answers to request ``lines``: ``{"value": null}`` by their ids."""
    ids = (line[line.index(b'"id":"') + 6 :].split(b'"', 1)[0] for line in lines)
    return b"".join(ANSWER % rid for rid in ids)


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


def rss_of_one_run(mode: Callable[[str, int, int], float], calls: int) -> None:
    """Print this process's RSS before ``mode`` runs (its imports done) and its peak, in KiB."""
    import runner.sandbox.process  # both hosts use its pipes

    if mode is via_host:
        import runner.api  # noqa: F401
    start = _status_kib("VmRSS")
    mode("raw", calls, 64)
    print(start, _status_kib("VmHWM"))


def _status_kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:", 1)[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS runs")
    parser.add_argument("--cpu", action="store_true", help="add the host's CPU per call")
    parser.add_argument("--profile", help="cProfile the host side of one sdk run into FILE")
    args = parser.parse_args()
    n = args.calls
    if args.profile:
        import cProfile

        cProfile.runctx("via_host('sdk', n, 64)", globals(), {"n": n}, args.profile)
        return
    cases = [(component, window) for component in COMPONENTS for window in (1, 64)]
    best: dict[tuple[str, str, int], float] = {}
    cpu: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    for _ in range(args.repeat):  # interleaved, so a change of load falls on both hosts
        for component, window in cases:
            for name, mode in (("minimal", via_minimal_host), ("host", via_host)):
                seconds = mode(component, n, window)
                key = (name, component, window)
                best[key] = min(best.get(key, seconds), seconds)
            if args.cpu:
                cpu[component, window].append(host_cpu(component, n, window))
    print(f"{'component':>9} {'in flight':>9} {'minimal calls/s':>16} {'host calls/s':>13} "
          f"{'minimal µs':>11} {'host µs':>8} {'host÷minimal':>13}")  # fmt: skip
    for component, window in cases:
        low, host = best["minimal", component, window], best["host", component, window]
        print(f"{component:>9} {window:>9} {n / low:>16,.0f} {n / host:>13,.0f} "
              f"{low / n * 1e6:>11.1f} {host / n * 1e6:>8.1f} {low / host:>12.2f}x")  # fmt: skip
    if args.cpu:
        print("host CPU µs/call, median of the rounds [each round]:")
        for (component, window), values in cpu.items():
            each = ", ".join(f"{v * 1e6:.1f}" for v in values)
            print(f"{component:>9} {window:>9} {statistics.median(values) * 1e6:>8.1f}  [{each}]")
    if args.no_rss:
        return
    print(f"peak RSS of one run of {n:,} raw calls, 64 in flight (MiB):")
    for name, mode in (("minimal", "via_minimal_host"), ("host", "via_host")):
        start, peak = rss_mib(mode, n)
        print(f"{name:>9} {peak:>6.1f}  ({start:.1f} at start, {peak - start:+.1f} in the run)")


if __name__ == "__main__":
    main()
