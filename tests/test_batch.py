"""``flow-runner batch``: manifests, the result store, resume, keys, retries, reports.

Real engine, real SQLite: every batch runs as a ``python -m runner.cli batch`` subprocess
in a temporary directory, and the tests read its store with ``sqlite3`` and the engine's
events (container starts, counted per row by the ``flow-runner.run-id`` label, which the
batch sets to ``<token>-<row id>``).
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from execkit import (
    FAKE_IMAGE,
    FAKE_SCRIPT,
    LABEL_OWNER,
    LABEL_RUN_ID,
    ROOT,
    containers,
    of_runner,
    owner,
    profile_file,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]

SLOW_IMAGE = "flow-runner/examples-slow:latest"
CLI = [sys.executable, "-m", "runner.cli", "batch"]
PLAIN_LINE = re.compile(
    r"^flow-runner batch: (\d+)/(\d+) succeeded=\d+ failed=\d+ retried=\d+ running=\d+ eta \S+$"
)


def fake(scenario: str) -> list[str]:
    return ["python3", FAKE_SCRIPT, scenario]


def write_manifest(path: Path, rows: list[dict[str, Any]], extra: str = "") -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + extra)
    return path


def start_batch(cwd: Path, *args: str | Path, **popen: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen([*CLI, *map(str, args)], cwd=cwd, env=env, text=True, **options)


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    pid: int


def finish(process: subprocess.Popen[str], timeout: float = 60) -> Done:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"batch hung: {err[-2000:]}") from None
    return Done(process.returncode, out, err, process.pid)


def batch(cwd: Path, *args: str | Path, timeout: float = 60) -> Done:
    return finish(start_batch(cwd, *args), timeout)


def rows(store: Path) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(store) as db:
        db.row_factory = sqlite3.Row
        return {r["id"]: dict(r) for r in db.execute("SELECT * FROM runs")}


def starts(client: Any, since: float, *runners: int) -> Counter[str]:
    """Container starts per row id since ``since`` (unix s) by the batch processes
    ``runners``, from the engine's events."""
    filters = {"type": "container", "event": "start", "label": LABEL_RUN_ID}
    events = client.events(since=since, until=time.time() + 0.1, filters=filters, decode=True)
    owners = {owner(pid) for pid in runners}
    attributes = (e["Actor"]["Attributes"] for e in events)
    return Counter(
        a[LABEL_RUN_ID].split("-", 1)[1] for a in attributes if a.get(LABEL_OWNER) in owners
    )


@pytest.fixture
def fast(tmp_path: Path) -> Path:
    return profile_file(tmp_path)


def test_every_bad_line_is_listed_and_nothing_runs(
    tmp_path: Path, docker_client: Any, fast: Path
) -> None:
    good = {"id": "fine", "command": fake("echo")}
    manifest = write_manifest(
        tmp_path / "bad.jsonl",
        [
            good,
            {"id": "Bad Id"},
            {"id": "fine"},
            {"id": "x", "colour": 1},
            {"id": "y", "settings": [1]},
            {"id": "z", "deadline": "soon"},
            {"id": "w", "attach": ["data=/no/such/path"]},
            {"id": "v", "flow": "report"},
        ],
        extra='{"id": "u", \n',
    )
    since = time.time()
    done = batch(tmp_path, manifest, "--image", FAKE_IMAGE, "--profile", fast)
    assert done.returncode == 2, done.stderr
    for line, field in [(2, "id"), (3, "id"), (4, "colour"), (5, "settings"), (6, "deadline"),
                        (7, "attach"), (8, "flow"), (9, "(line)")]:  # fmt: skip
        assert f"line {line}: {field}:" in done.stderr, done.stderr
    assert "line 1:" not in done.stderr
    assert "Traceback" not in done.stderr
    assert "already on line 1" in done.stderr
    assert not (tmp_path / "flow-runner-results.sqlite").exists()
    assert starts(docker_client, since, done.pid) == Counter()


