"""A cold ``exec``'s head start (``runner/cli/head_start.py``): the container of its last
launch, started while it imports, claimed only when the run's own configuration is the one
recorded; never a host path or a network from a record; nothing left behind.

The Docker tests run the console script's entry (``runner.launch``) as a user does, each
with a socket directory of its own (``XDG_RUNTIME_DIR``), the head start switched back on.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runner.cli import head_start
from runner.sandbox.docker import ahead

ROOT = Path(__file__).resolve().parents[1]
FAKE_IMAGE = "flow-runner/fake-component:latest"
HELLO = "flow-runner/examples-hello:latest"


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


@pytest.mark.docker
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, -15)])
def test_a_stop_before_the_run_removes_the_container_started_ahead(
    tmp_path: Path, docker_client: Any, no_leaks: None, signum: int, status: int
) -> None:
    # The command waits for its input on stdin, before its event loop, its container
    # started; Ctrl-C or SIGTERM there removes the container, and the process ends as the
    # signal says.
    args = ("--input", "-", FAKE_IMAGE)
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "runner.launch", "exec", "--report", str(report), *args]
    first = subprocess.run(
        command, input='{"name": "Ada"}', cwd=tmp_path, env=environ(tmp_path),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal has it
    try:
        waiting = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=tmp_path, env=environ(tmp_path), text=True,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    mine = {"label": f"flow-runner.owner={socket.gethostname()}:{waiting.pid}"}
    while not docker_client.containers.list(filters={**mine, "status": "running"}, sparse=True):
        assert waiting.poll() is None, waiting.communicate()  # the event waited for: it runs
    waiting.send_signal(signum)
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == status and "Traceback" not in err, (waiting.returncode, err)
    assert docker_client.containers.list(all=True, filters=mine, sparse=True) == []


def created_by(docker_client: Any, pid: int, since: float) -> int:
    """How many containers process ``pid`` of this host created since ``since``."""
    events = docker_client.events(
        since=int(since), until=int(time.time()) + 1, decode=True,
        filters={"type": "container", "event": "create",
                 "label": f"flow-runner.owner={socket.gethostname()}:{pid}"},
    )  # fmt: skip
    return sum(1 for _ in events)


@pytest.mark.docker
@pytest.mark.timeout(120)
def test_a_run_refused_before_launch_removes_its_container_before_any_output(
    tmp_path: Path, docker_client: Any, no_leaks: None
) -> None:
    # Refused by the package's input schema: the container started ahead goes as the
    # event loop ends, before the refusal is written to a stdout that takes nothing.
    given = tmp_path / "input.json"
    given.write_text('{"name": "Ada"}')
    args = ("--input", f"@{given}", HELLO)
    assert exec_(tmp_path, *args)[0].returncode == 0
    given.write_text('{"name": 5}')
    full, stuck = os.pipe()
    os.set_blocking(stuck, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(stuck, b"x" * 65536)
    os.set_blocking(stuck, True)
    began = time.time()
    command = [sys.executable, "-m", "runner.launch", "exec", "--report",
               str(tmp_path / "report.json"), *args]  # fmt: skip
    refused = subprocess.Popen(
        command, stdout=stuck, stderr=subprocess.PIPE, cwd=tmp_path, env=environ(tmp_path)
    )
    os.close(stuck)
    try:
        syscall = Path(f"/proc/{refused.pid}/syscall")
        while syscall.read_text().split()[:2] != ["1", "0x1"]:  # write(1, ...), x86-64
            assert refused.poll() is None
            time.sleep(0.01)  # until its output blocks: the event waited for
        mine = {"label": f"flow-runner.owner={socket.gethostname()}:{refused.pid}"}
        assert docker_client.containers.list(all=True, filters=mine, sparse=True) == []
        assert created_by(docker_client, refused.pid, began) == 1  # one was started ahead
    finally:
        refused.terminate()
        refused.communicate(timeout=60)
        os.close(full)
    assert refused.returncode == -signal.SIGTERM


# ----- the record and the claim, without an engine ------------------------------------------


def config(user: str = "65534:65534", image: str = "sha256:" + "ab" * 32, **host: Any) -> Any:
    """A launch configuration as the default profile makes one, ``host`` changed."""
    host_config = {
        "Memory": 1 << 29, "MemorySwap": 1 << 29, "ReadonlyRootfs": True, "NetworkMode": "none",
        "SecurityOpt": ["no-new-privileges", f"seccomp={ahead._seccomp()[0]}"],
        "Ulimits": [{"Name": "nofile", "Soft": 1024, "Hard": 1024}],
        "LogConfig": {"Type": "none", "Config": {}},
        "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=67108864,nr_inodes=65536,mode=1777"},
        "PidsLimit": 256, "Init": True, "Runtime": "runc", "Mounts": [], "CapDrop": ["ALL"],
        "NanoCpus": 1_000_000_000, **host,
    }  # fmt: skip
    return {"image": image, "command": None, "user": user, "host_config": host_config,
            "source": ["img", "default", None, []]}  # fmt: skip


def seccomp(**document: Any) -> str:
    return "seccomp=" + json.dumps(document, separators=(",", ":"))


@pytest.mark.parametrize(
    "planted",
    [
        config(Mounts=[{"Type": "bind", "Source": "/root/.ssh", "Target": "/x", "ReadOnly": True}]),
        config(NetworkMode="host"),
        config(NetworkMode="bridge"),
        config(Privileged=True),
        config(CapAdd=["SYS_ADMIN"]),
        config(CapDrop=["NET_RAW"]),
        config(Binds=["/:/host"]),
        config(VolumesFrom=["other"]),
        config(Devices=[{"PathOnHost": "/dev/kmsg"}]),
        config(DeviceRequests=[{"Count": -1}]),
        config(PidMode="host"),
        config(IpcMode="host"),
        config(UsernsMode="host"),
        config(OomScoreAdj=-1000),
        config(GroupAdd=["0"]),
        config(Sysctls={"kernel.shm_rmid_forced": "1"}),
        config(MaskedPaths=[]),
        config(ReadonlyRootfs=False),
        config(SecurityOpt=[seccomp(defaultAction="SCMP_ACT_ERRNO")]),
        config(SecurityOpt=["no-new-privileges", seccomp(defaultAction="SCMP_ACT_ALLOW")]),
        config(SecurityOpt=["no-new-privileges", "seccomp=unconfined"]),
        {
            **config(),
            "host_config": {
                **config()["host_config"],
                "SecurityOpt": [*config()["host_config"]["SecurityOpt"], "no-new-privileges=false"],
            },
        },
        {
            **config(),
            "host_config": {
                **config()["host_config"],
                "SecurityOpt": [*config()["host_config"]["SecurityOpt"], "apparmor=unconfined"],
            },
        },
        config(LogConfig={"Type": "syslog", "Config": {"syslog-address": "udp://10.0.0.1:514"}}),
        config(Tmpfs={"/etc": "rw,nosuid,nodev"}),
        config(Tmpfs={"/tmp": "rw,exec,suid"}),
        config(Runtime="kata"),
        config(Memory=0),
        config(Memory=True),
        config(PidsLimit=None),
        config(Ulimits=[{"Name": "nofile", "Soft": 1024, "Hard": 1 << 20}]),
        config(user="0"),
        config(user="00"),
        config(user="+0"),
        config(user="-0"),
        config(user="root:root"),
        config(user="0:1000"),
        config(user="1000:0"),
        config(MemorySwap=1 << 30),
        config(Tmpfs={"/tmp": "rw,nosuid,nodev"}),
        config(Tmpfs={"/tmp": "rw,nosuid,nodev,size=0,nr_inodes=0,mode=1777"}),
        config(Ulimits=[{"Name": "nofile", "Soft": -1, "Hard": -1}]),
        config(user="nobody"),
        config(image="flow-runner/fake-component:latest"),
        {**config(), "command": "sh -c id"},
        {**config(), "extra": 1},
        {"image": "sha256:" + "ab" * 32},
        ["not", "an", "object"],
    ],
)
def test_a_record_starts_nothing_looser_than_a_shipped_profile(planted: Any) -> None:
    assert ahead.startable(config())
    assert not ahead.startable(planted)


def test_every_shipped_profile_makes_startable_configurations() -> None:
    # The check would otherwise refuse what flow-runner writes, and no run would start ahead.
    from runner.sandbox.docker.sandbox import _host_config
    from runner.sandbox.profiles import list_profiles, load_profile

    startable = set()
    for name in list_profiles():
        profile = load_profile(name)
        made = {**config(), "user": profile.user, "host_config": _host_config(profile, {}, {})}
        if ahead.startable(json.loads(json.dumps(made))):
            startable.add(name)
    assert {"default", "strict"} <= startable and "dev" not in startable  # dev: writable root


def write(path: Path, value: Any, mode: int = 0o600) -> Path:
    path.write_text(json.dumps(value))
    path.chmod(mode)
    return path


def test_a_record_is_read_only_from_a_file_of_the_users_alone(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    good = write(tmp_path / "good.json", config())
    assert head_start._read(str(tmp_path), str(good)) == json.dumps(config(), sort_keys=True)
    loose = write(tmp_path / "loose.json", config(), 0o644)
    assert head_start._read(str(tmp_path), str(loose)) is None
    (tmp_path / "link.json").symlink_to(good)
    assert head_start._read(str(tmp_path), str(tmp_path / "link.json")) is None
    os.mkfifo(tmp_path / "fifo.json", 0o600)  # opened without blocking, then refused
    assert head_start._read(str(tmp_path), str(tmp_path / "fifo.json")) is None
    big = write(tmp_path / "big.json", " " * head_start.MAX_RECORD_BYTES)
    assert head_start._read(str(tmp_path), str(big)) is None
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    deep.chmod(0o600)
    assert head_start._read(str(tmp_path), str(deep)) is None
    tmp_path.chmod(0o755)  # a directory others may enter: no record is read from it
    assert head_start._read(str(tmp_path), str(good)) is None


class FakeAhead:
    """A container started ahead, as far as the claim sees it: ``refused`` is what the
    engine answers to its start (None: started; an exception: an answer not expected)."""

    def __init__(self, sock: socket.socket, refused: str | Exception | None = None) -> None:
        self.container_id, self.run_id, self.sock = "c" * 64, "r" * 32, sock
        self.gone = threading.Event()
        self._refused = refused

    def refusal(self) -> str | None:
        if isinstance(self._refused, Exception):
            raise self._refused
        return self._refused

    def remove(self) -> None:
        self.gone.set()


def claimed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    asked: Any,
    early: bytes = b"",
    refused: str | Exception | None = None,
) -> Any:
    """Claim, for a launch of ``asked``, a container started ahead from the record
    :func:`config` whose component wrote ``early``: the claim and the fake container."""
    ours, theirs = socket.socketpair()
    theirs.sendall(early)
    fake = FakeAhead(ours, refused)
    monkeypatch.setattr(ahead, "start_ahead", lambda recorded: fake)
    start = head_start.HeadStart(
        str(tmp_path / "run" / "r.json"), json.dumps(config(), sort_keys=True)
    )
    return start.claim(asked, "claimer"), fake


def test_a_claim_takes_only_a_matching_silent_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, fake = claimed(tmp_path, monkeypatch, config())
    assert got is not None and got.attach_fd >= 0 and not fake.gone.is_set()
    assert got.timings == {"pool_wait": 0.0}
    os.close(got.attach_fd)
    refusals: list[tuple[bytes, str | Exception | None]] = [
        (b"early", None),  # it spoke before its flow/run
        (b"", "409 the container is not running"),  # the engine did not start it
        (b"", ValueError("not the engine's answer")),
    ]
    for early, refused in refusals:
        got, fake = claimed(tmp_path, monkeypatch, config(), early, refused)
        assert got is None and fake.gone.wait(10)
    got, fake = claimed(tmp_path, monkeypatch, config(PidsLimit=512))  # removed by its thread
    assert got is None and fake.gone.wait(10)
    recorded = tmp_path / "run" / "r.json"
    assert json.loads(recorded.read_text()) == config(PidsLimit=512)  # for the next run
    assert recorded.stat().st_mode & 0o777 == 0o600
    got, fake = claimed(tmp_path, monkeypatch, config(NetworkMode="bridge"))
    assert got is None and fake.gone.wait(10)
    assert not recorded.exists()  # what could not be started ahead is not recorded


def test_a_container_no_one_claims_is_removed_by_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle: a command waiting for its input on stdin keeps none for long.
    fake = FakeAhead(socket.socketpair()[0])
    monkeypatch.setattr(ahead, "start_ahead", lambda config: fake)
    monkeypatch.setattr(head_start, "IDLE", 0.05)
    head_start.HeadStart(str(tmp_path / "r.json"), json.dumps(config()))
    assert fake.gone.wait(10)


def test_a_container_made_after_the_claim_gave_up_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeAhead(socket.socketpair()[0])
    engine_answers = threading.Event()

    def slow(config: Any) -> FakeAhead:
        engine_answers.wait(10)
        return fake

    monkeypatch.setattr(ahead, "start_ahead", slow)
    monkeypatch.setattr(head_start, "WAIT", 0.05)
    start = head_start.HeadStart(str(tmp_path / "r.json"), json.dumps(config()))
    assert start.claim(config(), "claimer") is None  # the run launches fresh
    engine_answers.set()
    assert fake.gone.wait(10) and start.ahead is None


def test_records_are_kept_by_use_and_bounded(tmp_path: Path) -> None:
    place = tmp_path / "run"
    paths = [place / f"{head_start.PREFIX}{index}.json" for index in range(head_start.KEEP)]
    for index, path in enumerate(paths):
        head_start._write(str(path), "{}")
        os.utime(path, ns=(index * 10**9, index * 10**9))  # 0 the oldest
    head_start._touch(str(paths[0]))  # used just now
    head_start._write(str(place / f"{head_start.PREFIX}new.json"), "{}")
    assert len(list(place.glob(f"{head_start.PREFIX}*.json"))) == head_start.KEEP
    assert paths[0].exists() and not paths[1].exists()  # the least recently used went
    assert not list(place.glob("*.part"))
