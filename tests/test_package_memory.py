"""Reading a package near flow-runner's 256 MiB bound holds it in memory once.

An image whose package directory holds 240 MiB (30 files of 8 MiB) is run twice with an
empty disk cache: the first run reads the package out of the image and stores it in the
cache, the second reads the cache. Each run's peak RSS (the runner's own, through
tests/peak.py) stays under the package's size plus the runner's baseline and a margin;
before, the archive was held as a bytearray and a copy of it, and the cache was one JSON
document of base64 text, which peaked near 1.3 GiB.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execkit import CLI, FAKE_SCRIPT, ROOT
from rsskit import measured, peak_kib
from runner.package import reader

IMAGE = "flow-runner/test-big-package:latest"
FILES, FILE_MIB = 30, 8
BOUND_MIB = 512
"""The peak allowed: the 240 MiB read once, the runner's own ~70 MiB, and a margin."""


@pytest.fixture(scope="module")
def big_package(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    context = tmp_path_factory.mktemp("big-package")
    (context / "Dockerfile").write_text(
        "FROM flow-runner/fake-component:latest\n"
        "USER 0\n"
        f"RUN mkdir -p /flow/package && for i in $(seq 1 {FILES}); do "
        f"head -c {FILE_MIB << 20} /dev/urandom > /flow/package/f$i.bin; done\n"
        "USER 65534:65534\n"
    )
    subprocess.run(
        ["docker", "build", "--network", "none", "-q", "-t", IMAGE, str(context)],
        check=True,
        capture_output=True,
    )
    try:
        yield IMAGE
    finally:
        docker_client.images.remove(IMAGE, force=True)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.usefixtures("engine")
def test_a_package_near_the_bound_is_held_once_read_and_cached(
    big_package: str, tmp_path: Path
) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = [*CLI, "exec", "--input", '{"n": 1}', big_package, "--",
            "python3", FAKE_SCRIPT, "echo"]  # fmt: skip
    peaks = []
    for attempt in ("image", "cache"):
        report = tmp_path / f"peak-{attempt}"
        ran = subprocess.run(
            measured(argv, report), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, ran.stderr[-2000:]
        peaks.append(peak_kib(report) >> 10)
    assert list((tmp_path / "cache" / "flow-runner" / "packages").iterdir()), "it was cached"
    assert max(peaks) < BOUND_MIB, peaks


def test_a_cache_entry_reads_back_whole_or_is_a_miss(tmp_path: Path) -> None:
    files = {"FLOW.md": b"---\nname: x\n---\n", "schemas/in.json": b"{}", "empty": b""}
    entry = tmp_path / "entry.pack"
    reader._store(entry, files)
    assert reader._cached(entry) == files
    reader._store(entry, None)
    assert reader._cached(entry) is None
    reader._store(entry, files)
    whole = entry.read_bytes()
    for cut in (len(whole) - 1, len(whole) // 2, 10):
        entry.write_bytes(whole[:cut])
        assert reader._cached(entry) is False, cut
    entry.write_bytes(b"{}")
    assert reader._cached(entry) is False
    assert reader._cached(tmp_path / "absent") is False