def test_a_mixed_manifest_fills_the_store_and_the_junit_report(tmp_path: Path, fast: Path) -> None:
    oom = profile_file(tmp_path, "oom", memory="64m")
    cases = [
        {"id": "ok", "input": {"n": 1}, "command": fake("echo")},
        {"id": "partial", "command": fake("custom-outcome")},
        {"id": "fails", "command": fake("exit7-silent")},
        {"id": "late", "deadline": "1s", "command": fake("ignore-cancel")},
        {"id": "oom", "profile": str(oom), "command": fake("memory-hog")},
        {"id": "missing", "image": "flow-runner/no-such-image:latest"},
    ]
    manifest = write_manifest(tmp_path / "cases.jsonl", cases, extra="not json\n")
    args = ["--image", FAKE_IMAGE, "--profile", fast, "--jobs", "2", "--junit", "j.xml",
            "--jsonl", "r.jsonl"]  # fmt: skip
    refused = batch(tmp_path, manifest, *args)
    assert refused.returncode == 2 and "line 7: (line):" in refused.stderr, refused.stderr
    write_manifest(manifest, cases)
    done = batch(tmp_path, manifest, *args)
    assert done.returncode == 4, done.stderr

    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert {r["state"] for r in got.values()} == {"done"}
    expect = {
        "ok": ("succeeded", "done", None),
        "partial": ("succeeded", "partial", None),
        "fails": ("failed", None, "EXECUTION_FAILED"),
        "late": ("failed", None, "DEADLINE_EXCEEDED"),
        "oom": ("failed", None, "EXECUTION_FAILED"),
        "missing": ("failed", None, "IMAGE_MISSING"),
    }
    assert {k: (r["status"], r["outcome"], r["error_code"]) for k, r in got.items()} == expect
    assert json.loads(got["ok"]["output"]) == {"n": 1}
    assert got["fails"]["exit_code"] == 7
    assert json.loads(got["oom"]["report"])["oom_killed"] is True
    assert "holding" in got["oom"]["stderr_tail"]
    assert all(r["attempts"] == 1 and len(r["key"]) == 64 for r in got.values())
    assert [json.loads(x)["id"] for x in (tmp_path / "r.jsonl").read_text().splitlines()] == [
        c["id"] for c in cases
    ]

    root = ET.parse(tmp_path / "j.xml").getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.attrib["name"] == "cases"
    assert (suite.attrib["tests"], suite.attrib["failures"], suite.attrib["errors"]) == (
        "6", "4", "0",
    )  # fmt: skip
    by_name = {case.attrib["name"]: case for case in suite.findall("testcase")}
    assert list(by_name) == [c["id"] for c in cases]
    for name, case in by_name.items():
        assert case.attrib["classname"] == "cases"
        assert float(case.attrib["time"]) >= 0
        props = {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
        assert props["key"] == got[name]["key"]
        if name != "missing":
            assert props["image_id"].startswith("sha256:")
        status, _, code = expect[name]
        failure = case.find("failure")
        if status == "succeeded":
            assert failure is None and case.find("error") is None
            continue
        assert failure is not None and failure.attrib["type"] == code
        first = got[name]["error_message"].splitlines()[0]
        assert failure.attrib["message"] == f"{code}: {first}"
    oom_failure = by_name["oom"].find("failure")
    assert oom_failure is not None and "holding" in (oom_failure.text or "")

    report = subprocess.run(
        [*CLI, "report", "flow-runner-results.sqlite", "--json"], cwd=tmp_path,
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
    )  # fmt: skip
    summary = json.loads(report.stdout)
    assert summary["manifests"]["cases"] == {"total": 6, "succeeded": 2, "failed": 4}


def test_a_killed_batch_resumes_without_running_committed_rows_again(
    tmp_path: Path, docker_client: Any, fast: Path
) -> None:
    ids = [f"case-{i}" for i in range(6)]
    cases = [{"id": i, "input": {"seconds": 0.6}} for i in ids]
    manifest = write_manifest(tmp_path / "crash.jsonl", cases)
    store = tmp_path / "flow-runner-results.sqlite"
    args = [manifest, "--image", SLOW_IMAGE, "--profile", fast, "--jobs", "2", "-q"]
    since = time.time()
    first = start_batch(tmp_path, *args)
    committed: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 60
    while len(committed) < 2:  # K = 2 commits, then kill -9
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        if store.exists():
            try:
                seen = rows(store)
            except sqlite3.OperationalError:  # the table is not there yet
                seen = {}
            committed = {k: r for k, r in seen.items() if r["state"] == "done"}
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    at_kill = rows(store)
    in_flight = {k for k, r in at_kill.items() if r["state"] == "running"}
    first_starts = starts(docker_client, since, first.pid)

    second = batch(tmp_path, *args)
    assert second.returncode == 0, second.stderr
    again = starts(docker_client, since, second.pid)
    final = rows(store)
    assert {k: r["state"] for k, r in final.items()} == dict.fromkeys(ids, "done")
    assert all(final[k]["status"] == "succeeded" for k in ids)
    for k in committed:  # never run again, result unchanged
        assert again[k] == 0 and final[k]["key"] == committed[k]["key"]
        assert final[k]["ended_at"] == committed[k]["ended_at"]
    for k in set(ids) - set(committed):
        assert again[k] == 1, (k, again)
    for k in in_flight:  # admitted before the kill (its container perhaps not yet started)
        assert first_starts[k] <= 1 and final[k]["attempts"] == at_kill[k]["attempts"] + 1
    assert in_flight, "jobs 2: the other slot is busy when the second row commits"
    assert len(committed) >= 2 and sum(again.values()) == len(ids) - len(committed)
    gc = subprocess.run(
        [sys.executable, "-m", "runner.cli", "gc"], cwd=tmp_path, capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
    )  # fmt: skip
    assert gc.returncode == 0
    assert containers(docker_client, of_runner(first.pid)) == []


def test_a_changed_input_attachment_or_rebuilt_image_gets_a_new_key(
    tmp_path: Path, docker_client: Any, fast: Path
) -> None:
    tag = f"flow-runner-test/batch-key-{os.getpid()}:latest"
    docker_client.images.get(FAKE_IMAGE).tag(tag)
    data = tmp_path / "data.txt"
    data.write_text("one")
    try:
        cases = [
            {"id": "plain", "input": 1, "command": fake("echo")},
            {"id": "attached", "attach": [f"data={data}:ro"], "command": fake("echo")},
            {"id": "other", "input": 3, "command": fake("echo")},
        ]
        manifest = write_manifest(tmp_path / "keys.jsonl", cases)
        args = [manifest, "--image", tag, "--profile", fast, "--jobs", "2", "-q"]

        def run_counting() -> Counter[str]:
            since = time.time()
            done = batch(tmp_path, *args)
            assert done.returncode == 0, done.stderr
            return starts(docker_client, since, done.pid)

        assert run_counting() == Counter(plain=1, attached=1, other=1)
        keys = {k: r["key"] for k, r in rows(tmp_path / "flow-runner-results.sqlite").items()}
        assert run_counting() == Counter()  # nothing changed: nothing runs

        cases[0]["input"] = 2
        write_manifest(manifest, cases)
        data.write_text("two")  # same path, new content
        assert run_counting() == Counter(plain=1, attached=1)

        build = io.BytesIO(b"FROM " + FAKE_IMAGE.encode() + b"\nLABEL rebuilt=yes\n")
        docker_client.images.build(fileobj=build, tag=tag, network_mode="none", rm=True)
        assert run_counting() == Counter(plain=1, attached=1, other=1)
        final = rows(tmp_path / "flow-runner-results.sqlite")
        assert all(final[k]["key"] != keys[k] for k in keys)
        assert json.loads(final["plain"]["output"]) == 2
    finally:
        docker_client.images.remove(tag, force=True)


def test_infrastructure_failures_are_retried_and_run_failures_are_not(
    tmp_path: Path, docker_client: Any, fast: Path
) -> None:
    cases = [
        {"id": "vanish-once", "image": SLOW_IMAGE, "input": {"seconds": 1.5}},
        {"id": "vanish-always", "image": SLOW_IMAGE, "input": {"seconds": 1.5}},
        {"id": "fails", "command": fake("exit7-silent")},
    ]
    manifest = write_manifest(tmp_path / "infra.jsonl", cases)
    removals = Counter[str]()
    wanted = {"vanish-once": 1, "vanish-always": 2}
    stop = threading.Event()
    since = time.time()
    options = ["--jobs", "2", "--retries", "1", "--junit", "j.xml", "--progress-every", "60"]
    process = start_batch(tmp_path, manifest, "--image", FAKE_IMAGE, "--profile", fast, *options)

    def remove_from_outside() -> None:  # docker rm -f of the running container, by label
        while not stop.is_set() and removals != Counter(wanted):
            for container in docker_client.containers.list(
                filters={"label": of_runner(process.pid), "status": "running"}
            ):
                row = container.labels[LABEL_RUN_ID].split("-", 1)[1]
                if removals[row] < wanted.get(row, 0):
                    container.remove(force=True)
                    removals[row] += 1
            time.sleep(0.02)

    remover = threading.Thread(target=remove_from_outside, daemon=True)
    remover.start()
    try:
        done = finish(process)
    finally:
        stop.set()
        remover.join()
    assert removals == Counter(wanted)
    assert done.returncode == 5, done.stderr
    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert (got["vanish-once"]["status"], got["vanish-once"]["attempts"]) == ("succeeded", 2)
    assert (got["vanish-always"]["status"], got["vanish-always"]["attempts"]) == (
        "infra-failed", 2,
    )  # fmt: skip
    assert got["vanish-always"]["error_code"] == "INFRASTRUCTURE"
    assert (got["fails"]["status"], got["fails"]["error_code"]) == ("failed", "EXECUTION_FAILED")
    assert got["fails"]["attempts"] == 1
    expected = Counter({"vanish-once": 2, "vanish-always": 2, "fails": 1})
    assert starts(docker_client, since, done.pid) == expected
    assert "RETRY vanish-once (attempt 2)" in done.stderr
    assert "retried=2" in done.stderr.splitlines()[-2]  # the last progress line
    assert "exit status 5: 1 row(s) failed on the engine's side" in done.stderr.splitlines()[-1]
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and (suite.attrib["failures"], suite.attrib["errors"]) == ("1", "1")


def test_plain_progress_lines_appear_in_a_log(tmp_path: Path, fast: Path) -> None:
    cases = [{"id": f"p-{i}", "input": {"seconds": 0.5}} for i in range(3)]
    manifest = write_manifest(tmp_path / "log.jsonl", cases)
    done = batch(tmp_path, manifest, "--image", SLOW_IMAGE, "--profile", fast, "--jobs", "2",
                 "--progress-every", "0.2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [m for m in map(PLAIN_LINE.match, done.stderr.splitlines()) if m]
    assert len(lines) >= 3, done.stderr  # some while running, the last at the end
    assert (lines[-1].group(1), lines[-1].group(2)) == ("3", "3")
    assert int(lines[0].group(1)) < 3
    assert "\x1b[" not in done.stderr


def test_a_terminal_gets_the_live_display(tmp_path: Path, fast: Path) -> None:
    cases = [{"id": f"t-{i}", "command": fake("echo")} for i in range(2)]
    cases.append({"id": "t-bad", "command": fake("exit7-silent")})
    manifest = write_manifest(tmp_path / "tty.jsonl", cases)
    leader, follower = pty.openpty()
    os.set_blocking(leader, False)
    process = start_batch(
        tmp_path, manifest, "--image", FAKE_IMAGE, "--profile", fast, "--jobs", "2",
        stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    screen = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 65536)
        except BlockingIOError:
            if process.poll() is not None:
                break
            time.sleep(0.02)
            continue
        except OSError:  # EIO: the terminal's last writer has gone
            break
        screen += chunk
    os.close(leader)
    assert process.wait(10) == 4
    text = screen.decode(errors="replace")
    assert "\x1b[" in text  # cursor control: a live display, not log lines
    assert "3/3" in text and "succeeded=2 failed=1" in text
    assert "FAILED t-bad: EXECUTION_FAILED" in text
    assert not any(PLAIN_LINE.match(line.strip()) for line in text.splitlines())


def test_halt_on_failure_admits_no_more_runs(tmp_path: Path, fast: Path) -> None:
    cases = [{"id": f"f-{i}", "command": fake("exit7-silent")} for i in range(4)]
    manifest = write_manifest(tmp_path / "halt.jsonl", cases)
    done = batch(tmp_path, manifest, "--image", FAKE_IMAGE, "--profile", fast, "--jobs", "1",
                 "--halt-on-failure", "2", "-q")  # fmt: skip
    assert done.returncode == 4, done.stderr
    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert [got[f"f-{i}"]["state"] for i in range(4)] == ["done", "done", "pending", "pending"]
    assert got["f-2"]["attempts"] == 0


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_a_stop_signal_stops_the_runs_in_flight_and_resume_runs_them(
    tmp_path: Path, docker_client: Any, fast: Path, stop: signal.Signals
) -> None:
    """SIGTERM, or SIGHUP (a closed terminal, a dropped ssh session), whose default action
    would end the batch with its runs' containers still there."""
    cases = [{"id": "long", "input": {"seconds": 30}}, {"id": "next", "input": {"seconds": 0}}]
    manifest = write_manifest(tmp_path / "term.jsonl", cases)
    args = [manifest, "--image", SLOW_IMAGE, "--profile", fast, "--jobs", "1", "-q"]
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # not as this suite inherited it
    try:  # (a suite run under nohup ignores SIGHUP, and so would the batch)
        process = start_batch(tmp_path, *args)
    finally:
        signal.signal(signal.SIGHUP, previous)
    deadline = time.monotonic() + 30
    while not docker_client.containers.list(
        filters={"label": of_runner(process.pid), "status": "running"}
    ):
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.02)
    started = time.monotonic()
    process.send_signal(stop)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert time.monotonic() - started < 10  # the grace (0.5 s), not the 30 s run
    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert (got["long"]["state"], got["long"]["status"]) == ("pending", "interrupted")
    assert (got["next"]["state"], got["next"]["attempts"]) == ("pending", 0)
    assert containers(docker_client, of_runner(process.pid)) == []


def test_shards_partition_the_rows_merge_joins_them_and_diff_reports_changes(
    tmp_path: Path, fast: Path
) -> None:
    cases = [{"id": f"s-{i}", "input": i, "command": fake("echo")} for i in range(4)]
    manifest = write_manifest(tmp_path / "shard.jsonl", cases)
    common = ["--image", FAKE_IMAGE, "--profile", fast, "--jobs", "2", "-q"]
    for i in (1, 2):
        done = batch(tmp_path, manifest, *common, "--shard", f"{i}/2", "--results", f"{i}.sqlite")
        assert done.returncode == 0, done.stderr
    one, two = rows(tmp_path / "1.sqlite"), rows(tmp_path / "2.sqlite")
    assert not set(one) & set(two) and set(one) | set(two) == {c["id"] for c in cases}
    merged = batch(tmp_path, "merge", "1.sqlite", "2.sqlite", "-o", "all.sqlite")
    assert merged.returncode == 0, merged.stderr
    assert rows(tmp_path / "all.sqlite").keys() == {c["id"] for c in cases}

    cases[1]["command"] = fake("custom-outcome")  # same id and input, another behaviour
    write_manifest(manifest, cases)
    again = batch(tmp_path, manifest, *common, "--results", "new.sqlite")
    assert again.returncode == 0, again.stderr
    changed = batch(tmp_path, "diff", "all.sqlite", "new.sqlite", "--json")
    assert changed.returncode == 1, changed.stderr
    (entry,) = [json.loads(line) for line in changed.stdout.splitlines()]
    assert entry["id"] == "s-1"
    assert entry["changed"]["outcome"] == {"old": "done", "new": "partial"}
    same = batch(tmp_path, "diff", "all.sqlite", "all.sqlite")
    assert same.returncode == 0 and same.stdout == ""


def runner_containers(client: Any, pid: int, status: str | None = None) -> list[Any]:
    filters: dict[str, str] = {"label": of_runner(pid)}
    if status is not None:
        filters["status"] = status
    return list(client.containers.list(all=status is None, filters=filters))


def wait_containers(client: Any, process: subprocess.Popen[str], count: int) -> None:
    """Until the runner ``process`` has ``count`` running containers (30 s at most)."""
    deadline = time.monotonic() + 30
    while len(runner_containers(client, process.pid, "running")) < count:
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.02)


