"""Shared pieces for tests that run ``flow-runner exec`` against the Docker engine.

The CLI runs as a real subprocess (``python -m runner.cli``), so exit statuses, signals
and the echo of the component's stderr are what a user gets. Every container a runner
makes carries ``flow-runner.owner = <hostname>:<pid>``, which lets a test find the
container of the runner process it started (to signal the runner once its component
runs) and check afterwards that none is left.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "runner.cli"]
FAKE_IMAGE = "flow-runner/fake-component:latest"
FAKE_SCRIPT = "/fake/fake_component.py"
LABEL_RUN_ID = "flow-runner.run-id"
LABEL_OWNER = "flow-runner.owner"


def fake(scenario: str) -> list[str]:
    """``IMAGE -- COMMAND`` arguments that run one fake-component scenario."""
    return [FAKE_IMAGE, "--", "python3", FAKE_SCRIPT, scenario]


def profile_file(directory: Path, name: str = "fast", **keys: object) -> Path:
    """A sandbox profile file: the default profile with short graces and ``keys`` changed."""
    settings: dict[str, object] = {"cancel_grace": 0.5, "exit_grace": 0.5, **keys}
    path = directory / f"{name}.toml"
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items()))
    return path


@dataclass
class Exec:
    """One finished ``flow-runner exec``: status, output, its report and its wall time."""

    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None
    seconds: float

    @property
    def printed(self) -> dict[str, Any]:
        """The one JSON line exec printed on stdout."""
        assert self.stdout.count("\n") == 1, (self.stdout[:300], self.stderr[-2000:])
        value: dict[str, Any] = json.loads(self.stdout)
        return value

    @property
    def error_code(self) -> str:
        return str(self.printed["error"]["code"])


def start(
    *args: str | Path, report: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``flow-runner exec ARGS`` (with ``--report``, in ``env``) without waiting."""
    options = []
    if report is not None:
        report.unlink(missing_ok=True)  # a report left by an earlier run must not be read
        options = ["--report", str(report)]
    return subprocess.Popen(
        [*CLI, "exec", *options, *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


class StderrTap:
    """Reads a runner's stderr in a thread, so a test can wait for a line and keep it all."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self._stderr = process.stderr
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stderr:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 30) -> None:
        """Return once a line containing ``text`` was written (fail after ``timeout``)."""
        with self._changed:
            seen = self._changed.wait_for(lambda: any(text in x for x in self._lines), timeout)
        assert seen, f"{text!r} never appeared on stderr: {''.join(self._lines)[-2000:]}"

    def text(self, timeout: float = 10) -> str:
        """Everything read, once stderr has ended."""
        self._thread.join(timeout)
        return "".join(self._lines)


def finish(
    process: subprocess.Popen[str],
    report: Path | None,
    started: float,
    timeout: float = 60,
    tap: StderrTap | None = None,
) -> Exec:
    """Wait for a started exec and collect what it left (stderr from ``tap`` if given)."""
    try:
        if tap is None:
            out, err = process.communicate(timeout=timeout)
        else:
            process.wait(timeout)
            assert process.stdout is not None
            out, err = process.stdout.read(), tap.text()
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"flow-runner exec {process.args!r} hung") from None
    seconds = time.monotonic() - started
    written = json.loads(report.read_text()) if report is not None and report.exists() else None
    return Exec(process.returncode, out, err, written, seconds)


def exec_run(
    *args: str | Path,
    report: Path | None = None,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
) -> Exec:
    """Run ``flow-runner exec ARGS`` (in ``env``) to its end."""
    started = time.monotonic()
    return finish(start(*args, report=report, env=env), report, started, timeout)


def flow_runner(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Any other ``flow-runner`` command, run to its end (in ``env``)."""
    return subprocess.run(
        [*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False, env=env
    )


def owner(pid: int) -> str:
    """The owner label value of containers made by process ``pid`` on this host."""
    return f"{socket.gethostname()}:{pid}"


def containers(client: Any, label: str) -> list[Any]:
    """Containers (any state) carrying ``label`` (``key=value``)."""
    return list(client.containers.list(all=True, filters={"label": label}))


def of_run(run_id: str) -> str:
    return f"{LABEL_RUN_ID}={run_id}"


def of_runner(pid: int) -> str:
    return f"{LABEL_OWNER}={owner(pid)}"


def wait_running(client: Any, process: subprocess.Popen[str], timeout: float = 30) -> Any:
    """The running container of runner ``process``, once the engine reports it running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the runner ended early: {process.communicate()}"
        found = client.containers.list(
            filters={"label": of_runner(process.pid), "status": "running"}
        )
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no running container for runner {process.pid} within {timeout} s")


def interrupt(process: subprocess.Popen[str]) -> None:
    """Ctrl-C, as a terminal sends it to the runner."""
    process.send_signal(signal.SIGINT)
