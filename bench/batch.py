"""Benchmark: many invocations, ``flow-runner batch`` against the scripts users write today.

Side by side in one process run, the fake component's ``echo`` scenario, ``--runs``
invocations per way and round, in ``--rounds`` rounds whose order of ways rotates, so a
change in the shared machine's load falls on every way alike:

- ``batch``: ``flow-runner batch --jobs 2`` of this tree on a ``--runs``-line manifest
  (a subprocess: its start-up is included, once per batch as a user pays it);
- ``base``: the same command run from the tree given by ``--base`` (its code on
  ``PYTHONPATH``): the before of a before/after;
- ``xargs``: ``xargs -P 2`` of ``docker run --rm -i --network none IMAGE ...``, each fed
  the same ``flow/run`` frame on stdin; ``secure``: the same with the default profile's
  security options (what batch runs under);
- every round also runs each batch tree on a 2-line manifest, so the runner's CPU per
  run is measured without its start-up: (CPU of the N-run batch - CPU of the 2-run
  batch) / (N - 2), CPU from ``os.wait4`` (user + system);
- for every way, its client's CPU per run (the batch process; ``sh``, ``xargs`` and the
  ``docker`` CLI processes), and the engine's (dockerd and containerd, from
  ``/proc/PID/stat``, which also counts whatever other jobs ask of the same engine meanwhile)
  over the way's runs;

and, per batch way, the p50 / p95 / max of each phase timing of its runs' reports over
the rounds (create, attach, start, ..., cleanup, total: ``batch report``'s);
then, once: a shell loop of ``flow-runner exec`` (``--loop-runs``); a ``--lines``-line
manifest of which one shard of about ``--runs`` rows runs (``--shard 1/N``) per batch
tree, its peak RSS read as ``VmHWM`` from ``/proc/PID/status`` every 20 ms while it runs
(``ru_maxrss`` would start from this process's own peak); and the store's committed
write per row (start + finish, as a slot does), median over 2,000 rows.

    .venv/bin/python bench/batch.py [--runs 200] [--rounds 3] [--base DIR]
                                    [--loop-runs 20] [--lines 100000] [--ways ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from exec_overhead import secure_flags
from rawrun import root_frame

from runner.batch.report import PHASES, phase_stats, run_timings
from runner.batch.store import SUCCEEDED, RowResult, Store
from runner.sandbox.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "flow-runner/fake-component:latest"
COMMAND = ["python3", "/fake/fake_component.py", "echo"]
CLI = [sys.executable, "-m", "runner.cli"]
SMALL = 2
"""Rows of the manifest whose batch measures a batch's start-up (one per slot)."""
WAYS = ("batch", "base", "xargs", "secure")


@dataclass
class Child:
    """What one subprocess cost: wall s, CPU s, peak RSS KiB (VmHWM), exit status, and the
    engine's CPU s meanwhile."""

    wall: float
    cpu: float
    peak_kib: int
    code: int
    engine_cpu: float
    timings: list[dict[str, float]] = field(default_factory=list)
    """A batch's: the ``timings`` of its runs' reports."""


