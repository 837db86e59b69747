"""The report's JSON written without pydantic (``runner.report_json``) is pydantic's, byte
for byte: over generated fields of every shape a run records (floats of every magnitude,
any text, any details), and over what a real ``--report`` run wrote; anything else is
left to the model."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.api import Execution
from runner.host.driver import Verdict
from runner.report import RunReport
from runner.report_json import FIELDS, report_json

ROOT = Path(__file__).resolve().parents[1]
FAKE = [sys.executable, "tests/fake_component.py"]


def pydantic_json(fields: dict[str, Any]) -> str:
    return RunReport(**fields).model_dump_json(indent=2)


def test_the_fields_are_the_models_in_its_order_with_its_defaults() -> None:
    assert [name for name, _, _ in FIELDS] == list(RunReport.model_fields)
    assert list(RunReport.model_computed_fields) == ["unsandboxed"]
    for name, _, default in FIELDS:
        field = RunReport.model_fields[name]
        if field.is_required():
            continue
        assert field.get_default(call_default_factory=True) == default, name


def some_float(rng: random.Random) -> float:
    kind = rng.random()
    if kind < 0.1:
        return float(rng.randint(0, 10**6))
    if kind < 0.2:
        return rng.choice([0.0, -0.0, 1e-5, 1e-6, 1e-4, 1e16, 1e15, 5e-324, 1.7976931348623157e308])
    return rng.choice([1, -1]) * 10 ** rng.uniform(-12, 22)


def some_text(rng: random.Random) -> str:
    alphabet = [chr(c) for c in range(0, 0x80)] + ["\u2028", "\u00e9", "\U0001f600", "\ufeff"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))


def some_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-(2**70), 2**70)
    if kind == 3:
        return some_float(rng)
    if kind == 4:
        return some_text(rng)
    if kind == 5:
        return [some_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {some_text(rng): some_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def some_fields(rng: random.Random) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "run_id": some_text(rng),
        "target": some_text(rng),
        "backend": rng.choice(["docker", "process"]),
        "status": rng.choice(["succeeded", "failed"]),
    }
    optional: dict[str, Any] = {
        "package": {"name": some_text(rng), "digest": "sha256:" + "0" * 64, "source": "x"},
        "outcome": some_text(rng),
        "error": {"code": "FAILED", "message": some_text(rng), "details": some_json(rng)},
        "reasons": [some_text(rng) for _ in range(rng.randint(0, 3))],
        "exit_code": rng.choice([None, 0, 1, 137, -9]),
        "oom_killed": rng.random() < 0.5,
        "host_kill": rng.choice([None, "cancel", "deadline"]),
        "condition": rng.choice([None, "clean"]),
        "lost": {
            "what": rng.choice(["container", "engine"]),
            "step": "run",
            "seconds": some_float(rng),
            "container_id": "c" * 64,
            "container_left": rng.random() < 0.5,
        },
        "timings": {some_text(rng): some_float(rng) for _ in range(rng.randint(0, 6))},
        "bytes_from_component": rng.randint(0, 2**40),
        "bytes_to_component": rng.randint(0, 2**40),
        "component_requests": rng.randint(0, 100),
        "dispatches": rng.randint(0, 100),
        "stderr_bytes": rng.randint(0, 100),
        "stderr_truncated": rng.random() < 0.5,
        "stderr": some_text(rng),
        "children": [],
    }
    for name, value in optional.items():
        if rng.random() < 0.7:
            fields[name] = value
    return fields


def test_generated_fields_are_written_as_pydantic_writes_them() -> None:
    rng = random.Random(17)
    for _ in range(3000):
        fields = some_fields(rng)
        assert report_json(fields) == pydantic_json(fields), fields


def test_floats_of_every_magnitude_are_written_as_pydantic_writes_them() -> None:
    rng = random.Random(5)
    values = [rng.choice([1, -1]) * 10 ** rng.uniform(-320, 308) for _ in range(20000)]
    values += [float(f"{m}e{e}") for m in (1, 9.99, 2.5) for e in range(-9, 18)]
    fields = {"run_id": "r", "target": "t", "backend": "docker", "status": "failed"}
    for start in range(0, len(values), 500):
        timings = {str(i): v for i, v in enumerate(values[start : start + 500])}
        assert report_json({**fields, "timings": timings}) == pydantic_json(
            {**fields, "timings": timings}
        )


@pytest.mark.parametrize(
    "odd",
    [
        {"timings": {"run": math.nan}},
        {"timings": {"run": math.inf}},
        {"stderr": "\ud800"},
        {"exit_code": True},
        {"reasons": ("a",)},
        {"unknown": 1},
        {"error": {"code": "X", "message": "m", "details": {1: 2}}},
        {"lost": {"what": "container"}},
    ],
)
def test_anything_else_is_left_to_the_model(odd: dict[str, Any]) -> None:
    fields = {"run_id": "r", "target": "t", "backend": "docker", "status": "failed", **odd}
    assert report_json(fields) is None


def test_a_report_with_children_is_the_models() -> None:
    child = RunReport(run_id="c", target="t", backend="process", status="succeeded")
    fields = {"run_id": "r", "target": "t", "backend": "docker", "status": "failed"}
    assert report_json({**fields, "children": [child]}) is None
    execution = Execution(Verdict(None, None, ()), **fields, children=[child])
    assert execution.report_json() == pydantic_json({**fields, "children": [child]})


def test_a_real_runs_report_file_is_pydantics(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    options = ["--process", "--report", str(report), "--input", '{"name": "Ada"}']
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "exec", *options, "--", *FAKE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = report.read_text()
    assert text == RunReport.model_validate_json(text).model_dump_json(indent=2) + "\n"
    assert json.loads(text)["unsandboxed"] is True and json.loads(text)["timings"]
