"""``flow-runner policy verify`` and ``policy diff`` against the real engine.

Every verify is one container of flow-runner/policy-probe; each profile is probed once per
module (module-scoped fixtures) and the tests read the parsed JSON. The expected rows are
written out here for the intended policy: the default profile passes every row.
Weakened profiles are the default profile with one key changed; each must fail exactly
the rows it weakens beyond what the default profile fails, and no other.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from execkit import CLI, ROOT

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_client")]

ROWS = [
    "identity.uid", "identity.gid", "identity.groups",
    "caps.eff", "caps.prm", "caps.bnd", "caps.amb", "nnp", "seccomp",
    "syscall.mount", "syscall.umount2", "syscall.pivot_root", "syscall.chroot",
    "syscall.unshare.user", "syscall.unshare.mount", "syscall.unshare.net", "syscall.setns",
    "syscall.keyctl", "syscall.add_key", "syscall.bpf", "syscall.perf_event_open",
    "syscall.ptrace", "syscall.process_vm_readv", "syscall.kexec_load",
    "syscall.init_module", "syscall.finit_module", "syscall.reboot", "syscall.swapon",
    "syscall.open_by_handle_at", "syscall.userfaultfd", "syscall.io_uring_setup",
    "syscall.personality",
    "fs.root", "fs.proc_kcore", "fs.proc_sysrq", "fs.proc_sys", "fs.sys", "fs.cgroup",
    "fs.scratch", "fs.tmp", "fs.setuid",
    "dev.nodes", "dev.mknod", "net.interfaces", "net.connect", "net.dns", "engine.sockets",
    "limits.memory", "limits.pids", "limits.cpu", "limits.nofile",
]  # fmt: skip
KEYS = ["id", "group", "guarantee", "declared", "engine", "observed", "verdict", "evidence",
        "reason"]  # fmt: skip
# What gVisor's user-space kernel shows instead of the host's: these rows SKIP on strict.
GVISOR_SKIPS = {
    "caps.amb", "nnp", "seccomp", "syscall.unshare.user", "syscall.unshare.mount",
    "syscall.setns", "syscall.perf_event_open", "syscall.open_by_handle_at",
    "syscall.io_uring_setup", "syscall.personality", "fs.proc_sys", "fs.scratch", "fs.tmp",
    "fs.setuid", "dev.nodes", "dev.mknod", "limits.memory", "limits.pids", "limits.cpu",
}  # fmt: skip
UNCONFINED = {  # what the engine's seccomp filter alone refuses to an unprivileged user
    "seccomp", "syscall.unshare.user", "syscall.keyctl", "syscall.add_key", "syscall.bpf",
    "syscall.perf_event_open", "syscall.ptrace", "syscall.process_vm_readv",
    "syscall.open_by_handle_at", "syscall.userfaultfd", "syscall.io_uring_setup",
    "syscall.personality",
}  # fmt: skip
WEAKENED: dict[str, tuple[dict[str, object], set[str]]] = {
    "cap-added": ({"cap_add": ["NET_RAW"]}, {"caps.bnd"}),
    "writable-root": ({"read_only_root": False}, {"fs.root"}),
    "many-pids": ({"pids": 100_000}, {"limits.pids"}),
    "unconfined": ({"seccomp": "unconfined"}, UNCONFINED),
    "more-memory": ({"memory": "4g"}, {"limits.memory"}),
}


def policy(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "policy", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def rows_of(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    assert done.returncode in (0, 1), done.stderr[-2000:]
    parsed = json.loads(done.stdout)
    assert isinstance(parsed, list)
    return {row["id"]: row for row in parsed}


def verdicts(rows: dict[str, dict[str, str]], verdict: str) -> set[str]:
    return {key for key, row in rows.items() if row["verdict"] == verdict}


def weak_profile(directory: Path, name: str, **keys: object) -> Path:
    """The shipped default profile with ``keys`` changed, as a file named ``name``."""
    settings = tomllib.loads((ROOT / "sandbox-profiles" / "default.toml").read_text())
    settings.pop("name"), settings.pop("description")
    settings["seccomp"] = str(ROOT / "sandbox-profiles" / settings["seccomp"])  # moved away
    settings.update(keys)
    path = directory / f"{name}.toml"
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items()))
    return path


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    junit = tmp_path_factory.mktemp("junit") / "default.xml"
    yield policy("verify", "default", "--json", "--junit", junit), junit


@pytest.fixture(scope="module")
def default_rows(default_run: tuple[Any, Path]) -> dict[str, dict[str, str]]:
    return rows_of(default_run[0])


@pytest.fixture(scope="module")
def profiles_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("profiles")
    for name, (keys, _) in WEAKENED.items():
        weak_profile(directory, name, **keys)
    return directory


def test_default_passes_every_row(default_run: tuple[Any, Path]) -> None:
    done, _ = default_run
    rows = rows_of(done)
    assert list(rows) == ROWS
    assert verdicts(rows, "PASS") == set(ROWS), {
        key: (row["observed"], row["reason"]) for key, row in rows.items() if key in
        set(ROWS) - verdicts(rows, "PASS")
    }  # fmt: skip
    assert done.returncode == 0


def test_default_rows_show_what_is_in_effect(default_rows: dict[str, dict[str, str]]) -> None:
    observed = {key: row["observed"] for key, row in default_rows.items()}
    assert observed["identity.uid"] == observed["identity.gid"] == "65534"
    assert observed["caps.bnd"] == observed["caps.eff"] == "0"
    assert observed["nnp"] == "1"
    assert observed["seccomp"].startswith("mode=2")
    assert observed["net.interfaces"] == "lo"
    assert observed["net.connect"] == "ENETUNREACH"
    assert observed["limits.memory"] == str(512 << 20)
    assert observed["limits.pids"] == "256"
    assert observed["limits.cpu"] == "1.0"
    assert observed["limits.nofile"] == "1024"
    assert default_rows["fs.root"]["evidence"].startswith("/ mounted")
    assert default_rows["fs.root"]["engine"] == "yes"  # HostConfig.ReadonlyRootfs
    assert default_rows["limits.memory"]["engine"] == str(512 << 20)  # HostConfig.Memory
    assert default_rows["syscall.mount"]["observed"] in ("EPERM", "ENOSYS")


def test_json_rows_have_stable_keys(default_rows: dict[str, dict[str, str]]) -> None:
    for row in default_rows.values():
        assert list(row) == KEYS
        assert all(isinstance(value, str) for value in row.values())
        assert row["verdict"] in ("PASS", "FAIL", "SKIP", "ERROR")


def test_junit_report_has_one_case_per_row(default_run: tuple[Any, Path]) -> None:
    done, junit = default_run
    rows = rows_of(done)
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == ROWS
    failed = {case.get("name") for case in cases if case.find("failure") is not None}
    assert failed == verdicts(rows, "FAIL")
    assert suite.get("tests") == str(len(ROWS))
    assert suite.get("failures") == str(len(failed))


def test_dev_fails_only_its_writable_root() -> None:
    rows = rows_of(policy("verify", "dev", "--json"))
    assert list(rows) == ROWS
    assert verdicts(rows, "FAIL") == {"fs.root"}
    assert rows["fs.root"]["observed"].startswith("read_only=no")
    assert rows["limits.memory"]["observed"] == str(2 << 30)


def test_strict_is_verified_on_gvisor_or_skips_saying_how_to_register_it() -> None:
    done = policy("verify", "strict", "--json")
    rows = rows_of(done)
    assert list(rows) == ROWS
    runtimes = subprocess.run(
        ["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True
    ).stdout
    if '"runsc"' not in runtimes:
        assert verdicts(rows, "SKIP") == set(ROWS)
        assert all("images/engine.sh runsc" in row["reason"] for row in rows.values())
        return
    assert verdicts(rows, "SKIP") == GVISOR_SKIPS
    assert verdicts(rows, "PASS") == set(ROWS) - GVISOR_SKIPS
    assert done.returncode == 0
    assert rows["identity.uid"]["observed"] == "65534"
    assert rows["net.interfaces"]["observed"] == "lo"


@pytest.mark.parametrize("name", list(WEAKENED))
def test_a_weakened_profile_fails_exactly_what_it_weakens(
    name: str, profiles_dir: Path, default_rows: dict[str, dict[str, str]]
) -> None:
    _, weakened = WEAKENED[name]
    rows = rows_of(policy("verify", profiles_dir / f"{name}.toml", "--json"))
    assert list(rows) == ROWS
    assert verdicts(rows, "FAIL") == verdicts(default_rows, "FAIL") | weakened
    assert not verdicts(rows, "ERROR")


@pytest.mark.parametrize("name", ["cap-added", "unconfined"])
def test_diff_against_a_weakened_profile_exits_1_naming_the_rows(
    name: str, profiles_dir: Path, default_rows: dict[str, dict[str, str]]
) -> None:
    keys, weakened = WEAKENED[name]
    done = policy("diff", "default", profiles_dir / f"{name}.toml", "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    document = json.loads(done.stdout)
    newly_failing = weakened - verdicts(default_rows, "FAIL")
    named = {row["id"] for row in document["rows"] if row["more_permissive"] == "B"}
    assert named == newly_failing
    assert {setting["key"] for setting in document["settings"]} == {"name", "description", *keys}


def test_diff_of_a_profile_with_itself_is_empty_and_exits_0() -> None:
    done = policy("diff", "default", "default")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rows that differ: 0" in done.stdout


def test_diff_table_marks_the_more_permissive_side(profiles_dir: Path) -> None:
    done = policy("diff", "default", profiles_dir / "writable-root.toml")
    assert done.returncode == 1
    assert "read_only_root: true -> false" in done.stdout
    assert "fs.root" in done.stdout and "writable-root more permissive" in done.stdout


def test_an_attachment_declared_read_only_but_writable_elsewhere_fails(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the probe runs as nobody
    done = policy("verify", "default", "--json",
                  "--attach", f"data={shared}:ro", "--attach", f"work={shared}:rw")  # fmt: skip
    rows = rows_of(done)
    at = ROWS.index("fs.setuid")
    assert list(rows) == [*ROWS[:at], "fs.attachment.data", "fs.attachment.work", *ROWS[at:]]
    assert rows["fs.attachment.work"]["verdict"] == "PASS"
    data = rows["fs.attachment.data"]
    assert data["verdict"] == "FAIL"
    assert "/flow/attachments/work" in data["reason"]
    assert data["engine"] == "ro"  # the engine mounted it read-only; another mount is not
    assert not list(shared.iterdir())  # the probe removed what it wrote


def test_restricted_baseline_and_a_snapshot_that_no_longer_holds(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.json"
    rows = rows_of(policy("verify", "default", "--json", "--baseline", "restricted",
                          "--snapshot", snapshot))  # fmt: skip
    pss = {key: row["verdict"] for key, row in rows.items() if key.startswith("pss.")}
    assert pss == {
        "pss.host-process": "SKIP", "pss.host-namespaces": "PASS", "pss.privileged": "PASS",
        "pss.capabilities": "PASS", "pss.host-path-volumes": "PASS", "pss.host-ports": "PASS",
        "pss.apparmor": "SKIP", "pss.selinux": "SKIP", "pss.proc-mount": "PASS",
        "pss.seccomp": "PASS", "pss.sysctls": "PASS", "pss.privilege-escalation": "PASS",
        "pss.run-as-non-root": "PASS", "pss.run-as-non-root-user": "PASS",
    }  # fmt: skip
    recorded = json.loads(snapshot.read_text())
    assert set(recorded["rows"]) == set(ROWS)
    assert recorded["environment"]["runtime"] == "runc"
    # What an engine that silently raised the memory limit would have recorded earlier:
    recorded["rows"]["limits.memory"]["observed"] = str(256 << 20)
    snapshot.write_text(json.dumps(recorded))
    again = rows_of(policy("verify", "default", "--json", "--against", snapshot))
    changed = {key for key in again if key.startswith("snapshot")}
    assert changed == {"snapshot.limits.memory"}
    assert again["snapshot.limits.memory"]["verdict"] == "FAIL"
    assert str(256 << 20) in again["snapshot.limits.memory"]["reason"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify", "no-such-profile"], "no sandbox profile named"),
        (["verify", "default", "--baseline", "nist"], "--baseline 'nist'"),
        (["verify", "default", "--against", "/nonexistent.json"], "--against"),
        (["verify", "default", "--attach", "x=/etc"], "refused"),
        (["diff", "default"], "Missing argument"),
    ],
)
def test_bad_usage_exits_2_and_runs_nothing(args: list[str], message: str) -> None:
    done = policy(*args)
    assert done.returncode == 2
    assert message in done.stderr
