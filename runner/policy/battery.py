"""The battery: one row per sandbox guarantee, and how each is judged.

A row is judged against the guarantee flow-runner promises for every run, not against
the profile's TOML: a profile that adds a capability still fails the capability row. A
value the profile sets also fails when what is in effect differs from it, or exceeds
the ``CEILINGS``. Each row shows what the profile *declares*, what the *engine* reports,
and what the probe (images/policy-probe) *observed* inside.

Under gVisor some mechanisms look different from inside: a declared control the run
does not show still FAILs (a green verify means every declared control was seen in
effect); only an undeclared floor guarantee SKIPs there when it does not pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from runner.sandbox.base import Attachment
from runner.sandbox.profiles import SandboxProfile

Verdict = Literal["PASS", "FAIL", "SKIP", "ERROR"]

CEILINGS = {
    "memory": 2 << 30,
    "cpus": 2.0,
    "pids": 1024,
    "nofile": 4096,
    "scratch_size": 1 << 30,
    "tmp_size": 256 << 20,
}
"""The most any shipped profile grants (``dev``); a profile above it fails the row."""

SYSCALLS = (
    "mount", "umount2", "pivot_root", "chroot", "unshare.user", "unshare.mount",
    "unshare.net", "setns", "keyctl", "add_key", "bpf", "perf_event_open", "ptrace",
    "process_vm_readv", "kexec_load", "init_module", "finit_module", "reboot", "swapon",
    "open_by_handle_at", "userfaultfd", "io_uring_setup", "personality", "clone3",
)  # fmt: skip
REFUSED = ("EPERM", "ENOSYS", "EACCES")
ALLOWED_DEVICES = frozenset(
    f"/dev/{name}" for name in ("full", "null", "random", "urandom", "tty", "zero", "pts/ptmx")
)
NO_ROUTE = ("ENETUNREACH", "EHOSTUNREACH")


@dataclass(frozen=True)
class Finding:
    """One guarantee as verified: stable keys, plain strings (the JSON output's shape)."""

    id: str
    group: str
    guarantee: str
    declared: str
    engine: str
    observed: str
    verdict: Verdict
    evidence: str
    reason: str = ""

    def as_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Context:
    """What a row is judged with: the profile, the engine's view and the probe's."""

    profile: SandboxProfile
    engine: Mapping[str, Any]
    observations: Mapping[str, Mapping[str, Any]]
    attachments: tuple[Attachment, ...] = ()
    oom_killed: bool = False


Judgement = tuple[Verdict, str]
"""(verdict, reason); the reason says why a row is not PASS."""


@dataclass(frozen=True)
class Check:
    """A row's definition: its guarantee, its declared and engine views, and its judge
    (of the observed value, ``None`` when the probe reported none)."""

    id: str
    guarantee: str
    declared: Callable[[SandboxProfile], object]
    engine: Callable[[Mapping[str, Any]], object]
    judge: Callable[[Any, Context], Judgement]
    gvisor_blind: bool = False
    """gVisor shows this differently from the host: an undeclared row SKIPs under runsc
    unless it passes."""

    @property
    def group(self) -> str:
        return self.id.split(".", 1)[0]

    def declares(self, profile: SandboxProfile) -> bool:
        """Whether ``profile`` declares this control (its declared view is not ``None``)."""
        return self.declared(profile) is not None


def judge_row(check: Check, ctx: Context) -> Finding:
    observation = ctx.observations.get(check.id)
    declared = _text(check.declared(ctx.profile))
    engine = _text(check.engine(ctx.engine)) if ctx.engine else "(not inspected)"
    if observation is None:
        observation = {"error": "the probe reported no observation for this row"}
    if "error" in observation:  # the probe could not observe this row
        return Finding(check.id, check.group, check.guarantee, declared, engine, "(none)", "ERROR",
                   "", str(observation["error"]))  # fmt: skip
    value = observation.get("value")
    evidence = str(observation.get("evidence", ""))
    try:
        verdict, reason = check.judge(value, ctx)
    except (TypeError, KeyError, ValueError) as exc:  # a probe value of the wrong shape
        verdict, reason = "ERROR", f"cannot judge the observation {value!r}: {exc}"
    if verdict != "PASS" and check.gvisor_blind and ctx.profile.runtime == "runsc":
        if check.declares(ctx.profile):
            reason = (
                f"{reason} (runsc: the probe sees gVisor's user-space kernel, which does not "
                f"show what the profile declares here ({declared}); a declared control not "
                "shown in effect fails)"
            )
        else:
            verdict = "SKIP"
            reason = (
                "runsc: from inside, this shows gVisor's user-space kernel, not the "
                f"host's, and the profile declares nothing here (would fail on runc: {reason})"
            )
    return Finding(check.id, check.group, check.guarantee, declared, engine, _text(value),
               verdict, evidence, reason)  # fmt: skip


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{k}={_text(v)}" for k, v in value.items())
    return str(value)


def _ok(condition: bool, reason: str) -> Judgement:
    return ("PASS", "") if condition else ("FAIL", reason)


# --- judges ------------------------------------------------------------------------------


def _id(which: int, name: str, as_root: str) -> Callable[[Any, Context], Judgement]:
    """The judge of the uid (``which`` 0) or the gid (1) the profile's ``UID:GID`` names."""

    def judge(value: int, ctx: Context) -> Judgement:
        declared = ctx.profile.user.partition(":")[2 * which]
        want = int(declared) if declared.isdigit() else None
        if value == 0:
            return "FAIL", as_root
        return _ok(want is None or value == want, f"{name} {value}, the profile says {want}")

    return judge


def _groups(value: list[int], ctx: Context) -> Judgement:
    return _ok(0 not in value, "supplementary group 0 (root)")


def _no_caps(value: int | None, ctx: Context) -> Judgement:
    if value is None:
        return "FAIL", "not reported"
    return _ok(value == 0, f"capabilities {_cap_names(value)}")


def _cap_names(mask: int) -> str:
    names = [_CAP_NAMES[bit] if bit < len(_CAP_NAMES) else f"cap{bit}" for bit in range(64)
             if mask >> bit & 1]  # fmt: skip
    return ", ".join(names)


_CAP_TEXT = (
    "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP "
    "LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER "
    "SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE "
    "SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP "
    "MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF "
    "CHECKPOINT_RESTORE"
)
_CAP_NAMES = tuple(_CAP_TEXT.split())


def _nnp(value: int | None, ctx: Context) -> Judgement:
    return _ok(value == 1, "NoNewPrivs is not set: setuid binaries and file caps elevate")


def _seccomp(value: dict[str, int | None], ctx: Context) -> Judgement:
    """Mode 2 (filter); the filter count must be at least 1 where the kernel reports it
    (gVisor reports the mode only)."""
    mode, filters = value["mode"], value["filters"]
    return _ok(
        mode == 2 and (filters is None or filters >= 1), f"seccomp mode {mode}, {filters} filter(s)"
    )


def _refused(value: str | None, ctx: Context) -> Judgement:
    if value is None:
        return "ERROR", "no syscall table for this machine"
    return _ok(value in REFUSED, "the syscall got past the filter and the permission checks")


def _root(value: dict[str, Any], ctx: Context) -> Judgement:
    written = [path for path, result in value["writes"].items() if result == "written"]
    if written:
        return "FAIL", f"written: {', '.join(written)}"
    return _ok(value["read_only"], "the root file system is mounted read-write")


def _kcore(value: str, ctx: Context) -> Judgement:
    return _ok(value in ("absent", "masked") or value.startswith("unreadable"), "readable")


def _sysrq(value: str, ctx: Context) -> Judgement:
    return _ok(value != "writable", "/proc/sysrq-trigger opens for writing")


def _proc_sys(value: dict[str, Any], ctx: Context) -> Judgement:
    if value["write"] == "writable":
        return "FAIL", "a /proc/sys file opens for writing"
    return _ok(value["read_only"], "/proc/sys is mounted read-write")


def _sysfs(value: bool, ctx: Context) -> Judgement:
    return _ok(value is True, "/sys is mounted read-write")


def _cgroupfs(value: dict[str, Any], ctx: Context) -> Judgement:
    if value["write"] == "writable":
        return "FAIL", "a cgroup limit file opens for writing"
    return _ok(not value["writable_mounts"], f"writable: {_text(value['writable_mounts'])}")


def _tmpfs(key: str) -> Callable[[Any, Context], Judgement]:
    def judge(value: dict[str, Any] | None, ctx: Context) -> Judgement:
        if value is None:
            return "FAIL", "not mounted"
        want = getattr(ctx.profile, key)
        problems = [f"missing {flag}" for flag in ("nosuid", "nodev") if not value[flag]]
        if value["size"] != want:
            problems.append(f"size {value['size']} bytes, the profile says {want}")
        if want > CEILINGS[key]:
            problems.append(f"{key} {want} exceeds the ceiling {CEILINGS[key]}")
        if value["write"] != "written":
            problems.append(f"not writable ({value['write']})")
        return _ok(not problems, "; ".join(problems))

    return judge


def _attachment(value: dict[str, Any] | None, ctx: Context) -> Judgement:
    if value is None:
        return "FAIL", "not mounted"
    want = value["declared"] == "read-write"
    if value["writable"] == want:
        return "PASS", ""
    if value["aliases"]:
        return "FAIL", f"declared read-only, writable through {_text(value['aliases'])}"
    return "FAIL", f"declared {value['declared']}, observed writable={value['writable']}"


def _setuid(value: dict[str, Any], ctx: Context) -> Judgement:
    return _ok(not value["files"] or value["no_new_privs"],
               "setuid binaries and no NoNewPrivs: they elevate")  # fmt: skip


def _devices(value: list[str], ctx: Context) -> Judgement:
    extra = sorted(set(value) - ALLOWED_DEVICES)
    return _ok(not extra, f"not in the allowed set: {', '.join(extra)}")


def _mknod(value: str, ctx: Context) -> Judgement:
    return _ok(value != "created", "a device node was created")


def _interfaces(value: list[str], ctx: Context) -> Judgement:
    return _ok(value == ["lo"], f"interfaces {', '.join(value)}: a network is attached")


def _connect(value: str | None, ctx: Context) -> Judgement:
    return _ok(value in NO_ROUTE, f"connect to 192.0.2.1:9 gave {value}, not 'no route'")


def _dns(value: str | None, ctx: Context) -> Judgement:
    return _ok(value is not None and value.startswith("failed"), f"DNS: {value}")


def _sockets(value: dict[str, Any], ctx: Context) -> Judgement:
    return _ok(not value["reachable"], f"connectable: {_text(value['reachable'])}")


def _limit(key: str) -> Callable[[Any, Context], Judgement]:
    def judge(value: float | None, ctx: Context) -> Judgement:
        want = getattr(ctx.profile, key)
        if value is None:
            return "FAIL", "no limit in effect"
        if want > CEILINGS[key]:
            return "FAIL", f"{key} {want} exceeds the ceiling {CEILINGS[key]}"
        return _ok(math.isclose(value, want), f"in effect {value}, the profile says {want}")

    return judge


def sandbox_ended(exit_code: int | None, oom_killed: bool, stderr: str) -> dict[str, Any]:
    """The observation of a stress test whose whole sandbox ended during the test."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    ended = {"exit_code": exit_code, "oom_killed": oom_killed, "last": lines[-1] if lines else ""}
    return {"sandbox_ended": ended}


def _ending(ended: dict[str, Any]) -> str:
    how = "OOM-killed" if ended["oom_killed"] else f"exit {ended['exit_code']}"
    return f"the whole sandbox ended ({how}) after {ended['last']!r}"


def _stress_pids(value: dict[str, Any], ctx: Context) -> Judgement:
    if "sandbox_ended" in value:
        return "FAIL", f"fork was never refused: {_ending(value['sandbox_ended'])}"
    if value["refusal"] != "EAGAIN":
        return "FAIL", f"fork was not refused: {value['refusal']}"
    return _ok(value["tasks"] <= ctx.profile.pids, f"{value['tasks']} tasks > {ctx.profile.pids}")


def _stress_memory(value: bool | dict[str, Any], ctx: Context) -> Judgement:
    if isinstance(value, dict):  # the limit held if the sandbox was OOM-killed at it
        ended = value["sandbox_ended"]
        return _ok(ended["oom_killed"], f"not an OOM kill: {_ending(ended)}")
    if not value:
        return "FAIL", "the allocating child was not killed"
    return _ok(ctx.oom_killed, "killed, but the engine did not report an OOM kill")


def _stress_cpu(value: float | dict[str, Any], ctx: Context) -> Judgement:
    if isinstance(value, dict):
        return "FAIL", f"while burning, {_ending(value['sandbox_ended'])}"
    bound = ctx.profile.cpus * 1.2 + 0.05
    return _ok(value <= bound, f"used {value} CPUs, more than {ctx.profile.cpus} (+20 %)")


# --- the rows ----------------------------------------------------------------------------


def _secopt(prefix: str) -> Callable[[Mapping[str, Any]], object]:
    def view(engine: Mapping[str, Any]) -> object:
        found = [o for o in engine.get("SecurityOpt") or [] if o.startswith(prefix)]
        return ", ".join(o if len(o) < 40 else o[:37] + "..." for o in found) or "(engine default)"

    return view


def _engine(key: str) -> Callable[[Mapping[str, Any]], object]:
    return lambda engine: engine.get(key)


def _nano(engine: Mapping[str, Any]) -> object:
    return (engine.get("NanoCpus") or 0) / 1e9


def _tmpfs_opt(path: str) -> Callable[[Mapping[str, Any]], object]:
    return lambda engine: (engine.get("Tmpfs") or {}).get(path)


def _caps(profile: SandboxProfile) -> object:
    return f"drop {_text(profile.cap_drop)}; add {_text(profile.cap_add)}"


def _capset(engine: Mapping[str, Any]) -> object:
    return f"drop {_text(engine.get('CapDrop'))}; add {_text(engine.get('CapAdd'))}"


def _none(_: object) -> object:
    return None


def checks(attachments: tuple[Attachment, ...] = (), stress: bool = False) -> list[Check]:
    """Every row, in the order they are shown; attachments and stress add theirs."""
    user = _engine("User")
    rows = [
        Check("identity.uid", "runs as a non-root user", lambda p: p.user, user,
              _id(0, "uid", "runs as root (uid 0)")),
        Check("identity.gid", "primary group is not root", lambda p: p.user, user,
              _id(1, "gid", "primary group is root (gid 0)")),
        Check("identity.groups", "no supplementary root group", lambda p: p.user,
              _engine("GroupAdd"), _groups),
    ]  # fmt: skip
    for name in ("eff", "prm", "bnd", "amb"):
        rows.append(Check(f"caps.{name}", f"no capabilities ({name} set)", _caps, _capset,
                          _no_caps, gvisor_blind=name == "amb"))  # fmt: skip
    rows += [
        Check("nnp", "no new privileges", lambda p: p.no_new_privileges,
              _secopt("no-new-privileges"), _nnp, gvisor_blind=True),
        Check("seccomp", "a seccomp filter is in force", lambda p: p.seccomp or "engine default",
              _secopt("seccomp"), _seccomp, gvisor_blind=True),
    ]  # fmt: skip
    rows += [
        Check(f"syscall.{name}", f"{name.replace('.', ' ')} is refused",
              lambda p: "refused", _secopt("seccomp"), _refused, gvisor_blind=True)
        for name in SYSCALLS
    ]  # fmt: skip
    rows += [
        Check("fs.root", "root file system is read-only (/, /etc, /usr)",
              lambda p: p.read_only_root, _engine("ReadonlyRootfs"), _root),
        Check("fs.proc_kcore", "/proc/kcore is absent or masked", _none,
              lambda e: "/proc/kcore" in (e.get("MaskedPaths") or []), _kcore),
        Check("fs.proc_sysrq", "/proc/sysrq-trigger is not writable", _none,
              lambda e: "/proc/sysrq-trigger" in (e.get("ReadonlyPaths") or []), _sysrq),
        Check("fs.proc_sys", "/proc/sys is read-only", _none,
              lambda e: "/proc/sys" in (e.get("ReadonlyPaths") or []), _proc_sys,
              gvisor_blind=True),
        Check("fs.sys", "/sys is read-only", _none, _engine("Privileged"), _sysfs),
        Check("fs.cgroup", "cgroupfs is not writable", _none, _engine("CgroupnsMode"),
              _cgroupfs),
        Check("fs.scratch", "scratch: its size, nosuid, nodev", lambda p: p.scratch_size,
              _tmpfs_opt("/flow/scratch"), _tmpfs("scratch_size"), gvisor_blind=True),
        Check("fs.tmp", "/tmp: its size, nosuid, nodev", lambda p: p.tmp_size,
              _tmpfs_opt("/tmp"), _tmpfs("tmp_size"), gvisor_blind=True),
    ]  # fmt: skip
    rows += [_attachment_check(att) for att in attachments]
    rows += [
        Check("fs.setuid", "setuid binaries are harmless (NoNewPrivs)",
              lambda p: p.no_new_privileges, _secopt("no-new-privileges"), _setuid,
              gvisor_blind=True),
        Check("dev.nodes", "only the allowed /dev nodes", _none,
              lambda e: len(e.get("Devices") or []), _devices, gvisor_blind=True),
        Check("dev.mknod", "mknod is refused",
              lambda p: f"cap_add {'has' if 'MKNOD' in p.cap_add else 'lacks'} MKNOD", _capset,
              _mknod, gvisor_blind=True),
        Check("net.interfaces", "no network: only lo", lambda p: p.network,
              _engine("NetworkMode"), _interfaces),
        Check("net.connect", "no route out (connect fails at once)", lambda p: p.network,
              _engine("NetworkMode"), _connect),
        Check("net.dns", "DNS resolution fails", lambda p: p.network,
              _engine("NetworkMode"), _dns),
        Check("engine.sockets", "no engine socket reachable", _none,
              lambda e: _text([m.get("Source") for m in e.get("Mounts") or []]), _sockets),
        Check("limits.memory", "memory limit", lambda p: p.memory, _engine("Memory"),
              _limit("memory"), gvisor_blind=True),
        Check("limits.pids", "pids limit", lambda p: p.pids, _engine("PidsLimit"),
              _limit("pids"), gvisor_blind=True),
        Check("limits.cpu", "CPU quota", lambda p: p.cpus, _nano, _limit("cpus"),
              gvisor_blind=True),
        Check("limits.nofile", "open files limit", lambda p: p.nofile,
              lambda e: [f"{u['Name']}={u['Hard']}" for u in e.get("Ulimits") or []],
              _limit("nofile")),
    ]  # fmt: skip
    if stress:
        rows += [
            Check("stress.pids", "fork is refused at the pids limit", lambda p: p.pids,
                  _engine("PidsLimit"), _stress_pids),
            Check("stress.memory", "allocating past the limit is OOM-killed",
                  lambda p: p.memory, _engine("Memory"), _stress_memory),
            Check("stress.cpu", "CPU use stays within the quota", lambda p: p.cpus, _nano,
                  _stress_cpu),
        ]  # fmt: skip
    return rows


def _attachment_check(att: Attachment) -> Check:
    return Check(
        f"fs.attachment.{att.name}", f"attachment {att.name} is {att.access} only",
        lambda _: att.access, lambda engine: _mount_mode(engine, att.name), _attachment,
    )  # fmt: skip


def _mount_mode(engine: Mapping[str, Any], name: str) -> object:
    for mount in engine.get("Mounts") or []:
        if mount.get("Target") == f"/flow/attachments/{name}":
            return "ro" if mount.get("ReadOnly") else "rw"
    return None


def judge(ctx: Context, stress: bool = False) -> list[Finding]:
    """Every row for one probe run."""
    return [judge_row(check, ctx) for check in checks(ctx.attachments, stress)]


def unprobed(
    profile: SandboxProfile,
    attachments: tuple[Attachment, ...],
    stress: bool,
    reason: str,
    *,
    runnable: bool = True,
) -> list[Finding]:
    """Every row when the probe did not report: ERROR where it should have run
    (``runnable``); else FAIL for each control the profile declares (none is shown in
    effect) and SKIP for the others."""
    rows = []
    for c in checks(attachments, stress):
        verdict: Verdict = "ERROR" if runnable else "FAIL" if c.declares(profile) else "SKIP"
        rows.append(Finding(c.id, c.group, c.guarantee, _text(c.declared(profile)), "-", "-",
                        verdict, "", reason))  # fmt: skip
    return rows


def failed(rows: list[Finding]) -> bool:
    """True when any row failed or could not be judged."""
    return any(row.verdict in ("FAIL", "ERROR") for row in rows)
