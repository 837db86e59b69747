"""Benchmark: child flows (``flow/run-child``) as sibling containers, against raw runs.

Side by side in one process run, interleaved round by round, every container from the
same image (``flow-runner/relay``, tests/components/relay.py) and every child given the
same input (``{"calls": []}``: answer at once, exit 0):

- (p) the parent alone: a root run of the relay with no calls (one container);
- (a) a parent running 8 children one after another (9 containers, in this process's
  ``FlowHost``, every message of the children relayed by the host);
- (b) 8 raw ``docker run --rm -i --network none IMAGE``, one after another, each fed the
  child's ``flow/run`` frame on stdin, stdin kept open until the response line arrives;
- (c) a parent running 8 children at once (``asyncio.gather`` in the parent);
- (d) a parent running one child;
- (e) for scale, 8 raw ``docker run`` as in (b), all at once (threads): what the engine
  itself makes of 8 containers starting together on this machine.

(p), (a), (c), (d) are ``runner.flows.FlowHost.run`` in this process (the Python API,
after one warm-up round), with the default sandbox profile for every flow. Reported: the
median wall time of each with its minimum and quartiles, the ratios (a)/(b), (c)/(d),
(c)/(e) and ((c) - (p))/(e) (medians of the per-round ratios), and the per-child overhead
((a) - (p)) / 8 against the time of one raw run, (b) / 8. The run reports give the median
engine ``start`` of a child and the median of each child's time in its sandbox
(create, attach, start, run, cleanup).

    .venv/bin/python bench/children.py [--runs 7] [--children 8] [--image IMAGE]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
from rawrun import docker_run

from runner.config import load_config
from runner.flows import FlowHost
from runner.json1 import JSONValue
from runner.report import RunReport

CHILD_INPUT: JSONValue = {"calls": []}
SPLIT = ("create", "attach", "start", "run", "cleanup")
Timed = tuple[float, RunReport | None]
NO_NETWORK = ["--network", "none"]


def write_config(directory: Path, image: str) -> Path:
    """A parent flow with one child slot, both from ``image``, default profile."""
    path = directory / "flow-runner.toml"
    path.write_text(
        f'[flows.parent]\nimage = "{image}"\nchildren = {{ child = "child" }}\n\n'
        f'[flows.child]\nimage = "{image}"\n'
    )
    return path


def plan(children: int, concurrent: bool) -> JSONValue:
    calls: list[JSONValue] = [
        {"op": f"child:{n}", "slot": "child", "input": CHILD_INPUT} for n in range(children)
    ]
    return {"calls": calls, "concurrent": concurrent}


def flow_run(config: Path, input: JSONValue, children: int) -> Timed:
    """One root run of ``parent`` in this process; checks every child succeeded."""

    async def main() -> RunReport:
        host = FlowHost(load_config(config))
        try:
            execution = await host.run("parent", input, deadline_seconds=300)
        finally:
            await host.aclose()
        report = execution.report
        if execution.verdict.result is None or len(report.children) != children:
            raise RuntimeError(f"the parent run failed: {report.dumps()[:2000]}")
        if any(child.status != "succeeded" for child in report.children):
            raise RuntimeError(f"a child failed: {report.dumps()[:2000]}")
        return report

    started = time.perf_counter()
    report = anyio.run(main)
    return time.perf_counter() - started, report


def raw_runs(image: str, count: int) -> Timed:
    """(b): ``count`` raw runs, one after another."""
    return sum(docker_run(image, CHILD_INPUT, NO_NETWORK) for _ in range(count)), None


def raw_runs_at_once(image: str, count: int) -> Timed:
    """(e): ``count`` raw runs started together, each in its own thread."""
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(lambda _: docker_run(image, CHILD_INPUT, NO_NETWORK), range(count)))
    return time.perf_counter() - started, None


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def paired(values: list[float], baseline: list[float]) -> float:
    """The median of the per-round ratios ``values[i] / baseline[i]``."""
    return statistics.median(v / b for v, b in zip(values, baseline, strict=True))


def sandbox_time(report: RunReport) -> float:
    """A run's time in its sandbox as its report splits it."""
    return sum(report.timings.get(step, 0.0) for step in SPLIT)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds")
    parser.add_argument("--children", type=int, default=8, help="children of (a), (b), (c)")
    parser.add_argument("--image", default="flow-runner/relay:latest")
    args = parser.parse_args()
    n, image = args.children, args.image
    config = write_config(Path(tempfile.mkdtemp()), image)

    cases: dict[str, Callable[[], Timed]] = {
        "(p) parent alone": lambda: flow_run(config, plan(0, False), 0),
        f"(a) parent, {n} children one after another": lambda: flow_run(config, plan(n, False), n),
        f"(b) {n} × raw `docker run --rm -i --network none`": lambda: raw_runs(image, n),
        f"(c) parent, {n} children at once": lambda: flow_run(config, plan(n, True), n),
        "(d) parent, one child": lambda: flow_run(config, plan(1, False), 1),
        f"(e) {n} × raw `docker run`, at once": lambda: raw_runs_at_once(image, n),
    }
    walls: dict[str, list[float]] = {name: [] for name in cases}
    reports: dict[str, list[RunReport]] = {name: [] for name in cases}
    for run in cases.values():  # warm-up: image and page caches, the in-process client
        run()
    for _ in range(args.runs):
        for name, run in cases.items():
            wall, report = run()
            walls[name].append(wall)
            if report is not None:
                reports[name].append(report)

    p, a, b, c, d, e = (walls[name] for name in cases)
    print(f"image {image}, default profile, {n} children, {args.runs} rounds\n")
    print("| variant | median ms | min ms | q1 – q3 ms | child start ms | child sandbox ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in cases:
        q1, median, q3 = quartiles(walls[name])
        kids = [child for report in reports[name] for child in report.children]
        start = ms(statistics.median(k.timings["start"] for k in kids)) if kids else ""
        whole = ms(statistics.median(sandbox_time(k) for k in kids)) if kids else ""
        print(f"| {name} | {ms(median)} | {ms(min(walls[name]))} | {ms(q1)} – {ms(q3)} | "
              f"{start} | {whole} |")  # fmt: skip
    overhead = [(x - y) / n for x, y in zip(a, p, strict=True)]
    raw = [x / n for x in b]
    print()
    print("| ratio | median of per-round ratios |")
    print("|---|---:|")
    print(f"| (a) / (b): {n} children through the host vs {n} raw runs | {paired(a, b):.2f} |")
    print(f"| (c) / (d): {n} children at once vs one child | {paired(c, d):.2f} |")
    print(f"| (c) / (e): {n} children at once vs {n} raw runs at once | {paired(c, e):.2f} |")
    c_children = [x - y for x, y in zip(c, p, strict=True)]
    print(f"| ((c) − (p)) / (e): the children of (c) vs {n} raw runs at once | "
          f"{paired(c_children, e):.2f} |")  # fmt: skip
    print(f"| ((a) − (p)) / {n} ÷ (b) / {n}: one child vs one raw run | "
          f"{paired(overhead, raw):.2f} |")  # fmt: skip
    print(
        f"\nper child ((a) − (p)) / {n}: median {ms(statistics.median(overhead))} ms; "
        f"one raw run (b) / {n}: median {ms(statistics.median(raw))} ms"
    )


if __name__ == "__main__":
    main()
