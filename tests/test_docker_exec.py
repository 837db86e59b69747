"""The scripted fake component in a container, through ``flow-runner exec`` and the API.

The same HOST-CASES scenarios as ``test_host_cases.py`` (which runs the fake as a local
process), here in ``flow-runner/fake-component`` (images/fake-component) under a real
sandbox profile: what the user sees (exit status, the printed JSON line, the echoed
stderr, ``--report``) and that no container outlives a run. Graces come from a profile
file with short ones, so every kill happens within a second. Without an engine every test
fails (the ``docker_client`` fixture says how to start one); none skips.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from execkit import (
    FAKE_IMAGE,
    FAKE_SCRIPT,
    StderrTap,
    containers,
    exec_run,
    fake,
    finish,
    interrupt,
    of_run,
    of_runner,
    profile_file,
    start,
    wait_running,
)
from hostkit import ScriptedBroker, output, run
from runner.sandbox.docker.sandbox import DockerSandbox
from runner.sandbox.profiles import load_profile

MIB = 1 << 20
SLOW = "flow-runner/examples-slow:latest"
SPLIT = ("create", "attach", "start", "run", "cleanup")


pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture
def fast(tmp_path: Path) -> Path:
    """The default profile with graces of 0.5 s."""
    return profile_file(tmp_path)


@pytest.fixture
def report(tmp_path: Path) -> Path:
    return tmp_path / "report.json"


def gone(client: Any, written: dict[str, Any]) -> bool:
    """True when no container of the reported run exists any more."""
    return containers(client, of_run(written["run_id"])) == []


# ----- success, and what --report holds ----------------------------------------------


@pytest.mark.docker
def test_success_prints_the_result_and_reports_timings_and_bytes(engine: Any, report: Path) -> None:
    ran = exec_run("--input", '{"name": "Ada"}', *fake("echo"), report=report)
    assert ran.returncode == 0, ran.stderr
    assert ran.printed == {"outcome": "done", "output": {"name": "Ada"}}
    written = ran.report
    assert written is not None
    assert (written["status"], written["outcome"], written["error"]) == ("succeeded", "done", None)
    assert written["reasons"] == ["accepted"]
    assert (written["backend"], written["target"]) == ("docker", FAKE_IMAGE)
    assert (written["exit_code"], written["oom_killed"], written["host_kill"]) == (0, False, None)
    response = {"jsonrpc": "2.0", "id": "host:1", "result": ran.printed}
    assert written["bytes_from_component"] == len(json.dumps(response, separators=(",", ":"))) + 1
    assert written["bytes_to_component"] > len('{"protocol":"run/1","input":{"name":"Ada"}}')
    timings = written["timings"]
    assert set(timings) >= {*SPLIT, "response", "exit", "total"}
    assert all(timings[step] > 0 for step in SPLIT), timings
    assert timings["response"] <= timings["exit"] <= timings["total"]
    assert sum(timings[step] for step in SPLIT) < ran.seconds
    assert gone(engine, written)


@pytest.mark.docker
def test_component_stderr_is_echoed_unless_quiet(report: Path) -> None:  # and PX-06
    line = "e" * 65535 + "\n"
    loud = exec_run(*fake("stderr-1mib"), report=report)
    assert loud.returncode == 0, loud.stderr[-500:]
    assert loud.stderr.count(line) == 16
    assert loud.report is not None and loud.report["stderr_bytes"] == 16 * 65536
    quiet = exec_run("--quiet", *fake("stderr-1mib"), report=report)
    assert quiet.returncode == 0
    assert "eeee" not in quiet.stderr
    assert quiet.report is not None and quiet.report["stderr_bytes"] == 16 * 65536
    assert not quiet.report["stderr_truncated"]


# ----- PX: process exit and completion -----------------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize(
    ("scenario", "code", "exit_code"),
    [("exit0-silent", "CHANNEL_LOST", 0), ("exit7-silent", "EXECUTION_FAILED", 7)],
)
def test_px01_exit_without_a_response(
    report: Path, scenario: str, code: str, exit_code: int
) -> None:
    ran = exec_run(*fake(scenario), report=report)
    assert ran.returncode == 4
    assert ran.error_code == code
    assert ran.printed["error"]["details"] == {"exitCode": exit_code}
    assert f"run failed: {code}" in ran.stderr
    assert ran.report is not None
    assert (ran.report["status"], ran.report["exit_code"]) == ("failed", exit_code)
    assert ran.report["error"]["code"] == code
    assert ran.report["reasons"][0] == "no root response"
    assert ran.report["host_kill"] is None


@pytest.mark.docker
def test_px04_two_mib_of_trailing_bytes_are_drained_and_rejected(report: Path) -> None:
    ran = exec_run(*fake("trailing-2mib"), report=report)
    assert ran.returncode == 4
    assert ran.error_code == "PROTOCOL_ERROR"
    assert "unexpected bytes" in ran.printed["error"]["message"]
    assert ran.report is not None
    # No pipe deadlock: the host read on past the response; it kills the writer once it
    # sees the violation, so whether the writer finished first depends on scheduling; a
    # kill the engine accepted as the writer exited 0 is no kill (tests/test_driver_kill.py).
    assert (ran.report["exit_code"], ran.report["host_kill"]) in ((0, None), (137, "violation"))
    assert ran.report["timings"]["total"] < 5


@pytest.mark.docker
def test_px05_nonzero_exit_after_a_valid_response_fails(report: Path) -> None:
    ran = exec_run(*fake("exit7-after-response"), report=report)
    assert ran.returncode == 4
    assert ran.error_code == "EXECUTION_FAILED"
    assert ran.report is not None
    assert "component exited 7" in ran.report["reasons"]
    assert ran.report["exit_code"] == 7


@pytest.mark.docker
def test_px07_no_exit_after_the_response_is_killed_after_the_exit_grace(
    engine: Any, fast: Path, report: Path
) -> None:
    ran = exec_run("--profile", fast, *fake("no-exit"), report=report)
    assert ran.returncode == 4
    assert ran.error_code == "EXECUTION_FAILED"
    assert "did not exit after its response" in ran.printed["error"]["message"]
    written = ran.report
    assert written is not None
    assert (written["host_kill"], written["exit_code"]) == ("post-response", 137)
    lingered = written["timings"]["exit"] - written["timings"]["response"]
    assert 0.5 <= lingered < 2.5, written["timings"]
    assert gone(engine, written)


# ----- FR-14: the 16 MiB frame bound ---------------------------------------------------


@pytest.mark.docker
def test_fr14_a_response_of_exactly_16_mib_is_accepted(report: Path) -> None:
    ran = exec_run("--quiet", *fake("pad-16mib"), report=report, timeout=120)
    assert ran.returncode == 0, ran.stderr[-500:]
    padding = ran.printed["output"]
    assert len(padding) == 4 and all(set(piece) == {"p"} for piece in padding)
    assert ran.report is not None
    assert ran.report["bytes_from_component"] == 16 * MIB + 1


@pytest.mark.docker
def test_fr14_a_response_of_16_mib_plus_one_is_rejected(report: Path) -> None:
    ran = exec_run("--quiet", *fake("pad-16mib-plus1"), report=report, timeout=120)
    assert ran.returncode == 4
    assert ran.error_code == "PROTOCOL_ERROR"
    assert "exceeds 16,777,216" in ran.printed["error"]["message"]


# ----- RB-02 through the Python API (the CLI admits no capability) ---------------------


@pytest.mark.docker
def test_rb02_65_simultaneous_calls_64_dispatched_the_65th_refused(engine: Any) -> None:
    command = ["python3", FAKE_SCRIPT, "simultaneous-65"]
    sandbox = DockerSandbox(FAKE_IMAGE, load_profile("default"), command, client=engine)
    broker = ScriptedBroker(gather=64)
    execution = run(sandbox, broker=broker)
    assert output(execution) == {"accepted": 64, "rejected": 1}
    assert broker.count("op:") == 64
    assert execution.report.component_requests == 65
    assert execution.report.dispatches == 64
    assert execution.report.backend == "docker"
    assert containers(engine, of_run(execution.report.run_id)) == []


@pytest.mark.docker
@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("uncertain-replay", ["UNCERTAIN", "UNCERTAIN", {"value": "fine"}]),
        ("component-cancels", {"cancelled": "CANCELLED", "after": {"value": 2}}),
    ],
)
def test_call_after_call_over_the_attach_socket(engine: Any, scenario: str, expected: Any) -> None:
    """Each call waits for the previous answer: stdout and stderr readers share the socket
    and neither may sit on bytes filed for the other (this once stalled every 2nd call)."""
    command = ["python3", FAKE_SCRIPT, scenario]
    sandbox = DockerSandbox(FAKE_IMAGE, load_profile("default"), command, client=engine)
    execution = run(sandbox, broker=ScriptedBroker(), deadline=15)
    assert output(execution) == expected


# ----- deadline and cancellation --------------------------------------------------------


@pytest.mark.docker
def test_deadline_kills_a_component_that_ignores_cancellation(
    engine: Any, fast: Path, report: Path
) -> None:
    ran = exec_run("--deadline", "1s", "--profile", fast, *fake("ignore-cancel"), report=report)
    assert ran.returncode == 124
    assert ran.error_code == "DEADLINE_EXCEEDED"
    written = ran.report
    assert written is not None
    assert written["condition"] == "DEADLINE_EXCEEDED"
    assert (written["host_kill"], written["exit_code"]) == ("cancel", 137)
    # The deadline counts from before the container was created; then 0.5 s of grace.
    assert 0.5 < written["timings"]["exit"] < 1 + 0.5 + 3, written["timings"]
    assert gone(engine, written)


@pytest.mark.docker
def test_ctrl_c_cancels_and_kills_after_the_cancel_grace(
    engine: Any, fast: Path, report: Path
) -> None:
    runner = start("--profile", fast, *fake("ignore-cancel"), report=report)
    wait_running(engine, runner)
    interrupted = time.monotonic()
    interrupt(runner)
    ran = finish(runner, report, interrupted)
    assert ran.returncode == 130, ran.stderr
    assert ran.error_code == "CANCELLED"
    assert "cancelling (again to kill now)" in ran.stderr
    assert 0.5 <= ran.seconds < 0.5 + 3
    written = ran.report
    assert written is not None
    assert (written["condition"], written["host_kill"]) == ("CANCELLED", "cancel")
    assert gone(engine, written)


@pytest.mark.docker
def test_a_second_ctrl_c_kills_at_once(engine: Any, tmp_path: Path, report: Path) -> None:
    patient = profile_file(tmp_path, "patient", cancel_grace=30.0)
    runner = start("--profile", patient, *fake("ignore-cancel"), report=report)
    tap = StderrTap(runner)
    wait_running(engine, runner)
    interrupted = time.monotonic()
    interrupt(runner)
    tap.wait_for("cancelling (again to kill now)")  # the first was taken as a cancel
    interrupt(runner)
    ran = finish(runner, report, interrupted, tap=tap)
    assert ran.returncode == 130, ran.stderr
    assert ran.error_code == "CANCELLED"
    assert ran.seconds < 5, "killed at once, not after the 30 s grace"
    assert ran.report is not None and ran.report["host_kill"] == "cancel"
    assert gone(engine, ran.report)


@pytest.mark.docker
def test_sighup_cancels_and_removes_the_container(engine: Any, fast: Path, report: Path) -> None:
    """A terminal that closes, or an ssh session that drops, sends SIGHUP, whose default
    action would end flow-runner at once with its container still running."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # whatever this suite inherited
    try:
        runner = start("--profile", fast, *fake("ignore-cancel"), report=report)
    finally:
        signal.signal(signal.SIGHUP, previous)
    wait_running(engine, runner)
    hung_up = time.monotonic()
    runner.send_signal(signal.SIGHUP)
    ran = finish(runner, report, hung_up)
    assert ran.returncode == 130, ran.stderr
    assert ran.error_code == "CANCELLED"
    written = ran.report
    assert written is not None
    assert (written["condition"], written["host_kill"]) == ("CANCELLED", "cancel")
    assert gone(engine, written)