def engine_pids() -> list[int]:
    """The machine's engine: the dockerd of /var/run/docker.pid and the containerd it
    started (not a second engine another job's tests run)."""
    try:
        dockerd = int(Path("/var/run/docker.pid").read_text())
    except (OSError, ValueError):
        return []
    pids = [dockerd]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == dockerd:
                pids.append(int(entry))
    return pids


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def vm_hwm(pid: int) -> int:
    """The process's peak RSS so far, KiB (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_child(argv: list[str], cwd: Path, pythonpath: Path = ROOT) -> Child:
    """Run ``argv`` alone and measure it (see :class:`Child`)."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    engine = engine_pids()
    engine_before = cpu_of(engine)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env)
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, vm_hwm(proc.pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return Child(wall, cpu, peak, proc.returncode, cpu_of(engine) - engine_before)


def manifest(path: Path, lines: int) -> Path:
    with path.open("w") as out:
        for i in range(lines):
            out.write(json.dumps({"id": f"case-{i}", "input": {"n": i}}) + "\n")
    return path


def bench_batch(work: Path, runs: int, tree: Path, *options: str) -> Child:
    rows = manifest(work / f"batch-{runs}.jsonl", runs)
    results = work / "batch.sqlite"
    for stale in work.glob("batch.sqlite*"):
        stale.unlink()
    argv = [*CLI, "batch", str(rows), "--image", IMAGE, "--command", shlex.join(COMMAND),
            "--jobs", "2", "-q", "--results", str(results), *options]  # fmt: skip
    child = run_child(argv, work, tree)
    assert child.code == 0, f"batch ({tree}) exit {child.code}"
    store = Store(results, create=False)
    child.timings = list(run_timings(store))
    store.close()
    return child


def bench_xargs(work: Path, runs: int, flags: list[str]) -> Child:
    frame = work / "frame.json"
    frame.write_bytes(root_frame({"n": 1}))
    run = shlex.join(["docker", "run", "--rm", "-i", *flags, IMAGE, *COMMAND])
    script = f"seq {runs} | xargs -P 2 -I{{}} sh -c '{run} < {frame} > /dev/null'"
    child = run_child(["sh", "-c", script], work)
    assert child.code == 0, f"xargs exit {child.code}"
    return child


def bench_loop(work: Path, runs: int) -> Child:
    exec_ = shlex.join([*CLI, "exec", "-q", IMAGE, "--", *COMMAND])
    script = (
        f"for i in $(seq {runs}); do {exec_} --input '{{\"n\": 1}}' > /dev/null || exit 1; done"
    )
    child = run_child(["sh", "-c", script], work)
    assert child.code == 0, f"loop exit {child.code}"
    return child


def bench_large(work: Path, lines: int, runs: int, tree: Path) -> tuple[Child, int]:
    rows = work / "large.jsonl"
    if not rows.exists():
        manifest(rows, lines)
    results = work / "large.sqlite"
    for stale in work.glob("large.sqlite*"):
        stale.unlink()
    shards = max(1, lines // runs)
    argv = [*CLI, "batch", str(rows), "--image", IMAGE, "--command", shlex.join(COMMAND),
            "--jobs", "2", "-q", "--shard", f"1/{shards}", "--results", str(results)]  # fmt: skip
    child = run_child(argv, work, tree)
    assert child.code == 0, f"large batch ({tree}) exit {child.code}"
    store = Store(results)
    ran = len(list(store.rows()))
    store.close()
    return child, ran


def bench_store(work: Path, rows: int = 2000) -> float:
    store = Store(work / "write.sqlite")
    with store.transaction():
        for i in range(rows):
            entry = {"id": f"r-{i}", "manifest": "m", "line": i, "key": "k" * 64}
            store.queue({**entry, "input_digest": "d" * 64, "target": IMAGE, "image_id": "x"})
    report = json.dumps({"run_id": "x", "stderr": "s" * 2000, "timings": {"run": 0.1}})
    times = []
    for i in range(rows):
        started = time.perf_counter()
        store.start("m", f"r-{i}", f"run-{i}")
        final = RowResult(SUCCEEDED, "done", output='{"n": 1}', exit_code=0, report=report)
        store.finish("m", f"r-{i}", final, seconds=0.1)
        times.append(time.perf_counter() - started)
    store.close()
    return statistics.median(times)


@dataclass
class Way:
    label: str
    rounds: list[Child] = field(default_factory=list)
    small: list[Child] = field(default_factory=list)
    """Batch ways: the 2-run batch of each round (start-up + 2 runs)."""

    def marginal_cpu(self, runs: int) -> list[float]:
        """Per round: CPU s per run without start-up."""
        return [
            (c.cpu - s.cpu) / (runs - SMALL) for c, s in zip(self.rounds, self.small, strict=True)
        ]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, default=None, help="the tree to compare against")
    parser.add_argument("--loop-runs", type=int, default=20)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--ways", default=",".join(WAYS), help="of " + ",".join(WAYS))
    args = parser.parse_args()
    runs = args.runs
    assert runs > SMALL, f"--runs must exceed {SMALL}"
    chosen = [w for w in args.ways.split(",") if w != "base" or args.base is not None]
    trees = {"batch": ROOT, "base": args.base}
    labels = {
        "batch": "flow-runner batch --jobs 2",
        "base": f"flow-runner batch --jobs 2, base tree {args.base}",
        "xargs": "xargs -P 2 docker run --rm -i --network none",
        "secure": "xargs -P 2 docker run --rm -i + the profile's flags",
    }
    ways = {name: Way(labels[name]) for name in chosen}
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        secure = secure_flags(load_profile("default"))
        for i in range(args.rounds):
            order = chosen[i % len(chosen) :] + chosen[: i % len(chosen)]
            for name in order:
                way = ways[name]
                if name in trees:
                    tree = trees[name]
                    assert tree is not None
                    way.small.append(bench_batch(work, SMALL, tree))
                    way.rounds.append(bench_batch(work, runs, tree))
                else:
                    flags = ["--network", "none"] if name == "xargs" else secure
                    way.rounds.append(bench_xargs(work, runs, flags))
                print(f"round {i + 1} {name}: {way.rounds[-1].wall:.1f} s", file=sys.stderr)
        loop = bench_loop(work, args.loop_runs) if args.loop_runs else None
        large = {}
        for name, tree in trees.items():
            if name in ways and tree is not None:
                large[name] = bench_large(work, args.lines, runs, tree)
        store_write = bench_store(work)
    minutes = (time.time() - started) / 60
    print(f"{args.rounds} rounds of {runs} runs per way, {minutes:.0f} min, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end\n")  # fmt: skip
    baselines = [name for name in ("xargs", "secure") if name in ways]
    ratio = {  # throughput vs a baseline way, per round: its wall / the way's wall
        (name, base): [b.wall / w.wall for b, w in zip(ways[base].rounds, way.rounds, strict=True)]
        for name, way in ways.items()
        for base in baselines
    }
    print("| way | wall s (median) | runs/s | "
          + "".join(f"÷ {base} (median; rounds) | " for base in baselines)
          + "client CPU ms/run | engine CPU ms/run |")  # fmt: skip
    print("|---|---:|---:|" + "---:|" * len(baselines) + "---:|---:|")
    for name, way in ways.items():
        wall = median([c.wall for c in way.rounds])
        ratios = "".join(
            f"{median(r):.2f}x ({', '.join(f'{x:.2f}' for x in r)}) | "
            for r in (ratio[name, base] for base in baselines)
        )
        client = median([c.cpu / runs * 1000 for c in way.rounds])
        engine = median([c.engine_cpu / runs * 1000 for c in way.rounds])
        print(f"| {way.label} | {wall:.1f} | {runs / wall:.2f} | {ratios}{client:.1f} | "
              f"{engine:.0f} |")  # fmt: skip
    if loop is not None:
        rate = args.loop_runs / loop.wall
        print(f"| shell loop of flow-runner exec ({args.loop_runs} runs) | {loop.wall:.1f} | "
              f"{rate:.2f} | "
              + "".join(f"{rate / (runs / median([c.wall for c in ways[base].rounds])):.2f}x | "
                        for base in baselines)
              + f"{loop.cpu / args.loop_runs * 1000:.0f} | "
              f"{loop.engine_cpu / args.loop_runs * 1000:.0f} |")  # fmt: skip
    print()
    print("| batch tree | CPU ms/run without start-up (median; rounds) | start-up + 2 runs, "
          "CPU s | all CPU ms/run, start-up included | peak RSS, "
          f"{args.lines:,}-line manifest | rows run | its wall s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in (n for n in ways if n in trees):
        way = ways[name]
        marginal = [x * 1000 for x in way.marginal_cpu(runs)]
        small = median([c.cpu for c in way.small])
        whole = median([c.cpu / runs * 1000 for c in way.rounds])
        child, ran = large[name]
        print(f"| {name} | {median(marginal):.1f} ({', '.join(f'{x:.1f}' for x in marginal)}) | "
              f"{small:.2f} | {whole:.1f} | {child.peak_kib / 1024:.0f} MiB | {ran} | "
              f"{child.wall:.1f} |")  # fmt: skip
    if "batch" in ways and "base" in ways:
        speed = [
            b.wall / a.wall for a, b in zip(ways["batch"].rounds, ways["base"].rounds, strict=True)
        ]
        print(f"\nthroughput batch ÷ base: {median(speed):.2f}x "
              f"({', '.join(f'{x:.2f}' for x in speed)})")  # fmt: skip
    print(f"store write per row (start + finish, 2 commits): {store_write * 1000:.3f} ms")
    print_phases(ways, trees)


def print_phases(ways: dict[str, Way], trees: dict[str, Path | None]) -> None:
    """Each batch way's phase timings over its runs of every round (the N-run batches)."""
    stats = {
        name: phase_stats(t for child in way.rounds for t in child.timings)
        for name, way in ways.items()
        if name in trees
    }
    if not stats:
        return
    names = [p for p in PHASES if any(p in s for s in stats.values())]
    names += sorted({p for s in stats.values() for p in s} - set(names))
    print("\n| phase, ms: p50 / p95 / max | " + " | ".join(stats) + " |")
    print("|---|" + "---:|" * len(stats))
    for phase in names:
        cells = [
            " / ".join(f"{s[phase][q] * 1000:.0f}" for q in ("p50", "p95", "max"))
            if phase in s
            else "-"
            for s in stats.values()
        ]
        print(f"| {phase} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
