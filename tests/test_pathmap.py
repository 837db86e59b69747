"""The path map of a runner in a container (runner/sandbox/pathmap.py), without an engine:
how its own container is found in mountinfo, and how paths translate or are refused.
The map of a real runner container is exercised in tests/test_runner_image.py."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from runner.sandbox.attachments import AttachmentError
from runner.sandbox.own_container import own_container_id
from runner.sandbox.pathmap import HostSource, PathMap, RunnerMount

CID = "f30c22bf7cdf" + "0" * 52
MOUNTINFO = (
    "612 540 0:52 / / ro,relatime master:1 - overlay overlay rw,lowerdir=/x\n"
    f"630 612 8:1 /docker/containers/{CID}/resolv.conf /etc/resolv.conf rw - ext4 /dev/sda1 rw\n"
    f"631 612 8:1 /docker/containers/{CID}/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n"
)


def test_the_runner_container_is_named_by_its_hostname_mount_not_its_hostname(
    tmp_path: Path,
) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert own_container_id(info) == CID
    info.write_text(MOUNTINFO.replace(f"/containers/{CID}/", "/elsewhere/"))
    assert own_container_id(info) is None


def mapped(*mounts: tuple[str, str, str]) -> PathMap:
    return PathMap(True, CID, tuple(RunnerMount(PurePosixPath(d), t, s) for d, t, s in mounts))


def test_the_longest_bind_mount_prefix_wins() -> None:
    paths = mapped(("/work", "bind", "/home/ci/build"), ("/work/cache", "bind", "/srv/cache"))
    assert paths.translate(Path("/work/src/a.txt")) == HostSource(
        "bind", "/home/ci/build/src/a.txt"
    )
    assert paths.translate(Path("/work/cache/x")) == HostSource("bind", "/srv/cache/x")
    assert paths.translate(Path("/work")) == HostSource("bind", "/home/ci/build")


def test_a_path_no_mount_covers_is_refused_with_the_v_that_fixes_it() -> None:
    paths = mapped(("/work", "bind", "/home/ci/build"))
    with pytest.raises(
        AttachmentError, match=r"/workspace/in cannot be attached.*-v HOSTPATH:/workspace/in"
    ):
        paths.translate(Path("/workspace/in"))


def test_a_named_volume_is_mounted_whole_or_refused() -> None:
    paths = mapped(("/data", "volume", "shared"), ("/tmp", "tmpfs", ""))
    assert paths.translate(Path("/data")) == HostSource("volume", "shared")
    with pytest.raises(AttachmentError, match=r"inside the named volume 'shared'"):
        paths.translate(Path("/data/sub"))
    with pytest.raises(AttachmentError, match=r"on a tmpfs mount"):
        paths.translate(Path("/tmp/x"))


def test_outside_a_container_or_in_one_the_engine_does_not_know_paths_stay() -> None:
    assert PathMap().translate(Path("/any/path")) == HostSource("bind", "/any/path")
    assert PathMap(in_container=True).translate(Path("/x")) == HostSource("bind", "/x")
