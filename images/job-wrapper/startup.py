"""Start-up cost of the frozen wrapper beside the runner image's own ``flow-runner job``.

Runs itself inside one container of the runner image (read-only root, uid 65534, network
none) with this checkout's frozen wrapper (.build/job-wrapper) mounted at /flow/wrapper
and the fake component at /m, then times, interleaved, each command's ``--help`` and a
whole job (``--input {"a": 1} -- python3 fake_component.py echo``): wall time, CPU time
(user + system, the waited process and its children) and peak RSS (the largest of them),
medians of N runs. ``component alone`` is the fake component answering the same run
with no wrapper around it, and ``python3 -c pass`` for ``--help``.

    .venv/bin/python images/job-wrapper/startup.py [RUNS] [RUNNER_IMAGE]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
REQUEST = (
    b'{"jsonrpc":"2.0","id":"r","method":"flow/run","params":{"protocol":"run/1","input":1,'
    b'"settings":{},"attachments":{},"scratch":"/tmp","deadlineUnixMs":99999999999999}}\n'
)
FAKE = ["python3", "/m/fake_component.py", "echo"]
JOB = ["--termination-log", "/tmp/tl", "--input", '{"a": 1}', "--scratch", "/tmp", "--", *FAKE]
CASES: dict[str, list[str] | None] = {
    "flow-runner job (in image)": ["/opt/flow-runner/bin/flow-runner", "job"],
    "frozen (/flow/wrapper)": ["/flow/wrapper/flow-runner-job"],
    "component alone": None,
}


def once(argv: list[str] | None, kind: str) -> tuple[float, float, float]:
    if argv is None:
        full = FAKE if kind == "job" else ["python3", "-c", "pass"]
    else:
        full = [*argv, "--help"] if kind == "help" else [*argv, *JOB]
    started = time.perf_counter()
    process = subprocess.Popen(
        full, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None
    if argv is None and kind == "job":
        process.stdin.write(REQUEST)
    process.stdin.close()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, (full, process.returncode)
    wall = time.perf_counter() - started
    return wall * 1000, (usage.ru_utime + usage.ru_stime) * 1000, usage.ru_maxrss / 1024


def inside(runs: int) -> None:
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for _ in range(runs):
        for name, argv in CASES.items():
            for kind in ("help", "job"):
                results.setdefault((name, kind), []).append(once(argv, kind))
    for name in CASES:
        row = []
        for kind in ("help", "job"):
            samples = zip(*results[(name, kind)], strict=True)
            wall, cpu, rss = (statistics.median(x) for x in samples)
            row.append(f"{kind} {wall:4.0f} ms wall {cpu:4.0f} ms cpu {rss:5.1f} MiB")
        print(f"{name:27s} " + " | ".join(row))


def main() -> None:
    runs = sys.argv[1] if len(sys.argv) > 1 else "21"
    image = sys.argv[2] if len(sys.argv) > 2 else "flow-runner:latest"
    mounts = ["-v", f"{ROOT / '.build' / 'job-wrapper'}:/flow/wrapper:ro"]
    mounts += ["-v", f"{ROOT / 'tests' / 'fake_component.py'}:/m/fake_component.py:ro"]
    mounts += ["-v", f"{Path(__file__).resolve()}:/m/startup.py:ro"]
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--user", "65534:65534", "--read-only",
         "--tmpfs", "/tmp:size=64m", *mounts, "--entrypoint", "python3", image,
         "/m/startup.py", "--inside", runs],
        check=True,
    )  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        inside(int(sys.argv[2]))
    else:
        main()
