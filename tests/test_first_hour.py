"""What a new user meets first (issue 24): output paths, an early Ctrl-C, refusals before a
container exists, ``--deadline`` and the fixes printed for root.

Real ``flow-runner`` subprocesses; where a refusal must come before any container, the
engine's own event log for the runner's owner label says none was created.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from execkit import CLI, FAKE_IMAGE, FAKE_SCRIPT, LABEL_OWNER, ROOT, fake, flow_runner, owner, start

HELLO = "flow-runner/examples-hello:latest"


def created_by(client: Any, pid: int, since: float) -> list[dict[str, Any]]:
    """The run containers (labelled with a run id) the engine logged runner ``pid``
    creating since then. (Reading an image's package the first time creates a container
    that is never started, and carries no run id.)"""
    labels = [f"{LABEL_OWNER}={owner(pid)}", "flow-runner.run-id"]
    events = client.events(
        since=int(since) - 1,
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "event": "create", "label": labels},
    )
    return list(events)


def refused_before_a_container(
    client: Any, *args: str | Path
) -> tuple[int, str, str, list[dict[str, Any]]]:
    """Run ``flow-runner exec ARGS``: its status, stdout, stderr and the containers made."""
    since = time.time()
    process = start(*args)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err, created_by(client, process.pid, since)


# --- output paths -------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize("where", ["missing/r.json", "."])
def test_exec_refuses_an_unwritable_report_path_before_any_container(
    docker_client: Any, tmp_path: Path, where: str
) -> None:
    path = tmp_path / where
    status, out, err, made = refused_before_a_container(
        docker_client, HELLO, "--input", '{"name": "X"}', "--report", path
    )
    assert status == 2, err
    assert json.loads(out)["error"]["code"] == "INVALID_USAGE"
    assert "Traceback" not in err
    assert f"--report {path}" in err
    assert "create it first" in err or "give a file path" in err
    assert made == []


@pytest.mark.docker
def test_exec_prints_the_result_before_the_report_and_keeps_it_if_that_fails(
    docker_client: Any,
) -> None:
    """``/dev/full`` passes the check (it exists and is writable) and fails the write."""
    process = start(HELLO, "--input", '{"name": "X"}', "--report", "/dev/full")
    out, err = process.communicate(timeout=60)
    assert json.loads(out) == {"outcome": "done", "output": {"greeting": "Hello, X!"}}
    assert process.returncode == 0, err
    assert "--report /dev/full: the run report could not be written" in err
    assert "Traceback" not in err


def test_an_output_is_replaced_whole_keeping_its_mode(tmp_path: Path) -> None:
    from runner.outputs import write_output

    report = tmp_path / "r.json"
    report.write_text("old")
    report.chmod(0o640)
    write_output(report, b"new\n")
    assert report.read_text() == "new\n"
    assert report.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left
    fresh = tmp_path / "fresh.json"
    write_output(fresh, b"{}")
    umask = os.umask(0o022)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.docker
@pytest.mark.parametrize("option", ["--junit", "--jsonl", "--results"])
def test_batch_refuses_an_unwritable_output_before_any_run(
    docker_client: Any, tmp_path: Path, option: str
) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a", "input": {"name": "x"}}\n')
    bad = tmp_path / "nowhere" / "out"
    results = tmp_path / "results.sqlite"
    args = ["batch", str(manifest), "--image", HELLO, "-q"]
    if option != "--results":
        args += ["--results", str(results)]
    since = time.time()
    process = subprocess.Popen(
        [*CLI, *args, option, str(bad)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2, err
    assert "Traceback" not in err
    assert f"{option} {bad}: no directory {bad.parent}; create it first" in err
    assert not results.exists()  # nothing was run, no store was made
    assert created_by(docker_client, process.pid, since) == []


def test_batch_merge_of_no_store_leaves_no_output(tmp_path: Path) -> None:
    merged = tmp_path / "m.sqlite"
    refused = flow_runner("batch", "merge", str(tmp_path / "notastore"), "-o", str(merged))
    assert refused.returncode == 2
    assert "no such results file" in refused.stderr
    assert list(tmp_path.iterdir()) == []


def test_batch_merge_refuses_an_output_that_is_a_directory(tmp_path: Path) -> None:
    store = tmp_path / "a.sqlite"
    sqlite3.connect(store).close()
    refused = flow_runner("batch", "merge", str(store), "-o", str(tmp_path))
    assert refused.returncode == 2
    assert f"--output {tmp_path} is a directory; give a file path" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("option", ["--junit", "--snapshot"])
def test_policy_verify_refuses_an_unwritable_output_before_probing(
    tmp_path: Path, option: str
) -> None:
    bad = tmp_path / "missing" / "out"
    refused = flow_runner("policy", "verify", "default", option, str(bad))
    assert refused.returncode == 2, refused.stderr
    assert f"{option} {bad}: no directory {bad.parent}" in refused.stderr
    assert "Traceback" not in refused.stderr


# --- Ctrl-C before the handlers exist ------------------------------------------------------

SLOW = "flow-runner/examples-slow:latest"
STAGES = ("/_typing.", "/_opcode.", "/_bz2.", "/_datetime.", "/_json.", "/_ssl.", "/_asyncio.")
"""When to send the Ctrl-C: once the runner has mapped that extension module, from the
first its own code imports, through the command line's, docker-py's and the TLS stack's
imports, to the event loop's. (Before that, Python is still starting: a Ctrl-C in its
``site`` import, ~10 ms, is the interpreter's to report.)"""


