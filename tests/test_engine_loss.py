"""The engine going away in the middle of a run: an infrastructure failure, not bad usage.

Against a second engine the test owns (``enginekit``), never the machine's own: a run of
``flow-runner/examples-slow`` is started, its dockerd stopped once the container runs, and
the runner must end at once with exit 5, a JSON error on stdout and a report saying what
was lost and when. With the engine down, ``exec`` is bad usage again (exit 2: nothing was
run). Started again on the same data root, the engine still holds the container the runner
could not remove, and ``flow-runner gc`` removes it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from enginekit import SecondEngine, second_engine
from execkit import exec_run, finish, flow_runner, of_run, start, wait_running
from runner.sandbox.docker.engine import KILL_ANSWER, PING_ANSWER
from runner.sandbox.docker.sandbox import CLEANUP_BUDGET

__all__ = ["second_engine"]  # the fixture, imported to be found by pytest

SLOW = "flow-runner/examples-slow:latest"


@pytest.mark.docker
@pytest.mark.slow
def test_an_engine_lost_mid_run_is_an_infrastructure_failure_swept_after_restart(
    docker_client: Any, second_engine: SecondEngine, tmp_path: Path
) -> None:
    second_engine.load(docker_client, SLOW)
    client = second_engine.client()
    report = tmp_path / "report.json"
    runner = start(SLOW, "--input", '{"seconds": 60}', report=report, env=second_engine.env)
    container = wait_running(client, runner)
    stopped = time.monotonic()
    second_engine.terminate()
    ran = finish(runner, report, stopped)
    second_engine.wait()

    assert ran.returncode == 5, ran.stderr
    assert "Traceback" not in ran.stderr
    assert "infrastructure failure" in ran.stderr
    assert ran.seconds < 10, "ended when the engine went, not after the component's 60 s"
    assert ran.error_code == "CHANNEL_LOST"
    details = ran.printed["error"]["details"]
    assert (details["lost"], details["step"]) == ("engine", "run")
    assert second_engine.host in ran.printed["error"]["message"]
    written = ran.report
    assert written is not None, "the report is written"
    assert written["status"] == "failed" and written["error"]["code"] == "CHANNEL_LOST"
    assert written["reasons"][0] == "the Docker engine failed or went away"
    lost = written["lost"]
    assert (lost["what"], lost["step"], lost["container_id"]) == ("engine", "run", container.id)
    assert lost["container_left"]
    assert 0 < lost["seconds"] < 30

    refused = exec_run(SLOW, report=report, env=second_engine.env)
    assert refused.returncode == 2, refused.stderr
    assert "no Docker engine answers" in refused.stderr
    assert refused.printed["error"]["code"] == "ENGINE_UNAVAILABLE"
    assert refused.report is None, "nothing was run"

    second_engine.start()
    client = second_engine.client()
    left = client.containers.list(all=True, filters={"label": of_run(written["run_id"])})
    assert [c.id for c in left] == [container.id]
    swept = flow_runner("gc", env=second_engine.env)
    assert swept.returncode == 0, swept.stderr
    assert container.id in swept.stdout
    assert client.containers.list(all=True, filters={"label": of_run(written["run_id"])}) == []


@pytest.mark.docker
@pytest.mark.slow
def test_a_hung_engine_holds_a_run_no_longer_than_the_kill_and_cleanup_budgets(
    docker_client: Any, second_engine: SecondEngine, tmp_path: Path
) -> None:
    """dockerd stopped (SIGSTOP), not gone: every call hangs. The run ends within its
    deadline, the cancel grace, one kill's answer and ping, and the cleanup budget; before,
    each of three calls waited the client's 60 s."""
    second_engine.load(docker_client, SLOW)
    client = second_engine.client()
    report = tmp_path / "report.json"
    deadline = 3.0
    started = time.monotonic()
    runner = start(SLOW, "--input", '{"seconds": 120}', "--deadline", f"{deadline:g}s",
                   report=report, env=second_engine.env)  # fmt: skip
    wait_running(client, runner)
    assert second_engine.process is not None
    dockerd = second_engine.process.pid
    os.kill(dockerd, signal.SIGSTOP)
    try:
        ran = finish(runner, report, started, timeout=120)
    finally:
        os.kill(dockerd, signal.SIGCONT)
    bound = deadline + 2 + KILL_ANSWER + PING_ANSWER + CLEANUP_BUDGET + 5
    assert ran.seconds < bound, (ran.seconds, ran.stderr[-2000:])
    assert "Traceback" not in ran.stderr
    assert ran.returncode == 5, ran.stderr[-2000:]
    assert ran.error_code == "CHANNEL_LOST"
    assert ran.printed["error"]["details"]["lost"] == "engine"
    swept = flow_runner("gc", env=second_engine.env)
    assert swept.returncode == 0, swept.stderr
