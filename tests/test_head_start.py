"""A cold ``exec``'s head start (``runner/cli/head_start.py``): the container of its last
launch, started while it imports, claimed only when the run's own configuration is the one
recorded; never a host path or a network from a record; nothing left behind.

The Docker tests run the console script's entry (``runner.launch``) as a user does, each
with a socket directory of its own (``XDG_RUNTIME_DIR``), the head start switched back on.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.cli import head_start

ROOT = Path(__file__).resolve().parents[1]
FAKE_IMAGE = "flow-runner/fake-component:latest"


def environ(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    env.pop(head_start.DISABLE)
    (tmp_path / "run").mkdir(mode=0o700, exist_ok=True)
    return env


def exec_(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``flow-runner exec --report R ARGS`` from ``tmp_path``: the result and the report."""
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "runner.launch", "exec", "--report", str(report), *args],
        cwd=tmp_path, env=environ(tmp_path), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    return done, json.loads(report.read_text()) if report.exists() else {}


def record_of(tmp_path: Path, *args: str) -> Path:
    """The record file of ``exec --report R ARGS`` run from ``tmp_path``."""
    argv = ["flow-runner", "exec", "--report", str(tmp_path / "report.json"), *args]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return Path(head_start.record_path(argv, environ(tmp_path)))
    finally:
        os.chdir(cwd)


