"""examples/shell-hello: a component with no Python and no SDK, through ``exec`` and ``batch``.

Its image holds one static busybox (sh and awk) and the package: no libc, no Python. The
Kubernetes path runs it too (tests/test_k8s.py). Together they show the host asks
nothing of a component but Run/1 on its stdio.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from execkit import ROOT, exec_run, flow_runner

SHELL_HELLO = "flow-runner/examples-shell-hello:latest"

pytestmark = pytest.mark.usefixtures("engine")


@pytest.mark.docker
def test_shell_hello_greets_through_exec(docker_client: object) -> None:
    ran = exec_run("--input", f"@{ROOT / 'examples' / 'shell-hello' / 'input.json'}", SHELL_HELLO)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == '{"outcome":"done","output":{"greeting":"Hello, Ada!"}}\n'
    assert "shell-hello: answering the flow/run request" in ran.stderr
    anonymous = exec_run("--input", "{}", SHELL_HELLO)
    assert anonymous.returncode == 3, anonymous.stderr
    assert anonymous.printed == {
        "outcome": "anonymous", "output": {"greeting": "Hello, whoever you are!"}
    }  # fmt: skip
    refused = exec_run("--input", '{"name": 7}', SHELL_HELLO)  # its package's input schema
    assert refused.returncode == 2 and "INVALID_INPUT" in refused.stderr, refused.stderr


@pytest.mark.docker
def test_shell_hello_rows_through_batch(tmp_path: Path) -> None:
    manifest = tmp_path / "greetings.jsonl"
    manifest.write_text(
        f'{{"id": "ada", "image": "{SHELL_HELLO}", "input": {{"name": "Ada \\"A\\" L."}}}}\n'
        f'{{"id": "nobody", "image": "{SHELL_HELLO}", "input": {{}}}}\n'
    )
    store = tmp_path / "results.sqlite"
    ran = flow_runner("batch", str(manifest), "--results", str(store))
    assert ran.returncode == 0, ran.stderr
    rows = (
        sqlite3.connect(store)
        .execute("SELECT id, status, outcome, output FROM runs ORDER BY id")
        .fetchall()
    )
    assert rows == [
        ("ada", "succeeded", "done", '{"greeting":"Hello, Ada \\"A\\" L.!"}'),
        ("nobody", "succeeded", "anonymous", '{"greeting":"Hello, whoever you are!"}'),
    ]
