"""Long fuzz runs of HostSession: mutated frames in forked workers, counting what breaks.

    FLOW_SHARED_DIR=../shared PYTHONPATH=. python bench/fuzz.py --frames 1000000

Each case (tests/framefuzz.py: one or two mutated frames, cut into chunks, then EOF and
the verdict) runs in one of ``--workers`` forked processes, and case ``i`` of worker
``w`` is always the same bytes. Three failures are counted:

* native crashes: a worker that dies by a signal (orjson's encoder corrupting its heap,
  say). The case it was on is re-run alone in a fresh process to confirm it, its chunks
  are saved under ``--save``, and the worker goes on after it;
* local errors: any exception escaping HostSession for remote input (saved too);
* hangs: a case using more than ``--hang`` seconds of CPU (CPU, not wall time: on a
  shared machine a fast case can wait a second for a core), and a case that has not
  returned after ``ALARM`` wall seconds (the alarm ends it).

It prints cases a second and the three counts; a sound host reports 0 / 0 / 0.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import pickle
import queue
import signal
import sys
import time
import traceback
from contextlib import suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from framefuzz import Mutator, play

ALARM = 10
"""Seconds after which a case that has not returned is ended (and counted a hang)."""


class _Hung(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hung


def _work(seed: int, start: int, stop: int, at: Any, out: Any, hang: float) -> None:
    """Worker ``seed``: cases start..stop. ``at`` holds the case under way (read when the
    worker dies); findings go to ``out`` at once, the count at the end."""
    signal.signal(signal.SIGALRM, _alarm)
    for index in range(start, stop):
        at.value = index
        chunks = Mutator.case_at(seed, index)
        began = time.process_time()
        signal.alarm(ALARM)
        try:
            play(chunks)
        except _Hung:
            out.put(("hang", seed, index, f"no return within {ALARM} s"))
        except BaseException:  # every escape is a finding
            out.put(("error", seed, index, traceback.format_exc(limit=8)))
        finally:
            signal.alarm(0)
        seconds = time.process_time() - began
        if hang < seconds < ALARM:
            out.put(("hang", seed, index, f"{seconds:.2f} s of CPU"))
    out.put(("done", seed, stop - start, ""))


def _replay(seed: int, index: int) -> None:
    play(Mutator.case_at(seed, index))


def _save(folder: Path, kind: str, seed: int, index: int, note: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    chunks = Mutator.case_at(seed, index)
    path = folder / f"{kind}-{seed}-{index}.pickle"
    path.write_bytes(pickle.dumps({"chunks": chunks, "note": note}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="cases in all")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the first worker's seed")
    parser.add_argument("--hang", type=float, default=1.0, help="CPU seconds that make a hang")
    parser.add_argument("--save", type=Path, default=Path("fuzz-findings"))
    parser.add_argument("--stop-after-crash", action="store_true", help="end at the first")
    args = parser.parse_args()

    context = mp.get_context("fork")
    out = context.Queue()
    share = -(-args.frames // args.workers)
    workers: dict[int, tuple[Any, Any, int, int]] = {}  # seed -> process, at, start, stop

    def spawn(seed: int, start: int, stop: int) -> None:
        at = context.Value("q", start)
        process = context.Process(target=_work, args=(seed, start, stop, at, out, args.hang))
        process.start()
        workers[seed] = (process, at, start, stop)

    for worker in range(args.workers):
        spawn(args.seed + worker, 0, max(0, min(share, args.frames - worker * share)))
    counts = {"done": 0, "crash": 0, "error": 0, "hang": 0}
    first_crash: float | None = None
    reports = 0  # "done" messages still owed by workers that exited normally
    started = time.monotonic()

    def take(message: tuple[str, int, int, str]) -> None:
        nonlocal reports
        kind, seed, index, note = message
        if kind == "done":
            counts["done"] += index
            reports -= 1
            return
        counts[kind] += 1
        _save(args.save, kind, seed, index, note)
        print(f"{kind}: worker {seed} case {index}: {note}", flush=True)

    while workers:
        with suppress(queue.Empty):
            take(out.get(timeout=0.2))
        for seed, (process, at, start, stop) in list(workers.items()):
            if process.exitcode is None:
                continue
            del workers[seed]
            if process.exitcode >= 0:
                reports += 1
                continue
            index = at.value  # died by a signal on this case
            alone = context.Process(target=_replay, args=(seed, index))
            alone.start()
            alone.join()
            counts["crash"] += 1
            counts["done"] += index + 1 - start
            first_crash = first_crash or time.monotonic() - started
            note = f"signal {-process.exitcode}; alone it exits {alone.exitcode}"
            _save(args.save, "crash", seed, index, note)
            print(f"native crash: worker {seed} case {index}: {note}", flush=True)
            if index + 1 < stop and not args.stop_after_crash:
                spawn(seed, index + 1, stop)
    while reports > 0:
        take(out.get())
    seconds = time.monotonic() - started
    print(
        f"{counts['done']:,} cases in {seconds:.1f} s ({counts['done'] / seconds:,.0f} "
        f"cases/s, {args.workers} workers): native crashes {counts['crash']} / "
        f"local errors {counts['error']} / hangs {counts['hang']}"
    )
    if first_crash is not None:
        print(f"first native crash after {first_crash:.1f} s")


if __name__ == "__main__":
    main()