def mapped(pid: int, marker: str) -> bool:
    """Whether process ``pid`` has ``marker`` in its memory map (False once it is gone)."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return marker in maps.read()
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.docker
@pytest.mark.parametrize("stage", STAGES)
def test_an_early_ctrl_c_ends_exec_with_130_quietly_leaving_nothing(
    docker_client: Any, stage: str
) -> None:
    """Run as the console script runs it (``runner.launch``), with no warm runner."""
    signalled = 0
    for _ in range(4):
        # As a terminal starts it: SIGINT at its default, whatever this suite inherited (a
        # suite started in the background of a non-interactive shell ignores it, and so
        # would the runner until its own handlers exist).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "runner.launch", "exec", SLOW, "--input",
                 '{"seconds": 30}'],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "FLOW_RUNNER_WARM": "0"},
            )  # fmt: skip
        finally:
            signal.signal(signal.SIGINT, previous)
        while process.poll() is None and not mapped(process.pid, stage):
            pass  # the runner reaching the stage is the event waited for
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            signalled += 1
        _, err = process.communicate(timeout=60)
        assert "Traceback" not in err, err[-3000:]
        assert process.returncode in (130, -signal.SIGINT), (process.returncode, err[-2000:])
        left = docker_client.containers.list(
            all=True, sparse=True, filters={"label": f"{LABEL_OWNER}={owner(process.pid)}"}
        )
        assert left == [], f"containers left by runner {process.pid}: {left}"
    assert signalled == 4


# --- one rule for every refusal before a container exists ----------------------------------

WORDCOUNT = "flow-runner/examples-wordcount:latest"
REFUSALS = {
    "input": ([HELLO, "--input", '{"name": 7}'], "INVALID_INPUT"),
    "settings": ([HELLO, "--input", "{}", "--settings", '{"x": 1}'], "INVALID_SETTINGS"),
    "attachment undeclared": ([HELLO, "--input", "{}", "-a", "foo=/tmp"], "INVALID_ATTACHMENTS"),
    "attachment missing": ([WORDCOUNT, "--input", "{}"], "INVALID_ATTACHMENTS"),
    "image": (["flow-runner/no-such-image:latest"], "IMAGE_MISSING"),
    "profile": ([HELLO, "--input", "{}", "--profile", "no-such-profile"], "INVALID_PROFILE"),
    "deadline": ([HELLO, "--input", "{}", "--deadline", "soon"], "INVALID_USAGE"),
    "json": ([HELLO, "--input", "{nope"], "INVALID_USAGE"),
}
"""Each refusal before launch: the arguments and the code its error line carries."""


@pytest.mark.docker
@pytest.mark.parametrize("case", list(REFUSALS))
def test_every_refusal_before_launch_exits_2_with_one_json_error_line(
    docker_client: Any, case: str
) -> None:
    args, code = REFUSALS[case]
    status, out, err, made = refused_before_a_container(docker_client, *args)
    assert status == 2, err
    assert out.count("\n") == 1, out
    error = json.loads(out)["error"]
    assert error["code"] == code
    assert error["message"] and error["message"] in err
    assert "Traceback" not in err
    assert made == []


@pytest.mark.docker
def test_exec_with_no_input_says_so_and_shows_what_the_input_takes(docker_client: Any) -> None:
    status, out, err, made = refused_before_a_container(docker_client, HELLO)
    assert status == 2, err
    message = json.loads(out)["error"]["message"]
    assert message.startswith("no --input given")
    assert "an object with members name (string)" in message
    assert """--input '{"name":"..."}'""" in message
    assert made == []


def test_the_input_a_schema_takes_names_its_required_members() -> None:
    from runner.cli.exec import describe_input

    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"subject": {"type": "string"}, "depth": {"type": "integer"}},
        "required": ["depth"],
    }
    said = describe_input(schema)
    assert "members subject (string), depth (integer); required: depth" in said
    assert """--input '{"depth":1}'""" in said
    assert describe_input({"type": "array"}) == ": it takes an array"


@pytest.mark.docker
def test_a_flow_name_without_its_configuration_says_it_needs_config(
    docker_client: Any, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [*CLI, "exec", "research-report"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2, err
    message = json.loads(out)["error"]["message"]
    assert "a configured flow of that name needs its configuration" in message
    assert "exec research-report --config FILE" in message


# --- --deadline -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--deadline", "10", HELLO], "--deadline 10: give the unit, say 10s"),
        (
            ["--deadline", "2", "minutes", HELLO],
            "--deadline 2 minutes: write the duration as one word, say --deadline 2m",
        ),
        (["--deadline", "0.5", HELLO], "--deadline 0.5: give the unit, say 0.5s"),
    ],
)
def test_a_deadline_with_no_unit_is_refused(args: list[str], said: str) -> None:
    refused = flow_runner("exec", *args)
    assert refused.returncode == 2, refused.stderr
    assert said in refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "INVALID_USAGE"


def test_batch_refuses_a_deadline_with_no_unit(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a"}\n')
    refused = flow_runner(
        "batch", str(manifest), "--image", HELLO, "--deadline", "10",
        "--results", str(tmp_path / "r.sqlite"),
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--deadline 10: give the unit, say 10s" in refused.stderr
    assert not (tmp_path / "r.sqlite").exists()


def started_ms(client: Any, pid: int, since: float) -> list[float]:
    """When the engine started each container of runner ``pid`` (ms since the epoch)."""
    events = client.events(
        since=int(since) - 1,
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "event": "start", "label": f"{LABEL_OWNER}={owner(pid)}"},
    )
    return [event["timeNano"] / 1e6 for event in events]


@pytest.mark.docker
def test_exec_counts_the_deadline_from_the_container_start(docker_client: Any) -> None:
    """The ``deadlineUnixMs`` the component is given is the whole deadline after the engine
    started its container (before, it counted from before the image was even read)."""
    since = time.time()
    process = start(*fake("params"), "--deadline", "5s")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    deadline_ms = json.loads(out)["output"]["deadlineUnixMs"]
    (started,) = started_ms(docker_client, process.pid, since)
    assert deadline_ms >= started + 5000 - 2  # int() of the ms, the engine's rounding


# --- the fix printed for a directory the component cannot write ------------------------------


@pytest.mark.docker
def test_batch_takes_user_as_exec_does_and_the_fix_it_prints_works(
    docker_client: Any, tmp_path: Path
) -> None:
    """A directory of uid 4242 attached read-write: the default profile's 65534 cannot
    write it; the printed fix (run as its owner, with batch's own --user) makes it run."""
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    os.chown(out, 4242, 4242)
    row = {
        "id": "a", "image": FAKE_IMAGE, "command": ["python3", FAKE_SCRIPT, "echo"],
        "attach": [f"out={out}:rw"],
    }  # fmt: skip
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps(row) + "\n")

    def batch(*options: str) -> tuple[int, dict[str, Any]]:
        results = tmp_path / "results.jsonl"
        ran = flow_runner(
            "batch", str(manifest), "--results", str(tmp_path / "r.sqlite"), "-q",
            "--rerun", "all", "--jsonl", str(results), *options,
        )  # fmt: skip
        return ran.returncode, json.loads(results.read_text())

    status, refused = batch()
    assert status == 4
    message = refused["error_message"]
    assert "runs as 65534:65534 and could not write and search" in message
    assert "--user 4242:4242 (exec and batch)" in message
    assert "exec --user" not in message
    status, ran = batch("--user", "4242:4242")
    assert (status, ran["status"]) == (0, "succeeded"), ran["error_message"]