def test_prepared_containers_stay_within_the_lookahead_and_sigterm_removes_them(
    tmp_path: Path, docker_client: Any, fast: Path
) -> None:
    cases = [{"id": "long", "input": {"seconds": 30}}]
    cases += [{"id": f"next-{i}", "input": {"seconds": 0}} for i in range(6)]
    manifest = write_manifest(tmp_path / "ahead.jsonl", cases)
    # More prepared than slots: the look-ahead is --prepare's, not the slots' queue's.
    args = [manifest, "--image", SLOW_IMAGE, "--profile", fast, "--jobs", "1", "--prepare", "3"]
    process = start_batch(tmp_path, *args, "-q")
    wait_containers(docker_client, process, 4)  # the run and three prepared, up and waiting
    seen = set()
    until = time.monotonic() + 2  # a preparation takes well under 2 s: more would show
    while time.monotonic() < until:
        now = runner_containers(docker_client, process.pid)
        assert len(now) <= 4, [c.labels.get(LABEL_RUN_ID) for c in now]
        seen.update(c.labels[LABEL_RUN_ID].split("-", 1)[1] for c in now)
        time.sleep(0.05)
    assert seen == {"long", "next-0", "next-1", "next-2"}
    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert (got["long"]["state"], got["long"]["attempts"]) == ("running", 1)
    assert all((got[f"next-{i}"]["state"], got[f"next-{i}"]["attempts"]) == ("pending", 0)
               for i in range(6))  # fmt: skip  # prepared is not admitted
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert runner_containers(docker_client, process.pid) == []
    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert (got["long"]["state"], got["long"]["status"]) == ("pending", "interrupted")
    assert all(got[f"next-{i}"]["attempts"] == 0 for i in range(6))


