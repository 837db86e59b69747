"""The rows read as the Kubernetes Pod Security Standard "restricted" profile, control by
control: a control passes when all the rows that show it pass; one with nothing to
observe here (HostProcess, AppArmor, SELinux) SKIPs and says so.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.policy.battery import Finding, Verdict

_NET_BIND_SERVICE = 1 << 10

Control = tuple[
    str, str, tuple[str, ...], Callable[[dict[str, Finding]], tuple[Verdict, str]] | None
]


def _rows_pass(ids: tuple[str, ...]) -> Callable[[dict[str, Finding]], tuple[Verdict, str]]:
    def judge(rows: dict[str, Finding]) -> tuple[Verdict, str]:
        present = [rows[i] for i in ids if i in rows]
        for verdict in ("ERROR", "FAIL", "SKIP"):
            bad = [row.id for row in present if row.verdict == verdict]
            if bad:
                return verdict, f"{verdict}: {', '.join(bad)}"
        return ("PASS", "") if present else ("ERROR", "no row observed it")

    return judge


def _capabilities(rows: dict[str, Finding]) -> tuple[Verdict, str]:
    """Restricted: drop ALL; only NET_BIND_SERVICE may be added back."""
    row = rows.get("caps.bnd")
    if row is None or row.verdict in ("ERROR", "SKIP"):
        return "ERROR", "caps.bnd was not observed"
    mask = int(row.observed) if row.observed.isdigit() else -1
    if mask < 0 or mask & ~_NET_BIND_SERVICE:
        return "FAIL", f"bounding set {row.observed}: more than NET_BIND_SERVICE"
    return "PASS", ""


def _volumes(rows: dict[str, Finding]) -> tuple[Verdict, str]:
    """Restricted allows no hostPath volume: an attachment is a host bind mount."""
    hosts = [row.id for row in rows.values() if row.id.startswith("fs.attachment.")]
    if hosts:
        return "FAIL", f"host paths are mounted ({', '.join(hosts)}): restricted allows none"
    return _rows_pass(("fs.scratch", "fs.tmp"))(rows)


CONTROLS: tuple[Control, ...] = (
    ("host-process", "HostProcess (Windows)", (), None),
    ("host-namespaces", "Host Namespaces", ("net.interfaces", "net.connect"), None),
    ("privileged", "Privileged Containers", ("caps.bnd", "fs.sys", "dev.nodes"), None),
    ("capabilities", "Capabilities (drop ALL, add only NET_BIND_SERVICE)", ("caps.bnd",),
     _capabilities),
    ("host-path-volumes", "HostPath Volumes / Volume Types", (), _volumes),
    ("host-ports", "Host Ports", ("net.interfaces",), None),
    ("apparmor", "AppArmor", (), None),
    ("selinux", "SELinux", (), None),
    ("proc-mount", "/proc Mount Type (Default: masked)",
     ("fs.proc_kcore", "fs.proc_sysrq", "fs.proc_sys"), None),
    ("seccomp", "Seccomp (RuntimeDefault or Localhost)", ("seccomp",), None),
    ("sysctls", "Sysctls (none writable)", ("fs.proc_sys",), None),
    ("privilege-escalation", "Privilege Escalation (allowPrivilegeEscalation: false)",
     ("nnp",), None),
    ("run-as-non-root", "Running as Non-root", ("identity.uid",), None),
    ("run-as-non-root-user", "Running as Non-root user (runAsUser != 0)", ("identity.uid",),
     None),
)  # fmt: skip
_NOTHING_HERE = {
    "host-process": "Windows only",
    "apparmor": "this engine applies no AppArmor profile to observe",
    "selinux": "this engine applies no SELinux label to observe",
}


def restricted(rows: list[Finding]) -> list[Finding]:
    """One row per restricted control, judged from the battery's rows."""
    by_id = {row.id: row for row in rows}
    found = []
    for key, name, ids, judge in CONTROLS:
        verdict: Verdict
        if key in _NOTHING_HERE:
            verdict, reason = "SKIP", _NOTHING_HERE[key]
        else:
            verdict, reason = (judge or _rows_pass(ids))(by_id)
        shown = ", ".join(ids) or ("fs.attachment.*" if key == "host-path-volumes" else "-")
        found.append(Finding(
            f"pss.{key}", "pss", f"restricted: {name}", "-", "-", shown,
            verdict, f"from rows {shown}", reason,
        ))  # fmt: skip
    return found
