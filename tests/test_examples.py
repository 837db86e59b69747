"""Every example flow through ``flow-runner exec``, with its sample input, as README shows.

The images are built from ``examples/*/Dockerfile`` by images/build.sh (the
``docker_client`` fixture runs it). Expected figures are computed here from the sample
files, not copied from a previous run.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from execkit import (
    ROOT,
    StderrTap,
    containers,
    exec_run,
    finish,
    interrupt,
    of_run,
    start,
    wait_running,
)

EXAMPLES = ROOT / "examples"
HELLO = "flow-runner/examples-hello:latest"
WORDCOUNT = "flow-runner/examples-wordcount:latest"
SLOW = "flow-runner/examples-slow:latest"
SAMPLE = EXAMPLES / "wordcount" / "sample"


pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture
def report(tmp_path: Path) -> Path:
    return tmp_path / "report.json"


def sample_figures() -> dict[str, dict[str, int]]:
    """Lines, words and bytes of every sample file, keyed by its path under the sample."""
    figures = {}
    for path in sorted(SAMPLE.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            text = data.decode()
            figures[path.relative_to(SAMPLE).as_posix()] = {
                "lines": len(text.splitlines()),
                "words": len(text.split()),
                "bytes": len(data),
            }
    return figures


# ----- hello ---------------------------------------------------------------------------


@pytest.mark.docker
def test_hello_greets_the_sample_name() -> None:
    ran = exec_run("--input", f"@{EXAMPLES / 'hello' / 'input.json'}", HELLO)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == '{"outcome":"done","output":{"greeting":"Hello, Ada!"}}\n'


@pytest.mark.docker
def test_hello_without_a_name_ends_with_its_declared_outcome() -> None:
    ran = exec_run("--input", "{}", HELLO)
    assert ran.returncode == 3, ran.stderr
    assert ran.printed == {
        "outcome": "anonymous",
        "output": {"greeting": "Hello, whoever you are!"},
    }


# ----- wordcount -----------------------------------------------------------------------


@pytest.mark.docker
def test_wordcount_counts_the_sample_and_reports_the_refused_write(report: Path) -> None:
    ran = exec_run(
        "--input", f"@{EXAMPLES / 'wordcount' / 'input.json'}",
        "--attach", "source=examples/wordcount/sample:ro",
        WORDCOUNT,
        report=report,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    out = ran.printed["output"]
    expected = sample_figures()
    assert len(expected) == 3
    assert out["per_file"] == expected
    assert out["files"] == len(expected)
    for key in ("lines", "words", "bytes"):
        assert out[key] == sum(figures[key] for figures in expected.values()), key
    assert out["skipped"] == []
    assert out["report"] == "/flow/scratch/wordcount-report.txt"
    # The write into the read-only attachment fails inside the container and is reported.
    assert out["source_write"].startswith("refused: [Errno 30] Read-only file system")
    assert not (SAMPLE / ".wordcount-write-probe").exists()
    assert ran.report is not None and ran.report["status"] == "succeeded"


@pytest.mark.docker
def test_wordcount_keeps_its_report_in_a_given_scratch_dir(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)  # the component runs as nobody
    ran = exec_run(
        "--scratch", scratch, "--attach", f"source={SAMPLE}:ro", "--input", "{}", WORDCOUNT
    )
    assert ran.returncode == 0, ran.stderr
    kept = (scratch / "wordcount-report.txt").read_text()
    expected = sample_figures()
    total = [line.split() for line in kept.splitlines() if line.startswith("total ")]
    assert total == [
        [
            "total",
            *(str(sum(f[key] for f in expected.values())) for key in ("lines", "words", "bytes")),
        ]
    ]
    assert all(name in kept for name in expected)


# ----- slow ----------------------------------------------------------------------------


@pytest.mark.docker
def test_slow_is_stopped_at_its_deadline(engine: Any, report: Path) -> None:
    ran = exec_run("--deadline", "2s", "--input", '{"seconds": 30}', SLOW, report=report)
    assert ran.returncode == 124, ran.stderr
    assert ran.error_code == "DEADLINE_EXCEEDED"
    assert "slow: cancelled after" in ran.stderr
    written = ran.report
    assert written is not None
    assert written["condition"] == "DEADLINE_EXCEEDED"
    # It stops cooperatively when the host cancels it at the deadline: no kill needed.
    assert written["host_kill"] is None
    assert written["reasons"] == ["accepted: the component stopped cooperatively at the deadline"]
    # The deadline counts from the start of exec; the run ends within its cancel grace.
    assert ran.seconds >= 2
    assert written["timings"]["exit"] < 2 + 2, written["timings"]
    assert containers(engine, of_run(written["run_id"])) == []


@pytest.mark.docker
def test_slow_is_cancelled_by_ctrl_c_without_a_kill(engine: Any, report: Path) -> None:
    runner = start("--input", '{"seconds": 30}', SLOW, report=report)
    tap = StderrTap(runner)
    wait_running(engine, runner)
    tap.wait_for("slow: sleeping")
    interrupted = time.monotonic()
    interrupt(runner)
    ran = finish(runner, report, interrupted, tap=tap)
    assert ran.returncode == 130, ran.stderr
    assert ran.error_code == "CANCELLED"
    assert "slow: cancelled after" in ran.stderr
    assert ran.seconds < 2, "cooperative: well within the 2 s cancel grace"
    written = ran.report
    assert written is not None
    assert (written["condition"], written["host_kill"], written["exit_code"]) == (
        "CANCELLED",
        None,
        0,
    )


def test_the_research_report_artifacts_stay_out_of_the_checkout() -> None:
    """Run from the checkout, the research-report example writes its artifacts under its
    configured root; that tree is ignored, so a run leaves the work tree clean."""
    from runner.config import load_config

    config = load_config(EXAMPLES / "research-report" / "flow-runner.toml")
    binding = config.flow("research-report").capabilities["artifacts"]
    root = config.resolve(binding.options["root"])
    written = (root / "notes" / "subject.txt").relative_to(ROOT)
    ignored = subprocess.run(["git", "check-ignore", "-q", str(written)], cwd=ROOT, check=False)
    assert ignored.returncode == 0, f"{written} would show in git status"