# --- the runner image, bare -------------------------------------------------------------------


def bare_runner(*args: str) -> subprocess.CompletedProcess[str]:
    """``docker run flow-runner:latest ARGS`` with only the engine's socket mounted."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none",
         "-v", "/var/run/docker.sock:/var/run/docker.sock", "flow-runner:latest", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.docker
def test_the_runner_image_runs_hello_with_only_the_socket_mounted(docker_client: Any) -> None:
    """The image keys its own container labels (uid 10001 has a home of its own)."""
    ran = bare_runner("exec", HELLO, "--input", '{"name": "X"}')
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"outcome": "done", "output": {"greeting": "Hello, X!"}}


@pytest.mark.docker
def test_the_runner_image_names_the_mount_a_missing_attachment_needs(docker_client: Any) -> None:
    ran = bare_runner("exec", WORDCOUNT, "--input", "{}", "--attach", "source=/srv/corpus")
    assert ran.returncode == 2, ran.stderr
    assert "start it with `-v HOSTPATH:/srv/corpus`" in ran.stderr
    assert json.loads(ran.stdout)["error"]["code"] == "INVALID_ATTACHMENTS"


# --- batch bookkeeping ------------------------------------------------------------------------


def store_with(path: Path, rows: dict[str, tuple[str, str]]) -> None:
    """A result store of finished rows of manifest ``m``: id -> (input digest, status)."""
    from runner.batch.store import RowResult, Store

    store = Store(path)
    try:
        for line, (row_id, (digest, status)) in enumerate(rows.items()):
            store.queue({
                "id": row_id, "manifest": "m", "line": line, "key": f"k-{row_id}-{digest}",
                "input_digest": digest, "target": "image", "image_id": None,
            })  # fmt: skip
            store.finish("m", row_id, RowResult(status), seconds=0.1)
    finally:
        store.close()


def test_batch_diff_reports_added_removed_and_input_changed_rows(tmp_path: Path) -> None:
    store_with(tmp_path / "old.sqlite", {"same": ("d1", "succeeded"), "gone": ("d2", "failed"),
                                         "edited": ("d3", "succeeded")})  # fmt: skip
    store_with(tmp_path / "new.sqlite", {"same": ("d1", "succeeded"), "fresh": ("d4", "failed"),
                                         "edited": ("d5", "succeeded")})  # fmt: skip
    changed = flow_runner(
        "batch", "diff", str(tmp_path / "old.sqlite"), str(tmp_path / "new.sqlite"), "--json"
    )
    assert changed.returncode == 1, changed.stderr
    kinds = {e["id"]: e["kind"] for e in map(json.loads, changed.stdout.splitlines())}
    assert kinds == {"fresh": "added", "gone": "removed", "edited": "input-changed"}
    text = flow_runner("batch", "diff", str(tmp_path / "old.sqlite"), str(tmp_path / "new.sqlite"))
    assert "m/gone: removed: status 'failed' -> None" in text.stdout


@pytest.mark.docker
def test_a_batch_ends_with_its_exit_status_and_why(docker_client: Any, tmp_path: Path) -> None:
    """Halted, and resumed with nothing left to run: the last line says why it exits 4."""
    rows = [
        {"id": f"r{i}", "image": FAKE_IMAGE, "command": ["python3", FAKE_SCRIPT, "exit7-silent"]}
        for i in range(3)
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["batch", str(manifest), "--results", str(tmp_path / "r.sqlite"), "--jobs", "1"]
    halted = flow_runner(*args, "--halt-on-failure", "1", "--prepare", "0")
    assert halted.returncode == 4
    last = halted.stderr.splitlines()[-1]
    assert "exit status 4: halted by --halt-on-failure; 2 row(s) not run" in last, last
    assert "succeeded=0 failed=1 infra-failed=0" in last
    flow_runner(*args)  # the other two run and fail
    resumed = flow_runner(*args)
    assert resumed.returncode == 4
    last = resumed.stderr.splitlines()[-1]
    assert "finished: 3 row(s), 0 run now, 3 kept from earlier runs" in last, last
    assert "3 row(s) failed, all in earlier runs (--rerun failed runs them again)" in last


def test_batch_report_takes_the_store_as_batch_run_names_it(tmp_path: Path) -> None:
    """``--results FILE`` (as ``batch run`` has it), the argument, or the default file."""
    store_with(tmp_path / "flow-runner-results.sqlite", {"a": ("d1", "succeeded")})
    for args in (["--results", "flow-runner-results.sqlite"], ["flow-runner-results.sqlite"], []):
        shown = subprocess.run(
            [*CLI, "batch", "report", "--json", *args], cwd=tmp_path, capture_output=True,
            text=True, timeout=60, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert shown.returncode == 0, (args, shown.stderr)
        assert json.loads(shown.stdout)["manifests"] == {"m": {"succeeded": 1, "total": 1}}