@pytest.mark.docker
def test_under_nohup_a_sighup_does_not_stop_the_run(engine: Any, report: Path) -> None:
    """``nohup`` starts a command with SIGHUP ignored so that it outlives the session:
    then the hang-up is not a stop."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # inherited, as nohup does
    try:
        runner = start(SLOW, "--input", '{"seconds": 2}', report=report)
    finally:
        signal.signal(signal.SIGHUP, previous)
    wait_running(engine, runner)
    runner.send_signal(signal.SIGHUP)
    ran = finish(runner, report, time.monotonic())
    assert ran.returncode == 0, ran.stderr
    assert ran.report is not None and ran.report["condition"] is None


@pytest.mark.docker
def test_sigterm_cancels_a_cooperative_component_without_a_kill(
    engine: Any, fast: Path, report: Path
) -> None:
    runner = start("--profile", fast, *fake("cooperative-cancel"), report=report)
    wait_running(engine, runner)
    runner.send_signal(signal.SIGTERM)
    ran = finish(runner, report, time.monotonic())
    assert ran.returncode == 130, ran.stderr
    assert ran.error_code == "CANCELLED"
    assert ran.printed["error"]["details"] == {"afterCancel": "OWNER_CLOSED"}
    written = ran.report
    assert written is not None
    assert (written["host_kill"], written["exit_code"]) == (None, 0)
    assert written["reasons"] == ["accepted: the component answered with an error"]


@pytest.mark.docker
def test_a_container_removed_under_a_live_run_fails_the_run(engine: Any, report: Path) -> None:
    """``docker rm -f`` from outside (or a wrong gc): a Run failure, judged and reported."""
    runner = start(SLOW, "--input", '{"seconds": 60}', report=report)
    container = wait_running(engine, runner)
    removed = time.monotonic()
    container.remove(force=True)
    ran = finish(runner, report, removed)
    assert ran.returncode == 4, ran.stderr
    assert "Traceback" not in ran.stderr
    assert ran.error_code == "CHANNEL_LOST"
    assert "removed by someone else" in ran.printed["error"]["message"]
    assert ran.printed["error"]["details"]["lost"] == "container"
    assert ran.seconds < 10, "ended when the container went, not after the component's 60 s"
    written = ran.report
    assert written is not None
    assert written["status"] == "failed" and written["error"]["code"] == "CHANNEL_LOST"
    assert written["reasons"][0] == "the container was removed by someone else"
    lost = written["lost"]
    assert (lost["what"], lost["step"], lost["container_id"]) == ("container", "run", container.id)
    assert not lost["container_left"]
    assert 0 < lost["seconds"] < 30


# ----- refusals -------------------------------------------------------------------------


@pytest.mark.docker
def test_a_missing_image_is_a_usage_error_and_nothing_runs(report: Path) -> None:
    ran = exec_run("flow-runner/no-such-image:latest", report=report)
    assert ran.returncode == 2
    assert "never pulls" in ran.stderr
    assert ran.error_code == "IMAGE_MISSING"
    assert ran.report is None


@pytest.mark.docker
@pytest.mark.parametrize("case", ["newline-name", "257", "socket", "root-profile"])
def test_a_refused_attachment_or_profile_is_a_usage_error_and_no_container_is_made(
    engine: Any, tmp_path: Path, case: str
) -> None:
    args = ["--attach", f"data={tmp_path}"]
    if case == "newline-name":
        args = ["--attach", f"abc\n={tmp_path}"]
    elif case == "257":
        args = [arg for i in range(257) for arg in ("--attach", f"a{i}={tmp_path}")]
    elif case == "socket":  # under a harmless name, as a hard link to an engine's would be
        args = ["--attach", f"data={tmp_path / 'data.bin'}"]
    elif case == "root-profile":
        args += ["--profile", str(profile_file(tmp_path, user="0:0"))]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(tmp_path / "data.bin"))
        started = time.monotonic()
        process = start(*args, *fake("echo"))
        ran = finish(process, None, started)
    assert ran.returncode == 2, ran.stderr[-2000:]  # refused before launch: exit 2, error on stdout
    assert ran.printed["error"]["code"] in ("INVALID_ATTACHMENTS", "INVALID_PROFILE")
    assert "refused" in ran.stderr or "not a LocalName" in ran.stderr or "257" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert containers(engine, of_runner(process.pid)) == []
