"""Benchmark: many invocations, ``flow-runner batch`` against the scripts users write today.

Side by side in one process run, the fake component's ``echo`` scenario, ``--runs``
invocations each, in ``--rounds`` interleaved rounds (each way runs ``runs / rounds``
invocations per round, the order rotating), so a change in the shared machine's load
falls on every way alike:

- (a) ``flow-runner batch --jobs 2`` on a manifest of ``runs / rounds`` lines (a
  subprocess per round, its start-up included; its CPU time from ``os.wait4``, so the
  runner's own cost per run is measured); (a') the same with ``--prepare 0``, each
  container created only when its run is admitted (the batch before containers were
  prepared ahead);
- (b) ``xargs -P 2`` of ``docker run --rm -i --network none IMAGE ...`` fed the same
  ``flow/run`` frame on stdin; (b') the same with the default profile's security
  options (read-only root, capabilities dropped, init, limits: what batch runs under);
- (c) a shell loop of ``flow-runner exec`` (``--loop-runs`` of them, by default all);
- (d) a 100,000-line manifest of which about ``--runs`` rows run (``--shard 1/N``):
  the batch's peak RSS (``ru_maxrss`` from ``os.wait4``) and its wall time;
- (e) the store: one committed row write (start + finish, as a slot does) in a WAL
  database, median over 2,000 rows.

    .venv/bin/python bench/batch.py [--runs 200] [--rounds 4] [--loop-runs 200] [--lines 100000]
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
import time
from pathlib import Path

from exec_overhead import secure_flags
from rawrun import root_frame

from runner.batch.store import SUCCEEDED, Final, Store
from runner.sandbox.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "flow-runner/fake-component:latest"
COMMAND = ["python3", "/fake/fake_component.py", "echo"]
CLI = [sys.executable, "-m", "runner.cli"]


def timed_child(argv: list[str], cwd: Path, **kwargs: object) -> tuple[float, float, int, int]:
    """(wall s, CPU s, peak RSS KiB, exit status) of one subprocess, waited for alone."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, **kwargs)  # type: ignore[call-overload]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, proc.returncode


def manifest(path: Path, lines: int) -> Path:
    with path.open("w") as out:
        for i in range(lines):
            out.write(json.dumps({"id": f"case-{i}", "input": {"n": i}}) + "\n")
    return path


def bench_batch(work: Path, runs: int, *options: str) -> tuple[float, float]:
    rows = manifest(work / "batch.jsonl", runs)
    results = work / "batch.sqlite"
    results.unlink(missing_ok=True)
    argv = [*CLI, "batch", str(rows), "--image", IMAGE, "--command", shlex.join(COMMAND),
            "--jobs", "2", "-q", "--results", str(results), *options]  # fmt: skip
    wall, cpu, _, code = timed_child(argv, work)
    assert code == 0, f"batch exit {code}"
    return wall, cpu


def bench_xargs(work: Path, runs: int, flags: list[str]) -> float:
    frame = work / "frame.json"
    frame.write_bytes(root_frame({"n": 1}))
    run = shlex.join(["docker", "run", "--rm", "-i", *flags, IMAGE, *COMMAND])
    script = f"seq {runs} | xargs -P 2 -I{{}} sh -c '{run} < {frame} > /dev/null'"
    wall, _, _, code = timed_child(["sh", "-c", script], work)
    assert code == 0, f"xargs exit {code}"
    return wall


def bench_loop(work: Path, runs: int) -> float:
    exec_ = shlex.join([*CLI, "exec", "-q", IMAGE, "--", *COMMAND])
    script = (
        f"for i in $(seq {runs}); do {exec_} --input '{{\"n\": 1}}' > /dev/null || exit 1; done"
    )
    wall, _, _, code = timed_child(["sh", "-c", script], work)
    assert code == 0, f"loop exit {code}"
    return wall


def bench_large(work: Path, lines: int, runs: int) -> tuple[float, int, int]:
    rows = manifest(work / "large.jsonl", lines)
    shards = max(1, lines // runs)
    argv = [*CLI, "batch", str(rows), "--image", IMAGE, "--command", shlex.join(COMMAND),
            "--jobs", "2", "-q", "--shard", f"1/{shards}",
            "--results", str(work / "large.sqlite")]  # fmt: skip
    wall, _, rss, code = timed_child(argv, work)
    assert code == 0, f"large batch exit {code}"
    store = Store(work / "large.sqlite")
    ran = sum(store.counts().values())
    store.close()
    return wall, rss, ran


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
        store.start(f"r-{i}", f"run-{i}")
        final = Final(SUCCEEDED, "done", output='{"n": 1}', exit_code=0, report=report)
        store.finish(f"r-{i}", final, seconds=0.1)
        times.append(time.perf_counter() - started)
    store.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--loop-runs", type=int, default=None)
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    runs, loop_runs = args.runs, args.loop_runs or args.runs
    rounds = max(1, min(args.rounds, runs))
    per_round = [runs // rounds + (i < runs % rounds) for i in range(rounds)]
    walls = dict.fromkeys(("batch", "before", "xargs", "secure"), 0.0)
    batch_cpu = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        secure = secure_flags(load_profile("default"))
        for i, n in enumerate(per_round):
            ways = list(walls)
            for name in ways[i % len(ways) :] + ways[: i % len(ways)]:
                if name == "batch":
                    wall, cpu = bench_batch(work, n)
                    batch_cpu += cpu
                elif name == "before":
                    wall, _ = bench_batch(work, n, "--prepare", "0")
                else:
                    flags = ["--network", "none"] if name == "xargs" else secure
                    wall = bench_xargs(work, n, flags)
                walls[name] += wall
        loop_wall = bench_loop(work, loop_runs)
        large_wall, large_rss, large_ran = bench_large(work, args.lines, runs)
        store_write = bench_store(work)
    per = {name: wall / runs for name, wall in walls.items()}
    per["loop"] = loop_wall / loop_runs
    print(f"| way ({runs} x echo, 2 at once) | wall s | runs/s | vs xargs |")
    print("|---|---:|---:|---:|")
    ways = [
        ("batch", "flow-runner batch --jobs 2", runs),
        ("before", "flow-runner batch --jobs 2 --prepare 0", runs),
        ("xargs", "xargs -P 2 docker run --rm -i --network none", runs),
        ("secure", "xargs -P 2 docker run --rm -i + the profile's flags", runs),
        ("loop", f"shell loop of flow-runner exec ({loop_runs} runs)", loop_runs),
    ]
    for name, label, n in ways:
        wall = per[name] * n
        print(f"| {label} | {wall:.1f} | {1 / per[name]:.2f} | {per['xargs'] / per[name]:.2f}x |")
    print()
    print(f"throughput batch / xargs: {per['xargs'] / per['batch']:.2f}x (target >= 1.25x)")
    print(f"throughput batch / batch --prepare 0: {per['before'] / per['batch']:.2f}x")
    print(f"throughput batch / exec loop: {per['loop'] / per['batch']:.2f}x")
    print(f"runner CPU per run: {batch_cpu / runs * 1000:.1f} ms, {rounds} start-ups included "
          "(target <= 15 ms)")  # fmt: skip
    print(f"{args.lines}-line manifest, {large_ran} rows run (--shard): peak RSS "
          f"{large_rss / 1024:.0f} MiB (target <= 150 MiB), {large_wall:.1f} s")  # fmt: skip
    print(f"store write per row (start + finish, 2 commits): {store_write * 1000:.3f} ms "
          "(target <= 2 ms)")  # fmt: skip


if __name__ == "__main__":
    main()
