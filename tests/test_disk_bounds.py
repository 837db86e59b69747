"""Disk bounds: a host scratch directory and read-write attachments, and the tmpfs entries.

The walk that measures a directory is tested in-process; the bounds themselves through
``flow-runner exec`` against the real engine, with a Run/1 component
(tests/components/disk_writer.py) passed to the fake-component image as ``python3 -c``.
A bounded host directory is polled every ``disk_poll`` seconds (runner/sandbox/disk.py),
so what a component writes within one interval overshoots the bound; the tests assert a
bound on that overshoot that a component writing 1 GiB at full speed stays within.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from execkit import FAKE_IMAGE, Exec, exec_run, profile_file
from runner.sandbox.base import DiskBreach
from runner.sandbox.disk import DiskBound, DiskWatch, measure
from runner.sandbox.errors import DockerSandboxError

MIB = 1 << 20
WRITER = (Path(__file__).with_name("components") / "disk_writer.py").read_text()
OVERSHOOT = 768 * MIB
"""What a writer at about 600 MiB/s (this machine) may add past its bound before it is
stopped: 7-25 MiB on a quiet machine, up to 760 MiB seen with the engine saturated by
other test runs (the kill itself then takes over a second). The writer sets out to
write 2 GiB, so a run that was not stopped fails the test."""


def writer(*args: str | Path, profile: Path, input_: str) -> Exec:
    """``flow-runner exec`` of the disk writer under ``profile``."""
    command = ["--", "python3", "-c", WRITER]
    return exec_run("--profile", profile, "--input", input_, *args, FAKE_IMAGE, *command)


def shared_dir(path: Path) -> Path:
    """A host directory the component's user (nobody) may write into."""
    path.mkdir()
    path.chmod(0o777)
    return path


def on_disk(path: Path) -> int:
    return sum(
        os.lstat(os.path.join(top, name)).st_blocks * 512
        for top, dirs, files in os.walk(path)
        for name in (*dirs, *files)
    )


# ----- the walk ------------------------------------------------------------------------