def test_a_second_signal_kills_and_still_removes_every_prepared_container(
    tmp_path: Path, docker_client: Any
) -> None:
    slow_grace = profile_file(tmp_path, "slow-grace", cancel_grace=30, exit_grace=30)
    cases = [{"id": "long", "input": {"seconds": 60}}]
    cases += [{"id": f"next-{i}", "input": {"seconds": 0}} for i in range(4)]
    manifest = write_manifest(tmp_path / "kill.jsonl", cases)
    args = [manifest, "--image", SLOW_IMAGE, "--profile", slow_grace, "--jobs", "1"]
    process = start_batch(tmp_path, *args, "--prepare", "2", "-q")
    wait_containers(docker_client, process, 3)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert time.monotonic() - started < 20  # killed, not the 30 s grace
    assert runner_containers(docker_client, process.pid) == []


def test_halt_and_a_refusal_before_launch_discard_their_prepared_containers(
    tmp_path: Path, docker_client: Any, fast: Path
) -> None:
    since = time.time()
    cases = [
        {"id": "refused", "input": {"seconds": "not a number"}},  # INVALID_INPUT, no run
        {"id": "late", "input": {"seconds": 30}, "deadline": "6s"},  # fails at 6 s: halt
        *({"id": f"after-{i}", "input": {"seconds": 0}} for i in range(4)),
    ]
    manifest = write_manifest(tmp_path / "halt.jsonl", cases)
    args = [manifest, "--image", SLOW_IMAGE, "--profile", fast, "--jobs", "1", "--prepare", "2"]
    process = start_batch(tmp_path, *args, "--halt-on-failure", "2", "-q")
    wait_containers(docker_client, process, 3)  # "late" runs, two rows prepared behind it
    done = finish(process)
    assert done.returncode == 4, done.stderr
    assert runner_containers(docker_client, process.pid) == []
    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert (got["refused"]["status"], got["refused"]["error_code"]) == ("failed", "INVALID_INPUT")
    assert got["late"]["error_code"] == "DEADLINE_EXCEEDED"
    assert all(got[f"after-{i}"]["state"] == "pending" for i in range(4))
    started = starts(docker_client, since, process.pid)
    assert started["refused"] == 1 and started["after-0"] == 1  # prepared, then discarded


