"""What a hostile component can make the host hold, measured on a real ``flow-runner``.

Each test runs ``python -m runner.cli exec`` as a subprocess and reads its peak RSS from
``os.wait4`` (the runner alone: its component is a grandchild). The component is the fake
(``fake_component.py``): ``many-calls`` issues capability calls to a ``kv`` binding
(small answers: ``list`` returns no keys, ``get`` refuses the input ``INVALID_INPUT``),
``stderr-flood`` writes stderr without end and never answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from rsskit import measured, peak_kib

ROOT = Path(__file__).resolve().parents[1]
FAKE = [sys.executable, str(ROOT / "tests" / "fake_component.py")]
MIB = 1 << 20


@dataclass
class Measured:
    returncode: int
    stdout: str
    peak_mib: float
    seconds: float

    @property
    def output(self) -> Any:
        assert self.returncode == 0, self.stdout
        return json.loads(self.stdout)["output"]


def measure(args: list[str], stderr: int | IO[bytes], timeout: float) -> tuple[Measured, Any]:
    """Run ``flow-runner exec ARGS``; killed (and the test failed) after ``timeout`` s."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "peak"
        process = subprocess.Popen(
            measured([*FAKE[:1], "-m", "runner.cli", "exec", *args], report),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        timer = threading.Timer(timeout, process.kill)  # the runner dies with the launcher
        timer.start()
        assert process.stdout is not None
        stdout = process.stdout.read()  # one line, at the end
        process.wait()
        timer.cancel()
        seconds = time.monotonic() - started
        assert seconds < timeout, f"flow-runner exec {args} still ran after {timeout} s"
        peak = peak_kib(report) / 1024
    return Measured(process.returncode, stdout.decode(), peak, seconds), process


def many_calls(tmp_path: Path, plan: dict[str, Any], timeout: float) -> Measured:
    """The fake's ``many-calls`` as a configured flow with a kv binding, defaults limits."""
    command = ", ".join(json.dumps(part) for part in [*FAKE, "many-calls"])
    config = tmp_path / "flow-runner.toml"
    config.write_text(f"""
[flows.many]
command = [{command}]

[flows.many.capabilities.kv]
provider = "kv"
options = {{ path = "kv.sqlite3" }}
""")  # fmt: skip
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        args = ["many", "--config", str(config), "--input", json.dumps(plan)]
        ran, _ = measure(args, stderr, timeout)
    return ran


def test_operations_with_large_params_keep_only_a_digest(tmp_path: Path) -> None:
    """150 calls with 8 MiB of params each (1.2 GiB in all), half of them failing: the
    ledger keeps a SHA-256 and a small result or error per operation. Bound: 400 MiB
    (measured about 100; 1.3 GiB for 150 successes before, 1 GiB for 60 failures)."""
    plan = {"calls": 150, "bytes": 8 * MIB, "methods": ["list", "get"]}
    ran = many_calls(tmp_path, plan, timeout=300)  # 15-60 s on a busy machine
    assert ran.output == {"succeeded": 75, "failed": {"INVALID_INPUT": 75}}
    assert ran.peak_mib < 400, f"peak RSS {ran.peak_mib:.0f} MiB"


def test_5000_small_operations_all_succeed_within_the_default_budget(tmp_path: Path) -> None:
    """The default byte budget serves an ordinary component (was: 1,024 operations, then
    RESOURCE_EXHAUSTED for the other 3,976). Bound: 150 MiB (measured about 55)."""
    ran = many_calls(tmp_path, {"calls": 5000, "window": 64}, timeout=120)
    assert ran.output == {"succeeded": 5000, "failed": {}}
    assert ran.peak_mib < 150, f"peak RSS {ran.peak_mib:.0f} MiB"


def test_a_stderr_pipe_nobody_reads_blocks_neither_the_deadline_nor_the_exit() -> None:
    """The runner's own stderr is a pipe never read while it runs: the echo drops what
    does not fit and says so, the deadline (2 s) wins and the runner exits 124 within one
    grace (2 s) and the echo's give-up (1 s); it was still running at 40 s. The flood is
    bounded in the host too. Bound: 15 s, 150 MiB (measured about 5 s and 45 MiB)."""
    args = ["--process", "--deadline", "2s", "--", *FAKE, "stderr-flood"]
    ran, process = measure(args, subprocess.PIPE, timeout=15)
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert ran.returncode == 124, (ran.stdout, stderr[-2000:])
    assert json.loads(ran.stdout)["error"]["code"] == "DEADLINE_EXCEEDED"
    assert "bytes of the component's stderr dropped here" in stderr, stderr[-2000:]
    assert "run failed: DEADLINE_EXCEEDED" in stderr, "the runner's own last line fits"
    assert ran.peak_mib < 150, f"peak RSS {ran.peak_mib:.0f} MiB"


# --- stdout the host cannot take as fast as it comes ----------------------------------

SLOW_FRAMES = """
import sys
# 11 MiB, valid, 240,000 values: objects with floats and blanks take the decoder's pure
# path, about 0.2 s each in the host's worker thread (the pump reads nothing meanwhile).
one = b'{          "%s"          :          1.5          }' % (b"k" * 40)
inner = b",          ".join([one] * 60000)
params = b'{"binding":"kv","operation":"get","input":[[%s],[%s]]}' % (inner, inner)
call = b'{"jsonrpc":"2.0","id":"c%d","method":"capability/call","params":%s}\\n'
out = sys.stdout.buffer
for i in range(int(sys.argv[1])):
    out.write(call % (i, params))
if sys.argv[2] == "oversize":
    out.write(b"x" * (17 << 20))  # no LF: the frame bound ends the run
out.flush()
sys.stdin.buffer.read()  # until the host kills it
"""
PLAN_IMAGE = "flow-runner/channel-plan:latest"
"""An image with python3, whose command the tests replace."""


def slow_frames(backend: str, frames: int, ending: str, deadline: str) -> Measured:
    """A component that writes ``frames`` large frames, each slow to decode, as fast as
    its stdout takes them, then (``oversize``) a line over the frame bound, and waits."""
    command = ["python3", "-c", SLOW_FRAMES, str(frames), ending]
    target = ["--process", "--", *command] if backend == "process" else ["--", PLAN_IMAGE, *command]
    ran, _ = measure(["--quiet", "--deadline", deadline, *target], subprocess.DEVNULL, 120)
    return ran


def assert_ended_by_the_oversize_line(ran: Measured) -> None:
    error = json.loads(ran.stdout)["error"]
    assert (ran.returncode, error["code"]) == (4, "PROTOCOL_ERROR"), ran.stdout
    assert "exceeds 16,777,216 bytes without an LF" in error["message"]
    assert error["details"]["exitCode"] == 137  # the host killed it for the violation


@pytest.mark.docker
@pytest.mark.usefixtures("engine")  # and no container left behind
def test_attach_stdout_faster_than_the_host_decodes_waits_in_the_container() -> None:
    """40 frames of 11 MiB (440 MiB), each ~0.2 s to decode, then a line over the bound:
    what the host has not taken yet stays within the stdout bound (20 MiB,
    runner/sandbox/docker/attach.py), the component waits on its writes, and the
    oversize line ends the run as usual (PROTOCOL_ERROR, killed). Bound: 250 MiB
    (measured 180 to 186; 320 to 412 before the bound, as much of the 440 MiB as the
    engine delivered during the decodes)."""
    ran = slow_frames("docker", 40, "oversize", "60s")
    assert_ended_by_the_oversize_line(ran)
    assert ran.peak_mib < 250, f"peak RSS {ran.peak_mib:.0f} MiB"


def test_pipe_stdout_faster_than_the_host_decodes_waits_in_the_process() -> None:
    """The same over the process backend's pipes (256 KiB each, runner/sandbox/pipes.py).
    Bound: 250 MiB (measured about 140)."""
    ran = slow_frames("process", 40, "oversize", "60s")
    assert_ended_by_the_oversize_line(ran)
    assert ran.peak_mib < 250, f"peak RSS {ran.peak_mib:.0f} MiB"


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_paused_attach_socket_holds_back_neither_the_deadline_nor_the_kill() -> None:
    """Large slow frames without end (4.4 GB, ~80 s of decoding): the attach socket is
    paused whenever the host is 20 MiB behind, and the deadline (3 s) still cancels, the
    grace still kills, and the end of the stream is still seen. Bound: 250 MiB (measured
    160 to 180; 160 to 250 before the bound: while a decode holds the GIL the loop reads
    little, so this guards the ending more than the memory)."""
    ran = slow_frames("docker", 400, "none", "3s")
    error = json.loads(ran.stdout)["error"]
    assert (ran.returncode, error["code"]) == (124, "DEADLINE_EXCEEDED"), ran.stdout
    assert ran.peak_mib < 250, f"peak RSS {ran.peak_mib:.0f} MiB"
