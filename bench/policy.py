"""Benchmark: ``flow-runner policy verify PROFILE`` (no ``--stress``), whole command.

Reported: the median, minimum and maximum wall time of the whole command as a subprocess
(interpreter start, imports, one probe container, verdict, table), and its split, each a
median over the runs: CLI start (``flow-runner --version``: interpreter and CLI imports),
container create / attach / start and the probe's run (the sandbox's own timings from an
in-process ``runner.policy.verify.verify``), and the verdict (judging the rows).
The target: <= 3 s for ``default`` on this machine.

    .venv/bin/python bench/policy.py [--runs 5] [--profile default]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "runner.cli"]


def wall(args: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}: {done.stderr[-1000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", default="default")
    options = parser.parse_args()

    from runner.policy.verify import verify
    from runner.sandbox.profiles import load_profile

    profile = load_profile(options.profile)
    whole = [wall([*CLI, "policy", "verify", options.profile]) for _ in range(options.runs)]
    start = [wall([*CLI, "--version"]) for _ in range(options.runs)]
    splits: dict[str, list[float]] = {}
    for _ in range(options.runs):
        verification = anyio.run(verify, profile)
        for key, value in verification.timings.items():
            splits.setdefault(key, []).append(value)
    print(f"policy verify {options.profile}, {options.runs} runs (seconds)")
    print(
        f"  whole command   median {statistics.median(whole):.3f}  "
        f"min {min(whole):.3f}  max {max(whole):.3f}"
    )
    print(f"  CLI start       median {statistics.median(start):.3f}")
    for key in ("create", "attach", "start", "run", "cleanup", "verdict", "total"):
        if key in splits:
            print(f"  {key:15} median {statistics.median(splits[key]):.3f}")


if __name__ == "__main__":
    main()
