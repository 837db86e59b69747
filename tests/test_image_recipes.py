"""images/build.sh rebuilds an image whenever a file it copies changes.

The recipe label decides whether an image is rebuilt, so a copied file missing from the
recipe leaves a stale image in use (runner/__init__.py once was). The test changes each
copied file of a few images in a copy of the checkout and reads the recipes again.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def recipes(checkout: Path) -> dict[str, str]:
    listed = subprocess.run(
        [str(checkout / "images" / "build.sh"), "--recipes"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return dict(line.split() for line in listed.stdout.splitlines())


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    copy = tmp_path / "checkout"
    for part in ("images", "examples", "runner", "tests"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.mark.parametrize(
    ("image", "copied"),
    [
        ("flow-runner/examples-hello:latest", "runner/__init__.py"),
        ("flow-runner/examples-hello:latest", "examples/hello/input.schema.json"),
        ("flow-runner/fake-component:latest", "tests/fake_component.py"),
        ("flow-runner/examples-live-progress-parent:latest", "runner/component/wire.py"),
        ("flow-runner/examples-hello:latest", "runner/protocol/codes.py"),
    ],
)
def test_a_changed_copied_file_changes_the_recipe(checkout: Path, image: str, copied: str) -> None:
    before = recipes(checkout)
    with (checkout / copied).open("a") as file:
        file.write("\n")
    after = recipes(checkout)
    assert after[image] != before[image], f"{copied} is not among {image}'s rebuild inputs"
    unrelated = "flow-runner/probe:latest"
    assert after[unrelated] == before[unrelated], "an image that does not copy it is kept"