# ----- with the engine -------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_the_same_command_again_claims_the_container_started_ahead(tmp_path: Path) -> None:
    args = ("--input", '{"name": "Ada"}', FAKE_IMAGE)
    first, report = exec_(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    assert report["pooled"] is False
    record = record_of(tmp_path, *args)
    assert record.stat().st_mode & 0o777 == 0o600
    assert json.loads(record.read_text())["host_config"]["NetworkMode"] == "none"
    second, again = exec_(tmp_path, *args)
    assert second.returncode == 0, second.stderr
    assert again["pooled"] is True and second.stdout == first.stdout
    varying = {"run_id", "timings", "pooled"}  # as a pooled run's report from the warm runner
    assert {k: v for k, v in again.items() if k not in varying} == {
        k: v for k, v in report.items() if k not in varying
    }
    assert "create" not in again["timings"] and "claim" in again["timings"]


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_record_of_another_configuration_is_not_claimed(tmp_path: Path) -> None:
    # A tag moved, a profile edited: the container started from the record is removed, the
    # run launches fresh, and the record becomes the configuration the run computed.
    args = ("--input", '{"name": "Ada"}', FAKE_IMAGE)
    assert exec_(tmp_path, *args)[0].returncode == 0
    record = record_of(tmp_path, *args)
    computed = json.loads(record.read_text())
    record.write_text(json.dumps({**computed, "user": "4242:4242"}))
    done, report = exec_(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert report["pooled"] is False and "create" in report["timings"]
    assert json.loads(record.read_text()) == computed


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_command_that_never_launches_removes_what_it_started(tmp_path: Path) -> None:
    # The same command line, its input file now broken: refused before any launch, the
    # container started ahead is removed and the record that started it forgotten.
    given = tmp_path / "input.json"
    given.write_text('{"name": "Ada"}')
    args = ("--input", f"@{given}", FAKE_IMAGE)
    assert exec_(tmp_path, *args)[0].returncode == 0
    record = record_of(tmp_path, *args)
    assert record.exists()
    given.write_text('{"name": ')
    done, _ = exec_(tmp_path, *args)
    assert done.returncode == 2 and "input" in done.stderr and "Traceback" not in done.stderr
    assert not record.exists()


# ----- the record and the claim, without an engine ------------------------------------------


def config(user: str = "65534:65534", **host: Any) -> dict[str, Any]:
    """A launch configuration as the default profile makes one, ``host`` changed."""
    host_config = {
        "NetworkMode": "none", "Mounts": [], "Memory": 1 << 28, "PidsLimit": 256,
        "CapDrop": ["ALL"], "ReadonlyRootfs": True,
        "SecurityOpt": ["no-new-privileges", 'seccomp={"defaultAction": "SCMP_ACT_ERRNO"}'],
        **host,
    }  # fmt: skip
    return {"image": "sha256:ab", "command": None, "user": user, "host_config": host_config,
            "source": ["img", "default", None, []]}  # fmt: skip


def write(path: Path, value: Any, mode: int = 0o600) -> Path:
    path.write_text(json.dumps(value))
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    "planted",
    [
        config(Mounts=[{"Type": "bind", "Source": "/root/.ssh", "Target": "/x", "ReadOnly": True}]),
        config(NetworkMode="host"),
        config(NetworkMode="bridge"),
        config(Privileged=True),
        config(CapAdd=["SYS_ADMIN"]),
        config(Binds=["/:/host"]),
        config(Devices=[{"PathOnHost": "/dev/kmsg"}]),
        config(CapDrop=["NET_RAW"]),
        config(ReadonlyRootfs=False),
        config(SecurityOpt=['seccomp={"defaultAction": "SCMP_ACT_ERRNO"}']),
        config(SecurityOpt=["no-new-privileges", "seccomp=unconfined"]),
        config(Memory=0),
        config(PidsLimit=None),
        config(user="0"),
        config(user="root:root"),
        config(user="0:1000"),
        {**config(), "extra": 1},
        {"image": "sha256:ab"},
        ["not", "an", "object"],
    ],
)
def test_a_record_names_no_host_path_no_network_no_privilege(tmp_path: Path, planted: Any) -> None:
    tmp_path.chmod(0o700)
    path = write(tmp_path / "r.json", planted)
    assert head_start._read(str(tmp_path), str(path)) is None


def test_a_record_others_could_write_or_a_link_is_not_read(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    good = write(tmp_path / "good.json", config())
    assert head_start._read(str(tmp_path), str(good)) == json.dumps(config(), sort_keys=True)
    loose = write(tmp_path / "loose.json", config(), 0o644)
    assert head_start._read(str(tmp_path), str(loose)) is None
    (tmp_path / "link.json").symlink_to(good)
    assert head_start._read(str(tmp_path), str(tmp_path / "link.json")) is None
    (tmp_path / "big.json").write_text(" " * (head_start.MAX_RECORD_BYTES + 1) + "{}")
    (tmp_path / "big.json").chmod(0o600)
    assert head_start._read(str(tmp_path), str(tmp_path / "big.json")) is None
    tmp_path.chmod(0o755)  # a directory others may enter: no record is read from it
    assert head_start._read(str(tmp_path), str(good)) is None


class FakeAhead:
    def __init__(self, sock: socket.socket) -> None:
        self.container_id, self.run_id, self.sock = "c" * 64, "r" * 32, sock
        self.removed = False

    def started(self) -> bool:
        return True

    def remove(self) -> None:
        self.removed = True


def claimed(tmp_path: Path, recorded: dict[str, Any], asked: dict[str, Any], early: bytes) -> Any:
    """Claim with a container started ahead from ``recorded`` whose component wrote
    ``early``, for a launch of ``asked``: the claim and the fake container."""
    ours, theirs = socket.socketpair()
    theirs.sendall(early)
    start = head_start.HeadStart(str(tmp_path / "run" / "r.json"), None)
    start.recorded = json.dumps(recorded, sort_keys=True)
    start.ahead = fake = FakeAhead(ours)  # type: ignore[assignment]
    return start.claim(asked, "claimer"), fake


def test_a_claim_takes_only_a_matching_silent_container(tmp_path: Path) -> None:
    got, fake = claimed(tmp_path, config(), config(), b"")
    assert got is not None and got.attach_fd >= 0 and not fake.removed
    os.close(got.attach_fd)
    got, fake = claimed(tmp_path, config(), config(), b"early")  # it spoke before flow/run
    assert got is None and fake.removed
    got, fake = claimed(tmp_path, config(), config(Memory=1 << 29), b"")
    assert got is None and fake.removed
    recorded = tmp_path / "run" / "r.json"
    assert json.loads(recorded.read_text()) == config(Memory=1 << 29)  # for the next run
    assert recorded.stat().st_mode & 0o777 == 0o600


def test_records_are_bounded(tmp_path: Path) -> None:
    place = tmp_path / "run"
    for index in range(head_start.KEEP + 5):
        head_start._write(str(place / f"{head_start.PREFIX}{index}.json"), "{}")
    assert len(list(place.glob(f"{head_start.PREFIX}*.json"))) == head_start.KEEP
