"""A request flood from a component that never reads its stdin ends at its deadline.

The component reads its ``flow/run``, then writes 65,537 requests of about 1 KiB each (a
method name of 256 emoji, answered ``-32601``) and never reads again. The host stops
reading once the answers it owes pass its backlog bound, the component then blocks on its
write, and the engine cannot finish a kill until the container's output has been taken.
The run must still end as ``DEADLINE_EXCEEDED`` (exit 124) within the cancel grace plus a
small margin of its deadline, with no container left, whether the flood comes from the
root or from a child flow. Graces are 0.5 s (a profile file next to the run).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from execkit import containers, exec_run, finish, of_runner, profile_file, start

BASE = "flow-runner/base:bookworm"
RELAY = "flow-runner/relay:latest"
GRACE = 0.5
MARGIN = 5.0
"""Seconds allowed past the deadline and the grace: start-up, the kill and the removal."""
FLOOD = """
import json, os
buffered = b""
while b"\\n" not in buffered:
    buffered += os.read(0, 1 << 16)
name = "\\U0001F600" * 256
for i in range(65537):
    frame = {"jsonrpc": "2.0", "id": f"c{i}", "method": name, "params": {}}
    view = memoryview((json.dumps(frame, ensure_ascii=False) + "\\n").encode())
    while view:
        view = view[os.write(1, view):]
os.read(0, 1)
"""

pytestmark = pytest.mark.usefixtures("engine")


@pytest.mark.docker
def test_a_flood_that_never_reads_stdin_ends_at_its_deadline(engine: Any, tmp_path: Path) -> None:
    profile = profile_file(tmp_path, "fast", cancel_grace=GRACE, exit_grace=GRACE)
    report = tmp_path / "report.json"
    deadline = 6.0
    started = time.monotonic()
    runner = start(
        BASE, "--profile", profile, "--deadline", f"{deadline:g}s", "--", "python3", "-c", FLOOD,
        report=report,
    )  # fmt: skip
    ran = finish(runner, report, started, timeout=90)
    assert ran.returncode == 124, (ran.stdout, ran.stderr[-2000:])
    assert ran.error_code == "DEADLINE_EXCEEDED"
    assert ran.seconds < deadline + GRACE + MARGIN, ran.seconds
    assert containers(engine, of_runner(runner.pid)) == []


@pytest.mark.docker
def test_a_child_flow_flooding_ends_with_its_root_at_the_deadline(
    engine: Any, tmp_path: Path
) -> None:
    profile_file(tmp_path, "fast", cancel_grace=GRACE, exit_grace=GRACE)
    config = tmp_path / "flow-runner.toml"
    config.write_text(
        f'[flows.top]\nimage = "{RELAY}"\nprofile = "fast.toml"\nchildren = {{ f = "flood" }}\n'
        f'[flows.flood]\nimage = "{BASE}"\nprofile = "fast.toml"\n'
        f"command = {json.dumps(['python3', '-c', FLOOD])}\n"
    )
    plan = {"calls": [{"op": "f1", "slot": "f", "input": None}]}
    deadline = 8.0
    ran = exec_run(
        "top", "--config", config, "--input", json.dumps(plan), "--deadline", f"{deadline:g}s",
        report=tmp_path / "report.json", timeout=90,
    )  # fmt: skip
    assert ran.returncode == 124, (ran.stdout, ran.stderr[-2000:])
    assert ran.error_code == "DEADLINE_EXCEEDED"
    assert ran.seconds < deadline + GRACE + MARGIN, ran.seconds
    assert ran.report is not None
    (child,) = ran.report["children"]
    assert child["error"]["code"] in ("DEADLINE_EXCEEDED", "CANCELLED"), child["error"]
