"""A configuration file nobody named cannot change what a command line means.

``flow-runner.toml`` in the working directory is read without being asked for, so it may
be anyone's. Its flows cannot be named like images, and its flows that would run a host
command (no sandbox) run only when the user named the file or allowed host commands. Each
test runs the real CLI in a directory of its own, with a command that would leave a
marker file behind if it ever ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostkit import FAKE
from runner.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
HELLO = "flow-runner/examples-hello:latest"
WARNING = "runs on the host with no sandbox"


def flow_runner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``flow-runner ARGS`` run in ``cwd`` (this checkout's code, wherever it runs)."""
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def marking(marker: Path) -> str:
    """A TOML command that leaves ``marker`` behind if it runs."""
    script = f"open({str(marker)!r}, 'w')"
    return json.dumps([sys.executable, "-c", script])


def echo() -> str:
    """A TOML command that runs the fake component's echo scenario on the host."""
    return json.dumps([sys.executable, str(FAKE), "echo"])


@pytest.mark.docker
def test_a_found_file_cannot_turn_an_image_into_a_host_command(
    docker_client: object, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "flow-runner.toml").write_text(f'[flows."{HELLO}"]\ncommand = {marking(marker)}\n')
    ran = flow_runner(tmp_path, "exec", HELLO, "--input", '{"name": "Ada"}')
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"outcome": "done", "output": {"greeting": "Hello, Ada!"}}
    assert WARNING not in ran.stderr
    # Named, the same file is refused: the key is no flow name.
    named = flow_runner(tmp_path, "exec", HELLO, "--config", "flow-runner.toml")
    assert named.returncode == 2
    assert f'flows."{HELLO}": a flow name is a name' in named.stderr
    assert "never an image reference" in named.stderr
    assert not marker.exists()


@pytest.mark.parametrize("name", ["abc\n", "Hello", "a--b", "-a", "a" * 65, "a/b", "a:b", ""])
def test_a_flow_name_must_be_a_local_name(tmp_path: Path, name: str) -> None:
    path = tmp_path / "flow-runner.toml"
    path.write_text(f'[flows.{json.dumps(name)}]\nimage = "x"\n')
    with pytest.raises(ConfigError, match=r"a flow name is a name \(1-64 of a-z"):
        load_config(path)


def test_a_named_file_runs_a_host_command_flow_and_marks_it(tmp_path: Path) -> None:
    config = tmp_path / "hosted.toml"
    config.write_text(f"[flows.local]\ncommand = {echo()}\n")
    report = tmp_path / "report.json"
    ran = flow_runner(
        tmp_path, "exec", "local", "--config", str(config), "--input", "7", "--quiet",
        "--report", str(report),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"outcome": "done", "output": 7}
    assert f"flow 'local' {WARNING}: {sys.executable}" in ran.stderr  # even with --quiet
    written = json.loads(report.read_text())
    assert (written["backend"], written["unsandboxed"]) == ("process", True)


def test_a_found_file_with_a_host_command_runs_only_when_allowed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "flow-runner.toml").write_text(
        f"[flows.local]\ncommand = {marking(marker)}\n[flows.echo]\ncommand = {echo()}\n"
    )
    refused = flow_runner(tmp_path, "exec", "local")
    assert refused.returncode == 2
    assert "found in the working directory, not named" in refused.stderr
    assert "flows.echo, flows.local would run a host command" in refused.stderr
    assert "--config flow-runner.toml" in refused.stderr
    assert "--allow-host-commands" in refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "INVALID_CONFIG"
    assert not marker.exists()
    allowed = flow_runner(tmp_path, "exec", "echo", "--allow-host-commands", "--input", "1")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout) == {"outcome": "done", "output": 1}
    assert f"flow 'echo' {WARNING}" in allowed.stderr
    named = flow_runner(tmp_path, "exec", "echo", "--config", "flow-runner.toml", "--input", "2")
    assert named.returncode == 0, named.stderr
    assert f"flow 'echo' {WARNING}" in named.stderr


def test_a_found_file_with_only_sandboxed_flows_needs_no_opt_in(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "flow-runner.toml").write_text(
        f'[flows.boxed]\nimage = "flow-runner/no-such-image:latest"\ncommand = {marking(marker)}\n'
    )
    ran = flow_runner(tmp_path, "exec", "boxed")  # its command would run in the image
    assert ran.returncode == 2
    assert "flow-runner/no-such-image:latest" in ran.stderr and "make images" in ran.stderr
    assert "host command" not in ran.stderr
    assert not marker.exists()