def test_measure_counts_allocated_bytes_and_entries_without_following_links(
    tmp_path: Path,
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data").write_bytes(b"x" * MIB)
    os.link(tmp_path / "sub" / "data", tmp_path / "hardlink")
    (tmp_path / "sparse").open("wb").truncate(1 << 40)  # a TiB that takes no space
    (tmp_path / "to-root").symlink_to("/")
    usage = measure(tmp_path, 100)
    assert usage.complete and usage.entries == 5
    assert MIB <= usage.bytes < MIB + 64 * 1024  # the linked MiB once, the sparse TiB not


def test_measure_stops_at_its_entry_cap(tmp_path: Path) -> None:
    for index in range(50):
        (tmp_path / f"f{index}").touch()
    assert measure(tmp_path, 50).complete
    capped = measure(tmp_path, 20)
    assert (capped.complete, capped.entries) == (False, 21)


def test_a_bound_counts_only_what_the_run_added(tmp_path: Path) -> None:
    (tmp_path / "old").write_bytes(b"x" * (2 * MIB))
    bound = DiskBound.at_launch("scratch", tmp_path, MIB, 10, "scratch_size")
    assert bound.reading()[1] is None  # 2 MiB were there before: not the run's
    (tmp_path / "new").write_bytes(b"x" * (MIB // 2))
    assert bound.reading()[1] is None
    (tmp_path / "more").write_bytes(b"x" * MIB)
    breach = bound.reading()[1]
    assert breach is not None and breach.reason == "bytes"
    assert breach.added_bytes >= 3 * MIB // 2 and breach.limit_bytes == MIB
    for index in range(11):
        (tmp_path / f"e{index}").touch()
    (tmp_path / "more").unlink()
    breach = bound.reading()[1]
    assert breach is not None and breach.reason == "entries"


def test_a_tree_deeper_than_path_max_is_a_breach_not_a_dead_watch(tmp_path: Path) -> None:
    """A component can nest directories past PATH_MAX (each mkdir relative to the last):
    the walk cannot reach below, and says so, instead of raising out of the watch thread
    (which then polled no more, and the bound was gone)."""
    bound = DiskBound.at_launch("scratch", tmp_path, MIB, 10_000, "scratch_size")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(25):  # 25 levels of 200-byte names: 5,025 bytes, past PATH_MAX (4,096)
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    breach = bound.reading()[1]
    assert breach is not None and breach.reason == "unreadable", breach


def test_a_directory_already_over_the_entry_cap_is_refused_at_launch(tmp_path: Path) -> None:
    for index in range(20):
        (tmp_path / f"f{index}").touch()
    with pytest.raises(DockerSandboxError, match=r"already holds more than 10 entries"):
        DiskBound.at_launch("scratch", tmp_path, MIB, 10, "scratch_size")


def test_the_watch_polls_sooner_while_a_directory_grows_fast(tmp_path: Path) -> None:
    """Space allocated at about 800 MiB/s (fallocate: no data written) against a 256 MiB
    bound polled every 0.2 s: a fixed interval saw it first ~64 MiB past the bound; the
    watch, polling sooner as the room left shrinks, sees it within a few MiB."""
    bound = DiskBound.at_launch("scratch", tmp_path, 256 * MIB, 10, "scratch_size")
    seen: list[DiskBreach] = []
    breached = threading.Event()

    def on_breach(breach: DiskBreach) -> None:
        seen.append(breach)
        breached.set()

    watch = DiskWatch((bound,), 0.2, on_breach)
    fd = os.open(tmp_path / "big", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        watch.start()
        size = 0
        while not breached.wait(0.01) and size < 1024 * MIB:
            size += 8 * MIB
            os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
        watch.stop()
    [breach] = seen
    assert breach.reason == "bytes" and breach.knob == "scratch_size"
    assert 256 * MIB < breach.added_bytes < 256 * MIB + 24 * MIB, breach.added_bytes / MIB


# ----- against the engine ------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_host_scratch_dir_is_held_to_the_scratch_size(tmp_path: Path) -> None:
    scratch = shared_dir(tmp_path / "scratch")
    profile = profile_file(tmp_path, scratch_size="64m", disk_poll=0.1)
    ran = writer("--scratch", scratch, profile=profile, input_='{"into": "scratch", "mib": 2048}')
    assert ran.returncode == 4, ran.stderr
    error = ran.printed["error"]
    assert error["code"] == "RESOURCE_EXHAUSTED", error
    disk = error["details"]["disk"]
    assert (disk["name"], disk["path"], disk["reason"]) == ("scratch", str(scratch), "bytes")
    assert disk["limitBytes"] == 64 * MIB < disk["addedBytes"] <= on_disk(scratch)
    assert on_disk(scratch) < 64 * MIB + OVERSHOOT  # not the 2 GiB it set out to write
    assert "the sandbox profile's scratch_size" in error["message"]
    assert ran.seconds < 20


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_read_write_attachment_is_held_to_its_quota(tmp_path: Path) -> None:
    out = shared_dir(tmp_path / "out")
    (out / "kept").write_bytes(b"x" * (8 * MIB))  # there before the run: not counted
    profile = profile_file(tmp_path, attachment_quota="32m", disk_poll=0.1)
    spec = '{"into": "out", "mib": 2048}'
    ran = writer("--attach", f"out={out}:rw", profile=profile, input_=spec)
    assert ran.returncode == 4, ran.stderr
    error = ran.printed["error"]
    assert error["code"] == "RESOURCE_EXHAUSTED", error
    disk = error["details"]["disk"]
    assert (disk["name"], disk["path"], disk["limitBytes"]) == ("out", str(out), 32 * MIB)
    assert 32 * MIB < (out / "big").stat().st_blocks * 512 < 32 * MIB + OVERSHOOT
    assert "out" in error["message"] and str(32 * MIB) in error["message"]
    assert "the sandbox profile's attachment_quota" in error["message"]


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_planting_files_past_the_entry_bound_stops_the_run(tmp_path: Path) -> None:
    scratch = shared_dir(tmp_path / "scratch")
    profile = profile_file(tmp_path, disk_entries=2000, disk_poll=0.1)
    spec = '{"into": "scratch", "files": 1000000}'
    ran = writer("--scratch", scratch, profile=profile, input_=spec)
    assert ran.returncode == 4, ran.stderr
    disk = ran.printed["error"]["details"]["disk"]
    assert (disk["reason"], disk["limitEntries"]) == ("entries", 2000)
    assert len(os.listdir(scratch)) < 1_000_000


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_within_the_bounds_nothing_changes(tmp_path: Path) -> None:
    scratch, out = shared_dir(tmp_path / "scratch"), shared_dir(tmp_path / "out")
    profile = profile_file(tmp_path, scratch_size="64m", attachment_quota="64m", disk_poll=0.05)
    for into in ("scratch", "out"):
        spec = f'{{"into": "{into}", "mib": 16, "files": 100}}'
        both = ("--scratch", scratch, "--attach", f"out={out}:rw")
        ran = writer(*both, profile=profile, input_=spec)
        assert ran.returncode == 0, ran.stderr
        assert ran.printed["output"] == {"written": 16 * MIB, "files": 100, "error": None}


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_the_private_scratch_tmpfs_is_held_to_the_entry_bound(tmp_path: Path) -> None:
    profile = profile_file(tmp_path, disk_entries=500)
    ran = writer(profile=profile, input_='{"into": "scratch", "files": 100000}')
    assert ran.returncode == 0, ran.stderr
    output = ran.printed["output"]
    assert output["error"] == "ENOSPC" and output["files"] < 500, output