def test_a_prepared_run_s_deadline_counts_from_its_admission(
    tmp_path: Path, docker_client: Any, fast: Path
) -> None:
    since = time.time()
    cases = [
        {"id": "first", "input": {"seconds": 5}},
        {"id": "second", "input": {"seconds": 1}, "deadline": "3s"},
    ]
    manifest = write_manifest(tmp_path / "deadline.jsonl", cases)
    args = [manifest, "--image", SLOW_IMAGE, "--profile", fast, "--jobs", "1", "--prepare", "1"]
    done = batch(tmp_path, *args, "-q")
    assert done.returncode == 0, done.stderr
    got = rows(tmp_path / "flow-runner-results.sqlite")
    assert got["second"]["status"] == "succeeded", got["second"]["error_message"]
    # Its container was started while "first" ran, more than its deadline before it ran:
    filters = {"type": "container", "event": "start", "label": LABEL_RUN_ID}
    events = docker_client.events(
        since=since, until=time.time() + 0.1, filters=filters, decode=True
    )
    (start,) = [
        e["time"] for e in events if e["Actor"]["Attributes"][LABEL_RUN_ID].endswith("-second")
    ]
    assert start < got["first"]["ended_at"] - 3
    # and the component saw the whole deadline ahead of it when flow/run came.
    left = float(re.search(r"the deadline is in ([\d.]+) s", got["second"]["stderr_tail"])[1])
    assert left > 2


