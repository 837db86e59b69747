"""Benchmark: channel items from one container to another through the host, against raw echo.

Side by side in one process run, interleaved round by round, every container from the same
image (``flow-runner/channel-plan``, tests/components/channel_plan.py, the SDK) under the
default sandbox profile, for small items (a 64-character string) and 1 MiB items (a
1,048,576-character string):

- *host*: a run tree in this process's ``FlowHost``. The root creates two direct pairs,
  *data* and *go*, and runs two children at once: W gets the writer of *data* and the
  reader of *go*, R the reader of *data* and the writer of *go*. R sends one item on *go*
  and then reads *data* to its end, counting; W waits for that item, then sends the item
  N times on *data* (one ``channel/send`` at a time, as the SDK's ``await send`` does) and
  closes it. Every item crosses two attach sockets and is handled by the host twice: W's
  ``channel/send`` request (and its reply) and R's ``channel/next`` request (and the reply
  that carries the item).
- *raw*: one container of the same image with its command replaced by a Python loop that
  echoes every stdin line to stdout (flushing each), launched by ``DockerSandbox`` with
  the same profile, so over the same attach socket and the same anyio streams as the host
  uses, with no JSON-RPC. This process writes N lines (the item's JSON text, one ``send``
  each) while it reads them back; every line also crosses the attach socket twice.
- *raw lock-step*: the same echo, one line at a time (send, wait for its echo): the
  latency-bound shape of the SDK, whose sends and reads each wait for their reply.

What is timed is the streaming phase alone: container start (about 1 s for three at once
on this machine, varying by hundreds of ms from run to run) is not what this measures.
In the host tree the components time it: W reads ``time.monotonic()`` after the *go* item
arrived, just before its first send, and R after it saw the end of *data*. Containers
share the kernel's CLOCK_MONOTONIC (Docker gives them no time namespace), so the two
readings subtract; the script checks that they fall inside this process's own readings
around the run and in order. N=0 subtracted from N would count the same phase but carry
the start-up noise of three containers. The raw side is timed here, from just before the
first line is written to the last echoed byte read, after one line went round first (so
the container is up and reading).

Throughput: items/s = N / seconds, MB/s = N × (bytes of the item's JSON text) / seconds /
10^6 (66 and 1,048,578 bytes; the raw lines carry the same text and a newline). Reported:
the medians over the rounds, the ratio host/raw (median of the per-round ratios), and CPU
per item during the stream: of this process (sampled every 5 ms by a thread, interpolated
at the components' timestamps), of the engine (``dockerd``'s user + system time from
``/proc``, sampled alike: it copies every byte between a container's pipes and the attach
socket, so a relayed item costs it twice what an echoed line does) and of W and R (their
``time.process_time()``).

``--profile`` instead runs each host case once under cProfile (this process: the host)
and prints where the host's time goes.

    .venv/bin/python bench/channels.py [--rounds 5] [--small 5000] [--big 64] [--profile]
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import json
import os
import pstats
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from runner.config import load_config
from runner.flows import FlowHost
from runner.json1 import JSONValue
from runner.sandbox.base import LaunchRequest
from runner.sandbox.docker.sandbox import DockerSandbox
from runner.sandbox.profiles import load_profile

IMAGE = "flow-runner/channel-plan:latest"
ECHO = (
    "import sys\n"
    "r, w = sys.stdin.buffer, sys.stdout.buffer\n"
    "for line in r:\n"
    "    w.write(line)\n"
    "    w.flush()\n"
)
PATTERN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"  # 64 characters


@dataclass
class Measured:
    seconds: float
    host_cpu: float
    """CPU seconds of this process during the stream."""
    engine_cpu: float
    """CPU seconds of the engine (``dockerd``, which copies every byte of a container's
    stdio between its pipes and the attach socket) during the stream."""
    writer_cpu: float | None = None
    reader_cpu: float | None = None


def engine_pid() -> int | None:
    """The pid of the ``dockerd`` this machine runs, if one is visible here."""
    for proc in Path("/proc").iterdir():
        with suppress(OSError):
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "dockerd":
                return int(proc.name)
    return None


ENGINE_PID = engine_pid()
TICK = os.sysconf("SC_CLK_TCK")


def engine_cpu() -> float:
    """CPU seconds ``dockerd`` has used (user + system); 0 if it is not visible."""
    if ENGINE_PID is None:
        return 0.0
    with suppress(OSError):
        fields = Path(f"/proc/{ENGINE_PID}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    return 0.0


def item_of(chars: int) -> str:
    return (PATTERN * (chars // len(PATTERN) + 1))[:chars]


def write_config(directory: Path, image: str) -> Path:
    """A root flow with two child slots, W and R; every flow from ``image``."""
    path = directory / "flow-runner.toml"
    path.write_text(
        f'[flows.root]\nimage = "{image}"\nchildren = {{ w = "writer", r = "reader" }}\n\n'
        f'[flows.writer]\nimage = "{image}"\n\n[flows.reader]\nimage = "{image}"\n'
    )
    return path


def tree_plan(item: str, n: int) -> JSONValue:
    writer: JSONValue = {
        "steps": [
            {"read": "port:go", "count": True, "log": "go"},
            {"clock": "t0"},
            {"send": "port:out", "repeat": n, "item": item, "close": True, "log": "sent"},
            {"clock": "t1"},
        ]
    }
    reader: JSONValue = {
        "steps": [
            {"clock": "ready"},
            {"send": "port:go", "values": [True], "close": True, "log": "go"},
            {"read": "port:in", "count": True, "log": "read"},
            {"clock": "t1"},
        ]
    }
    return {
        "steps": [
            {"create": "data"},
            {"create": "go"},
            {
                "all": [
                    {"child": "w", "op": "w", "input": writer, "log": "w",
                     "channels": {"out": "data.send", "go": "go.receive"}},
                    {"child": "r", "op": "r", "input": reader, "log": "r",
                     "channels": {"in": "data.receive", "go": "go.send"}},
                ]
            },
        ]
    }  # fmt: skip


class CpuSampler:
    """(monotonic, process CPU, engine CPU) every ``period`` seconds, from a thread."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), time.process_time(), engine_cpu()))
            if self._stop.wait(self.period):
                self.samples.append((time.monotonic(), time.process_time(), engine_cpu()))
                return

    @contextmanager
    def running(self) -> Iterator[CpuSampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def cpu_at(self, moment: float, which: int = 1) -> float:
        """CPU seconds at ``moment`` of this process (``which`` 1) or of the engine (2),
        interpolated between the samples around it."""
        times = [sample[0] for sample in self.samples]
        i = min(max(bisect.bisect_left(times, moment), 1), len(times) - 1)
        t_a, c_a = self.samples[i - 1][0], self.samples[i - 1][which]
        t_b, c_b = self.samples[i][0], self.samples[i][which]
        return c_a + (c_b - c_a) * (moment - t_a) / (t_b - t_a) if t_b > t_a else c_b


def through_host(config: Path, item: str, n: int) -> Measured:
    """One tree: W sends ``item`` ``n`` times to R through the host; the stream's time."""

    async def main() -> JSONValue:
        host = FlowHost(load_config(config))
        try:
            execution = await host.run("root", tree_plan(item, n), deadline_seconds=300)
        finally:
            await host.aclose()
        if execution.verdict.result is None:
            raise RuntimeError(f"the tree failed: {execution.report_json()[:2000]}")
        return execution.verdict.result["output"]

    before = time.monotonic()
    with CpuSampler().running() as sampler:
        output = anyio.run(main)
    after = time.monotonic()
    log = output["log"]  # type: ignore[index,call-overload]
    w, r = log["w"]["output"]["log"], log["r"]["output"]["log"]
    if w.get("sent") != "ok" or r["read"].get("count") != n or r["read"].get("end") != n:
        raise RuntimeError(f"the stream did not complete: W {w}, R {r}")
    (start, w_cpu0), (w_end, w_cpu1) = w["t0"], w["t1"]
    (_, r_cpu0), (end, r_cpu1) = r["ready"], r["t1"]
    # W's own end may come after R saw the end (the close reply is still on its way to W)
    if not (before < start < end < after and start < w_end < after):
        raise RuntimeError(f"clocks out of order: {before} {start} {w_end} {end} {after}")
    host_cpu = sampler.cpu_at(end) - sampler.cpu_at(start)
    engine = sampler.cpu_at(end, 2) - sampler.cpu_at(start, 2)
    return Measured(end - start, host_cpu, engine, w_cpu1 - w_cpu0, r_cpu1 - r_cpu0)


def through_raw(item: str, n: int, lockstep: bool) -> Measured:
    """One container echoing lines: ``n`` lines of the item's JSON text, written and read."""
    line = json.dumps(item).encode() + b"\n"
    sandbox = DockerSandbox(IMAGE, load_profile("default"), command=["python3", "-c", ECHO])

    async def main() -> Measured:
        async with sandbox.launch(LaunchRequest()) as running:
            stdin, stdout = running.stdin, running.stdout
            await stdin.send(b"ready\n")
            await read_lines(stdout, 1)
            cpu0, engine0, started = time.process_time(), engine_cpu(), time.monotonic()
            if lockstep:
                for _ in range(n):
                    await stdin.send(line)
                    await read_lines(stdout, 1)
            else:

                async def write() -> None:
                    for _ in range(n):
                        await stdin.send(line)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(write)
                    await read_lines(stdout, n)
            seconds, cpu = time.monotonic() - started, time.process_time() - cpu0
            measured = Measured(seconds, cpu, engine_cpu() - engine0)
            await stdin.aclose()
            if await running.wait() != 0:
                raise RuntimeError("the echo container failed")
            return measured

    return anyio.run(main)


async def read_lines(stdout: ByteReceiveStream, lines: int) -> None:
    """Read until ``lines`` newlines came (the echo writes nothing else)."""
    seen = 0
    while seen < lines:
        seen += (await stdout.receive(1 << 20)).count(b"\n")
    if seen != lines:
        raise RuntimeError(f"read {seen} lines, expected {lines}")


def profile_host(config: Path, cases: dict[str, tuple[str, int]], top: int) -> None:
    """Each host case once under cProfile (this process only: the host's side)."""
    for name, (item, n) in cases.items():
        profiler = cProfile.Profile()
        profiler.enable()
        measured = through_host(config, item, n)
        profiler.disable()
        rate, cpu = n / measured.seconds, measured.host_cpu / n * 1e6
        print(f"\n== {name}: {rate:,.0f} items/s under the profiler; "
              f"host CPU {cpu:.0f} µs/item during the stream ==")  # fmt: skip
        pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def paired(values: list[float], baseline: list[float]) -> float:
    """The median of the per-round ratios ``values[i] / baseline[i]``."""
    return statistics.median(v / b for v, b in zip(values, baseline, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", type=int, default=5000, help="items of 64 characters")
    parser.add_argument("--big", type=int, default=64, help="items of 1 MiB")
    parser.add_argument("--image", default=IMAGE)
    parser.add_argument("--profile", action="store_true", help="cProfile the host instead")
    args = parser.parse_args()
    config = write_config(Path(tempfile.mkdtemp()), args.image)
    cases = {
        "64 B": (item_of(64), args.small),
        "1 MiB": (item_of(1 << 20), args.big),
    }
    if args.profile:
        through_host(config, item_of(64), 10)  # warm-up: image inspect, client
        profile_host(config, cases, 25)
        return

    sides: dict[str, Callable[[str, int], Measured]] = {
        "host": lambda item, n: through_host(config, item, n),
        "raw": lambda item, n: through_raw(item, n, lockstep=False),
        "raw lock-step": lambda item, n: through_raw(item, n, lockstep=True),
    }
    for item, _ in cases.values():  # warm-up: image and page caches, the in-process client
        for run in sides.values():
            run(item, 10)
    results: dict[tuple[str, str], list[Measured]] = {
        (case, side): [] for case in cases for side in sides
    }
    for _ in range(args.rounds):
        for case, (item, n) in cases.items():
            for side, run in sides.items():
                results[case, side].append(run(item, n))

    print(f"image {args.image}, default profile, {args.rounds} rounds (medians)\n")
    print("| items | side | N | items/s | MB/s | ÷ raw | ÷ raw lock-step | "
          "host CPU µs/item | engine CPU µs/item | W CPU µs/item | R CPU µs/item |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case, (item, n) in cases.items():
        size = len(json.dumps(item))
        raw = [m.seconds for m in results[case, "raw"]]
        step = [m.seconds for m in results[case, "raw lock-step"]]
        for side in sides:
            ms = results[case, side]
            seconds = [m.seconds for m in ms]
            median = statistics.median(seconds)
            # a rate ratio is the inverse of the time ratio
            vs_raw, vs_step = paired(raw, seconds), paired(step, seconds)
            w = [m.writer_cpu for m in ms if m.writer_cpu is not None]
            r = [m.reader_cpu for m in ms if m.reader_cpu is not None]
            host_us = statistics.median(m.host_cpu for m in ms) / n * 1e6
            engine_us = statistics.median(m.engine_cpu for m in ms) / n * 1e6
            w_us = f"{statistics.median(w) / n * 1e6:,.0f}" if w else ""
            r_us = f"{statistics.median(r) / n * 1e6:,.0f}" if r else ""
            rate, mbps = n / median, n * size / median / 1e6
            print(f"| {case} | {side} | {n:,} | {rate:,.0f} | {mbps:,.2f} | {vs_raw:.2f} | "
                  f"{vs_step:.2f} | {host_us:,.0f} | {engine_us:,.0f} | {w_us} | "
                  f"{r_us} |")  # fmt: skip
    print("\nper round, items/s (host / raw / raw lock-step):")
    for case, (_, n) in cases.items():
        rows = zip(*(results[case, side] for side in sides), strict=True)
        print(f"  {case}: " + ", ".join(
            " / ".join(f"{n / m.seconds:,.0f}" for m in row) for row in rows))  # fmt: skip


if __name__ == "__main__":
    main()
