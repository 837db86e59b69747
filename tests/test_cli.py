"""``flow-runner`` as a user meets it: real subprocesses, real exit statuses, real signals."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from hostkit import FAKE
from rsskit import measured, peak_kib
from runner import json1
from runner.sandbox.base import Attachment, LaunchRequest
from runner.sandbox.process import ProcessSandbox

CLI = [sys.executable, "-m", "runner.cli"]


def flow_runner(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def exec_fake(scenario: str, *args: str) -> subprocess.CompletedProcess[str]:
    return flow_runner("exec", "--process", *args, "--", sys.executable, str(FAKE), scenario)


def test_version_and_help() -> None:
    version = flow_runner("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("flow-runner ")
    assert "exec" in flow_runner("--help").stdout
    # The argument's own help text shows (click 8.5 with typer 0.19 dropped it).
    assert "a flow NAME from" in " ".join(flow_runner("exec", "--help").stdout.split())


def test_a_command_that_cannot_start_is_a_usage_error() -> None:
    missing = flow_runner("exec", "--process", "--", "/nonexistent/cmd")
    assert missing.returncode == 2, missing.stderr
    assert "cannot start '/nonexistent/cmd'" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert json.loads(missing.stdout)["error"]["code"] == "COMMAND_NOT_FOUND"


def test_success_prints_the_run_result_as_one_json_line() -> None:
    done = exec_fake("echo", "--input", '{"name": "Ada"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    assert json.loads(done.stdout) == {"outcome": "done", "output": {"name": "Ada"}}


def test_input_from_file_and_stdin(tmp_path: Path) -> None:
    path = tmp_path / "input.json"
    path.write_text('{"n": 1}')
    assert json.loads(exec_fake("echo", "--input", f"@{path}").stdout)["output"] == {"n": 1}
    piped = flow_runner(
        "exec", "--process", "--input", "-", "--", sys.executable, str(FAKE), "echo",
        stdin="[1, 2]",
    )  # fmt: skip
    assert json.loads(piped.stdout)["output"] == [1, 2]


def test_flow_run_params_carry_attachments_settings_and_scratch(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    ran = exec_fake(
        "params", "--attach", f"source={source}", "--attach", f"out={tmp_path}:rw",
        "--settings", '{"mode": "fast"}',
    )  # fmt: skip
    params = json.loads(ran.stdout)["output"]
    assert params["protocol"] == "run/1"
    assert params["settings"] == {"mode": "fast"}
    assert params["attachments"] == {
        "source": {"path": str(source), "access": "read"},
        "out": {"path": str(tmp_path), "access": "read-write"},
    }
    assert params["deadlineUnixMs"] > time.time() * 1000
    assert not Path(params["scratch"]).exists(), "private scratch is removed after the run"


def test_a_bad_attachment_name_or_too_many_are_usage_errors_before_anything_runs(
    tmp_path: Path,
) -> None:
    newline = exec_fake("params", "--attach", f"abc\n={tmp_path}")
    assert newline.returncode == 2, newline.stderr
    assert json.loads(newline.stdout)["error"]["code"] == "INVALID_ATTACHMENTS"
    assert "name 'abc\\n' is not a LocalName" in newline.stderr
    many = [arg for i in range(257) for arg in ("--attach", f"a{i}={tmp_path}")]
    crowded = exec_fake("params", *many)
    assert crowded.returncode == 2, crowded.stderr[-2000:]
    assert json.loads(crowded.stdout)["error"]["code"] == "INVALID_ATTACHMENTS"
    assert "257 attachments given, and a run may have at most 256" in crowded.stderr
    assert exec_fake("params", *many[2:]).returncode == 0  # 256 are fine


def test_exit_statuses() -> None:
    assert exec_fake("custom-outcome").returncode == 3
    failed = exec_fake("exit7-silent")
    assert failed.returncode == 4
    assert json.loads(failed.stdout)["error"]["code"] == "EXECUTION_FAILED"
    assert "run failed: EXECUTION_FAILED" in failed.stderr
    late = exec_fake("ignore-cancel", "--deadline", "300ms")
    assert late.returncode == 124
    assert json.loads(late.stdout)["error"]["code"] == "DEADLINE_EXCEEDED"


def test_bad_usage_exits_2_with_a_clear_message() -> None:
    bad_json = exec_fake("echo", "--input", "{nope")
    assert bad_json.returncode == 2
    assert "--input is not valid FLOW JSON/1" in bad_json.stderr
    bad_deadline = exec_fake("echo", "--deadline", "soon")
    assert bad_deadline.returncode == 2
    assert "--deadline 'soon' is not a duration" in bad_deadline.stderr
    missing = exec_fake("echo", "--attach", "src=/no/such/path")
    assert missing.returncode == 2
    assert "/no/such/path" in missing.stderr
    assert flow_runner("exec").returncode == 2


def test_ctrl_c_cancels_then_exits_130(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    component = tmp_path / "stubborn.py"  # says when it runs, then ignores everything
    component.write_text(
        "import sys, time\nsys.stdin.readline()\n"
        "print('running', file=sys.stderr, flush=True)\ntime.sleep(3600)\n"
    )
    proc = subprocess.Popen(
        [*CLI, "exec", "--process", "--report", str(report), "--", sys.executable,
         str(component)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    assert proc.stderr.readline() == "running\n"  # it has its flow/run: the run is live
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert json.loads(out)["error"]["code"] == "CANCELLED"
    written = json.loads(report.read_text())
    assert written["status"] == "failed"
    assert written["host_kill"] == "cancel"


def test_profiles_list_and_show() -> None:
    listed = flow_runner("profiles", "list")
    assert listed.returncode == 0
    assert {line.split()[0] for line in listed.stdout.splitlines()} >= {"default", "strict", "dev"}
    shown = json.loads(flow_runner("profiles", "show", "default").stdout)
    assert shown["network"] == "none" and shown["read_only_root"] is True
    assert flow_runner("profiles", "show", "nope").returncode == 2


def test_exec_a_configured_flow_by_name(tmp_path: Path) -> None:
    relay = Path(__file__).with_name("components") / "relay.py"
    config = tmp_path / "flow-runner.toml"
    config.write_text(
        f'[flows.parent]\ncommand = ["{sys.executable}", "{relay}"]\n'
        'children = { next = "child" }\n'
        f'[flows.child]\ncommand = ["{sys.executable}", "{relay}"]\n'
    )
    plan = {"calls": [{"op": "c", "slot": "next", "input": {}}, {"op": "u", "slot": "nope"}]}
    ran = flow_runner("exec", "parent", "--config", str(config), "--input", json.dumps(plan))
    assert ran.returncode == 0, ran.stderr
    results = json.loads(ran.stdout)["output"]["results"]
    assert results[0]["outcome"] == "done"
    assert results[1] == "UNAVAILABLE"
    # A configured flow's profile is the configuration's: --profile is refused, not ignored.
    strict = flow_runner("exec", "parent", "--config", str(config), "--profile", "strict")
    assert strict.returncode == 2 and "profile come from the configuration" in strict.stderr
    bad = flow_runner("exec", "parent", "--config", str(tmp_path / "missing.toml"))
    assert bad.returncode == 2
    assert "missing.toml" in bad.stderr


def test_a_long_peer_error_message_fails_the_run_cleanly() -> None:
    ran = exec_fake("standard-error-root", "--input", json.dumps("m" * 1024))
    assert ran.returncode == 4, ran.stderr[-2000:]
    error = json.loads(ran.stdout)["error"]
    assert error["code"] == "PROTOCOL_ERROR" and len(error["message"]) == 1024
    assert "Traceback" not in ran.stderr


def test_an_input_whose_flow_run_frame_is_too_large_is_refused_before_launch(
    tmp_path: Path,
) -> None:
    """A 16 MiB input fits JSON/1 but not the frame that carries it: exit 2, nothing run
    (the component would write this file as soon as it started)."""
    size = (json1.MAX_DOCUMENT_BYTES - len('["",""]')) // 2
    path = tmp_path / "input.json"
    path.write_text(json.dumps(["p" * size, "p" * size]))
    assert path.stat().st_size <= json1.MAX_DOCUMENT_BYTES
    started = tmp_path / "started"
    ran = flow_runner(
        "exec", "--process", "--input", f"@{path}", "--", "sh", "-c", f"touch {started}; cat"
    )
    assert ran.returncode == 2, ran.stderr[-2000:]
    assert json.loads(ran.stdout)["error"]["code"] == "INVALID_INPUT"
    assert "INVALID_INPUT: the flow/run frame would be 16,777," in ran.stderr
    assert "16,777,216 bytes a frame" in ran.stderr and "Traceback" not in ran.stderr
    assert not started.exists(), "nothing may be launched"


def test_planned_process_paths_have_the_length_of_the_real_ones(tmp_path: Path) -> None:
    """The pre-launch frame check measures the process backend's private scratch path by
    its planned stand-in: both must encode to the same length."""
    params = json.loads(exec_fake("params", "--attach", f"a={tmp_path}").stdout)["output"]
    request = LaunchRequest((Attachment("a", tmp_path),))
    attachments, scratch = ProcessSandbox(["true"]).planned_paths(request)
    assert len(scratch) == len(params["scratch"])
    assert attachments == {"a": params["attachments"]["a"]["path"]}


def test_a_frame_that_takes_seconds_to_refuse_does_not_hold_off_the_deadline(
    tmp_path: Path,
) -> None:
    """The 16.6 MB deep-and-wide frame once blocked the event loop for 46 s (6 GiB): the
    deadline could not fire. Now it is decoded off the loop: the run ends as a clean
    failure soon after the 2 s deadline, in bounded memory (the run's peak RSS, the
    runner's own, under 600 MiB; address space capped at 4 GiB against a regression)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    started = time.monotonic()
    with open(tmp_path / "out", "wb") as stdout, open(tmp_path / "err", "wb") as stderr:
        argv = [*CLI, "exec", "--process", "--deadline", "2s", "--",
                sys.executable, str(FAKE), "deep-wide"]  # fmt: skip
        process = subprocess.Popen(
            measured(argv, tmp_path / "peak"), stdout=stdout, stderr=stderr, preexec_fn=cap
        )
        status = process.wait()
    seconds = time.monotonic() - started
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert status in (4, 124), err[-2000:]
    assert json.loads(out)["error"]["code"] in ("DEADLINE_EXCEEDED", "PROTOCOL_ERROR")
    assert seconds < 20, seconds
    assert peak_kib(tmp_path / "peak") < 600 * 1024, peak_kib(tmp_path / "peak")