def test_a_container_whose_removal_failed_is_removed_at_the_batch_end(
    tmp_path: Path, docker_client: Any, fast: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, the engine refusing the first removal (slow or away then): the run is
    an infrastructure failure with its container left, which the live batch's own sweep
    (`gc` spares a live owner's containers) removes once no run is in flight."""
    import anyio

    from runner.batch import BatchOptions, run_batch
    from runner.batch.manifest import Defaults
    from runner.sandbox.docker import engine

    remove = engine.Engine.remove
    refused: list[str] = []

    async def refusing(self: Any, lease: Any) -> None:
        if not refused:
            refused.append(lease.container_id)
            raise lease.loss("simulated: the engine did not answer the removal")
        await remove(self, lease)

    monkeypatch.setattr(engine.Engine, "remove", refusing)
    manifest = write_manifest(tmp_path / "left.jsonl", [{"id": "r", "command": fake("echo")}])
    options = BatchOptions(
        manifest, results=tmp_path / "left.sqlite", jobs=1, retries=0, prepare=0,
        defaults=Defaults(image=FAKE_IMAGE, profile=str(fast)), progress="plain",
    )  # fmt: skip
    result = anyio.run(run_batch, options)
    assert refused and result.statuses
    left = {c.id for c in containers(docker_client, f"{LABEL_OWNER}={owner(os.getpid())}")}
    assert refused[0] not in left


def test_a_flow_rows_container_whose_removal_failed_is_removed_at_the_batch_end(
    tmp_path: Path, docker_client: Any, fast: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end-of-batch sweep covers flow rows too: a flow row's root run carries the
    batch's run id (the one its row records), so the container the engine would not
    remove is found by it once no run is in flight."""
    import anyio

    from runner.batch import BatchOptions, run_batch
    from runner.config import load_config
    from runner.sandbox.docker import engine

    remove = engine.Engine.remove
    refused: list[str] = []

    async def refusing(self: Any, lease: Any) -> None:
        if not refused:
            refused.append(lease.container_id)
            raise lease.loss("simulated: the engine did not answer the removal")
        await remove(self, lease)

    monkeypatch.setattr(engine.Engine, "remove", refusing)
    (tmp_path / "flow-runner.toml").write_text(
        f'[flows.echo]\nimage = "{FAKE_IMAGE}"\nprofile = "{fast}"\n'
    )
    manifest = write_manifest(tmp_path / "flows.jsonl", [{"id": "f", "flow": "echo"}])
    options = BatchOptions(
        manifest, results=tmp_path / "flows.sqlite", jobs=1, retries=0, prepare=0,
        config=load_config(tmp_path / "flow-runner.toml"), progress="plain",
    )  # fmt: skip
    result = anyio.run(run_batch, options)
    assert refused and result.statuses
    (row,) = rows(tmp_path / "flows.sqlite").values()
    left = {c.id for c in containers(docker_client, f"{LABEL_OWNER}={owner(os.getpid())}")}
    assert refused[0] not in left, row
    assert row["run_id"].endswith("-f")


def test_the_docker_engine_names_an_images_id_or_none(docker_client: Any) -> None:
    from runner.sandbox.registry import sandbox_engine

    engine = sandbox_engine("docker")
    assert engine.image_id(FAKE_IMAGE) == docker_client.images.get(FAKE_IMAGE).id
    assert engine.image_id("flow-runner/no-such-image:latest") is None
