"""``flow-runner policy verify`` and ``policy diff`` against the real engine.

Every verify is one container of flow-runner/policy-probe; each profile is probed once per
module (module-scoped fixtures) and the tests read the parsed JSON. The expected rows are
written out here for the intended policy: the default profile passes every row.
Weakened profiles are the default profile with one key changed; each must fail exactly
the rows it weakens beyond what the default profile fails, and no other.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import anyio
import pytest

from execkit import CLI, ROOT
from runner.policy import render
from runner.policy import verify as verifying
from runner.policy.battery import Context, Finding, checks, failed, judge_row
from runner.sandbox.base import SandboxFacts
from runner.sandbox.errors import RuntimeMissing
from runner.sandbox.profiles import load_profile

docker = pytest.mark.usefixtures("docker_client")
"""The tests that run the probe: the engine answers and the images are built."""

ROWS = [
    "identity.uid", "identity.gid", "identity.groups",
    "caps.eff", "caps.prm", "caps.bnd", "caps.amb", "nnp", "seccomp",
    "syscall.mount", "syscall.umount2", "syscall.pivot_root", "syscall.chroot",
    "syscall.unshare.user", "syscall.unshare.mount", "syscall.unshare.net", "syscall.setns",
    "syscall.keyctl", "syscall.add_key", "syscall.bpf", "syscall.perf_event_open",
    "syscall.ptrace", "syscall.process_vm_readv", "syscall.kexec_load",
    "syscall.init_module", "syscall.finit_module", "syscall.reboot", "syscall.swapon",
    "syscall.open_by_handle_at", "syscall.userfaultfd", "syscall.io_uring_setup",
    "syscall.personality", "syscall.clone3",
    "fs.root", "fs.proc_kcore", "fs.proc_sysrq", "fs.proc_sys", "fs.sys", "fs.cgroup",
    "fs.scratch", "fs.tmp", "fs.setuid",
    "dev.nodes", "dev.mknod", "net.interfaces", "net.connect", "net.dns", "engine.sockets",
    "limits.memory", "limits.pids", "limits.cpu", "limits.nofile",
]  # fmt: skip
KEYS = ["id", "group", "guarantee", "declared", "engine", "observed", "verdict", "evidence",
        "reason"]  # fmt: skip
# Under gVisor (strict) the probe sees gVisor's user-space kernel. Rows the profile declares
# nothing for SKIP when gVisor shows them otherwise; a declared control gVisor does not
# show FAILs: tmpfs without nosuid/nodev (a device node made on /tmp opens), mknod without
# CAP_MKNOD, and no pids or CPU limit visible inside (no cgroup files).
GVISOR_SKIPS = {"fs.proc_sys", "dev.nodes"}
GVISOR_FAILS = {"fs.scratch", "fs.tmp", "dev.mknod", "limits.pids", "limits.cpu"}
UNCONFINED = {  # what the engine's seccomp filter alone refuses to an unprivileged user
    "seccomp", "syscall.unshare.user", "syscall.keyctl", "syscall.add_key", "syscall.bpf",
    "syscall.perf_event_open", "syscall.ptrace", "syscall.process_vm_readv",
    "syscall.open_by_handle_at", "syscall.userfaultfd", "syscall.io_uring_setup",
    "syscall.personality", "syscall.clone3",
}  # fmt: skip
WEAKENED: dict[str, tuple[dict[str, object], set[str]]] = {
    "cap-added": ({"cap_add": ["NET_RAW"]}, {"caps.bnd"}),
    "writable-root": ({"read_only_root": False}, {"fs.root"}),
    "many-pids": ({"pids": 100_000}, {"limits.pids"}),
    "unconfined": ({"seccomp": "unconfined"}, UNCONFINED),
    "more-memory": ({"memory": "4g"}, {"limits.memory"}),
}


def policy(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "policy", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


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


@pytest.mark.docker
@docker
def test_default_passes_every_row(default_run: tuple[Any, Path]) -> None:
    done, _ = default_run
    rows = rows_of(done)
    assert list(rows) == ROWS
    assert verdicts(rows, "PASS") == set(ROWS), {
        key: (row["observed"], row["reason"]) for key, row in rows.items() if key in
        set(ROWS) - verdicts(rows, "PASS")
    }  # fmt: skip
    assert done.returncode == 0


@pytest.mark.docker
@docker
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


@pytest.mark.docker
@docker
def test_json_rows_have_stable_keys(default_rows: dict[str, dict[str, str]]) -> None:
    for row in default_rows.values():
        assert list(row) == KEYS
        assert all(isinstance(value, str) for value in row.values())
        assert row["verdict"] in ("PASS", "FAIL", "SKIP", "ERROR")


@pytest.mark.docker
@docker
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


@pytest.mark.docker
@docker
def test_dev_fails_only_its_writable_root() -> None:
    rows = rows_of(policy("verify", "dev", "--json"))
    assert list(rows) == ROWS
    assert verdicts(rows, "FAIL") == {"fs.root"}
    assert rows["fs.root"]["observed"].startswith("read_only=no")
    assert rows["limits.memory"]["observed"] == str(2 << 30)


def engine_offers_runsc() -> bool:
    runtimes = subprocess.run(
        ["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True
    ).stdout
    return '"runsc"' in runtimes


@pytest.mark.docker
@docker
def test_strict_shows_seccomp_mode_2_on_gvisor_and_skips_no_declared_control() -> None:
    done = policy("verify", "strict", "--json")
    rows = rows_of(done)
    assert list(rows) == ROWS
    assert done.returncode == 1  # what gVisor does not show fails
    for row in rows.values():  # a SKIP only where the profile declares nothing
        assert row["verdict"] != "SKIP" or row["declared"] == "-", row
    if not engine_offers_runsc():  # nothing ran: declared controls FAIL, naming the fix
        assert all("images/engine.sh runsc" in row["reason"] for row in rows.values())
        assert verdicts(rows, "FAIL") == {k for k, r in rows.items() if r["declared"] != "-"}
        return
    seccomp = rows["seccomp"]
    assert (seccomp["verdict"], seccomp["observed"]) == ("PASS", "mode=2; filters=-"), seccomp
    assert "Seccomp: 2" in seccomp["evidence"]
    uring = rows["syscall.io_uring_setup"]
    assert uring["verdict"] == "PASS" and uring["observed"] in ("EPERM", "ENOSYS"), uring
    assert verdicts(rows, "SKIP") == GVISOR_SKIPS
    assert verdicts(rows, "FAIL") == GVISOR_FAILS, {
        key: row["reason"] for key, row in rows.items() if row["verdict"] == "FAIL"
    }  # fmt: skip
    assert verdicts(rows, "PASS") == set(ROWS) - GVISOR_SKIPS - GVISOR_FAILS
    for key in GVISOR_FAILS:
        assert rows[key]["evidence"] and "declares" in rows[key]["reason"], rows[key]
    assert rows["nnp"]["observed"] == "1"  # prctl: gVisor's status has no NoNewPrivs
    assert rows["limits.memory"]["observed"] == str(256 << 20)  # /proc/meminfo MemTotal
    assert rows["identity.uid"]["observed"] == "65534"
    assert rows["net.interfaces"]["observed"] == "lo"


@pytest.mark.docker
@docker
def test_strict_stress_rows_pass_or_fail_with_evidence() -> None:
    assert engine_offers_runsc(), "register gVisor with images/engine.sh runsc"
    done = policy("verify", "strict", "--stress", "--json", timeout=600)
    rows = rows_of(done)
    assert list(rows) == [*ROWS, "stress.pids", "stress.memory", "stress.cpu"]
    assert not verdicts(rows, "ERROR"), done.stdout[-3000:]
    for key in ("stress.pids", "stress.memory", "stress.cpu"):
        row = rows[key]
        assert row["verdict"] in ("PASS", "FAIL") and row["evidence"], row
        assert row["verdict"] == "PASS" or row["reason"], row
    pids = rows["stress.pids"]  # gVisor ends the whole sandbox instead of refusing fork
    if pids["verdict"] == "FAIL" and "sandbox ended" in pids["reason"]:
        assert "policy-probe: stress.pids:" in pids["evidence"]
    assert rows["stress.memory"]["verdict"] == "PASS", rows["stress.memory"]


@pytest.mark.docker
@docker
def test_the_table_fits_80_columns_and_json_keeps_every_view() -> None:
    done = subprocess.run(
        [*CLI, "policy", "verify", "strict"], cwd=ROOT, capture_output=True, text=True,
        timeout=120, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    for key in ROWS:
        assert any(key in line for line in lines), key  # no row id is folded
    assert "--json" in lines[-1]


@pytest.mark.docker
@docker
@pytest.mark.parametrize("name", list(WEAKENED))
def test_a_weakened_profile_fails_exactly_what_it_weakens(
    name: str, profiles_dir: Path, default_rows: dict[str, dict[str, str]]
) -> None:
    _, weakened = WEAKENED[name]
    rows = rows_of(policy("verify", profiles_dir / f"{name}.toml", "--json"))
    assert list(rows) == ROWS
    assert verdicts(rows, "FAIL") == verdicts(default_rows, "FAIL") | weakened
    assert not verdicts(rows, "ERROR")


@pytest.mark.docker
@docker
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


@pytest.mark.docker
@docker
def test_diff_of_a_profile_with_itself_is_empty_and_exits_0() -> None:
    done = policy("diff", "default", "default")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rows that differ: 0" in done.stdout


@pytest.mark.docker
@docker
def test_diff_table_marks_the_more_permissive_side(profiles_dir: Path) -> None:
    done = policy("diff", "default", profiles_dir / "writable-root.toml")
    assert done.returncode == 1
    assert "read_only_root: true -> false" in done.stdout
    assert "fs.root" in done.stdout and "writable-root more permissive" in done.stdout


@pytest.mark.docker
@docker
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


@pytest.mark.docker
@docker
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


@pytest.mark.docker
@docker
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


# --- judged without a probe run ---------------------------------------------------------


def gvisor_rows(observations: dict[str, Any]) -> dict[str, Finding]:
    ctx = Context(load_profile("strict"), {}, observations)
    return {c.id: judge_row(c, ctx) for c in checks() if c.id in observations}


def test_under_gvisor_a_declared_control_not_shown_fails_and_only_undeclared_ones_skip() -> None:
    rows = gvisor_rows({
        "limits.pids": {"value": None, "evidence": "pids.max: None"},
        "nnp": {"value": 0, "evidence": "NoNewPrivs: 0"},
        "seccomp": {"value": {"mode": 0, "filters": None}, "evidence": "Seccomp: 0"},
        "syscall.io_uring_setup": {"value": "allowed", "evidence": "returned 10"},
        "fs.proc_sys": {"value": {"read_only": False, "write": "absent"}, "evidence": "rw"},
    })  # fmt: skip
    for key in ("limits.pids", "nnp", "seccomp", "syscall.io_uring_setup"):
        assert rows[key].verdict == "FAIL", rows[key]
        assert rows[key].evidence and "declares" in rows[key].reason
    assert rows["fs.proc_sys"].verdict == "SKIP"  # the profile declares nothing here
    assert rows["fs.proc_sys"].declared == "-"


def test_seccomp_mode_2_passes_where_the_filter_count_is_not_reported() -> None:
    rows = gvisor_rows({"seccomp": {"value": {"mode": 2, "filters": None}, "evidence": ""}})
    assert rows["seccomp"].verdict == "PASS", rows["seccomp"]


def test_a_profile_whose_runtime_is_missing_fails_its_declared_controls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def missing(*args: object, **kwargs: object) -> None:
        raise RuntimeMissing("needs the container runtime 'runsc'; `images/engine.sh runsc`")

    monkeypatch.setattr(verifying, "execute", missing)
    rows = anyio.run(verifying.verify, load_profile("strict")).rows
    assert {r.id for r in rows if r.verdict == "FAIL"} == {r.id for r in rows if r.declared != "-"}
    assert {r.id for r in rows if r.verdict == "SKIP"} == {r.id for r in rows if r.declared == "-"}
    assert all("images/engine.sh runsc" in r.reason for r in rows)
    assert failed(rows)


def probed(observations: dict[str, Any] | None, stderr: str = "", **ended: Any) -> Any:
    why = "EXECUTION_FAILED: component exited 2"
    failure = f"the probe did not report ({why}); its stderr: {stderr}"
    return verifying._Probed(observations, why, failure, SandboxFacts(),
                             ended.get("exit_code"), ended.get("oom", False), stderr)  # fmt: skip


def test_a_stress_test_that_ends_its_sandbox_is_judged_on_how_and_one_that_never_began_errs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = {
        None: probed({}),
        "pids": probed(None, "policy-probe: stress.pids: 13 tasks\npolicy-probe: stress.pids: "
                       "14 tasks\n", exit_code=2),
        "memory": probed(None, "policy-probe: stress.memory: 208 MiB\n", exit_code=137, oom=True),
        "cpu": probed(None, "Traceback: ImportError: boom\n", exit_code=1),
    }  # fmt: skip

    async def probe(profile: object, attachments: object, given: dict[str, Any], *_: object) -> Any:
        return runs[given.get("stress")]

    monkeypatch.setattr(verifying, "_probe", probe)
    rows = {r.id: r for r in anyio.run(partial(verifying.verify, stress=True),
                                       load_profile("strict")).rows}  # fmt: skip
    pids = rows["stress.pids"]
    assert pids.verdict == "FAIL" and "exit 2" in pids.reason and "14 tasks" in pids.reason
    assert "stress.pids: 14 tasks" in pids.evidence
    assert rows["stress.memory"].verdict == "PASS", rows["stress.memory"]
    cpu = rows["stress.cpu"]
    assert cpu.verdict == "ERROR" and "boom" in cpu.reason and "exited 2" in cpu.reason


def test_the_table_fits_the_terminal_it_is_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    long = "a very long piece of evidence " * 12
    rows = [
        Finding(f"fs.attachment.{'x' * 30}", "fs", "attachment is read only", "read", "ro",
            "writable=yes", "FAIL", long, long),
        *(Finding(key, key.split(".")[0], "g" * 40, "d" * 30, "e" * 30, "o" * 50, "PASS", long)
          for key in ROWS),
    ]  # fmt: skip
    for columns in (80, 60, 120):
        monkeypatch.setenv("COLUMNS", str(columns))
        render.table("policy verify strict (runsc)", rows)
        lines = capsys.readouterr().out.splitlines()
        assert max(map(len, lines)) <= columns, (columns, max(lines, key=len))
        assert "1 FAIL" in "\n".join(lines)
