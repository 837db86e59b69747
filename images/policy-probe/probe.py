"""The policy probe: a Run/1 component that observes, from inside, what its sandbox enforces.

``flow-runner policy verify`` runs it under a profile exactly like any component (same
``DockerSandbox``, same attachments) and judges its output on the host. It only looks and
tries: every syscall gets harmless arguments (an invalid magic, a NULL pointer, a path in
its own /tmp), anything that would change the probe's own process runs in a forked child,
and the network is touched only when the probe sees no interface but ``lo`` (a namespace
with no route, so nothing can leave). Standard library only, plus the Run SDK.

Input: ``{"attachments": {NAME: "read" | "read-write"}}`` for the battery, or
``{"stress": "pids" | "memory" | "cpu"}`` for one stress test alone (it may end its sandbox:
it writes what it is doing to stderr as it goes).
Output: ``{"observations": {ID: {"value": V, "evidence": TEXT}}}``; the IDs are the
battery's (runner/policy/battery.py), the values plain JSON, the evidence human text.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import socket
import stat
import sys
import time
from typing import Any

from runner.component import RunContext, RunResult, handle

Observations = dict[str, dict[str, Any]]

# Syscall numbers by machine: x86_64 has its own table, aarch64 the generic one.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272,
        "setns": 308, "keyctl": 250, "add_key": 248, "bpf": 321, "perf_event_open": 298,
        "ptrace": 101, "process_vm_readv": 310, "kexec_load": 246, "init_module": 175,
        "finit_module": 313, "reboot": 169, "swapon": 167, "open_by_handle_at": 304,
        "userfaultfd": 323, "io_uring_setup": 425, "personality": 135, "clone3": 435,
    },
    "aarch64": {
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97,
        "setns": 268, "keyctl": 219, "add_key": 217, "bpf": 280, "perf_event_open": 241,
        "ptrace": 117, "process_vm_readv": 270, "kexec_load": 104, "init_module": 105,
        "finit_module": 273, "reboot": 142, "swapon": 224, "open_by_handle_at": 265,
        "userfaultfd": 282, "io_uring_setup": 425, "personality": 92, "clone3": 435,
    },
}  # fmt: skip
SYSCALLS["arm64"] = SYSCALLS["aarch64"]

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
PTRACE_SEIZE = 0x4206
UFFD_USER_MODE_ONLY = 1
ADDR_NO_RANDOMIZE = 0x0040000
PR_GET_NO_NEW_PRIVS = 39
ENGINE_SOCKETS = (
    "/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock", "/run/podman/podman.sock",
    "/var/run/podman/podman.sock", "/run/crio/crio.sock", "/var/run/crio/crio.sock",
    "/run/docker/containerd/containerd.sock", "/run/buildkit/buildkitd.sock",
)  # fmt: skip
WALK_LIMIT = 50_000
"""Directory entries the socket and setuid walk looks at, at most (the image is small)."""
MNT = "/tmp/policy-probe-mnt"

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def errname(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def observe(values: Observations, key: str, value: Any, evidence: str) -> None:
    values[key] = {"value": value, "evidence": evidence}


# --- identity ---------------------------------------------------------------------------


def status_fields() -> dict[str, str]:
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def no_new_privs() -> tuple[int | None, str]:
    """NoNewPrivs from /proc/self/status, or from prctl where the status lacks it (gVisor)."""
    text = status_fields().get("NoNewPrivs")
    if text is not None:
        return int(text), f"NoNewPrivs: {text}"
    ctypes.set_errno(0)
    result = libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
    if result < 0:
        return None, f"no NoNewPrivs in /proc/self/status; prctl: {errname(ctypes.get_errno())}"
    return result, f"no NoNewPrivs in /proc/self/status; prctl(PR_GET_NO_NEW_PRIVS) = {result}"


def identity(values: Observations) -> None:
    fields = status_fields()
    uid, gid, groups = os.getuid(), os.getgid(), sorted(os.getgroups())
    observe(values, "identity.uid", uid, f"Uid: {fields.get('Uid', '?')}")
    observe(values, "identity.gid", gid, f"Gid: {fields.get('Gid', '?')}")
    observe(values, "identity.groups", groups, f"Groups: {fields.get('Groups', '')}")
    for name in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        text = fields.get(name)
        observe(
            values, f"caps.{name[3:].lower()}", None if text is None else int(text, 16),
            f"{name}: {text}",
        )  # fmt: skip
    if fields.get("CapAmb") is None and fields.get("CapPrm") is not None:
        # The kernel keeps the ambient set within the permitted one: an empty permitted
        # set shows an empty ambient set where the status does not list it (gVisor).
        permitted = int(fields["CapPrm"], 16)
        observe(
            values, "caps.amb", 0 if permitted == 0 else None,
            f"no CapAmb in /proc/self/status; ambient is a subset of permitted "
            f"(CapPrm: {fields['CapPrm']})",
        )  # fmt: skip
    nnp, evidence = no_new_privs()
    observe(values, "nnp", nnp, evidence)
    mode, filters = fields.get("Seccomp"), fields.get("Seccomp_filters")
    observe(
        values, "seccomp",
        {"mode": None if mode is None else int(mode),
         "filters": None if filters is None else int(filters)},
        f"Seccomp: {mode}, Seccomp_filters: "
        + ("not in /proc/self/status" if filters is None else filters),
    )  # fmt: skip


# --- syscalls ---------------------------------------------------------------------------


def raw(name: str, *args: Any) -> tuple[int, int]:
    """(return value, errno) of one raw syscall."""
    number = SYSCALLS[platform.machine()][name]
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *args)
    return result, ctypes.get_errno() if result == -1 else 0


def in_child(name: str, *args: Any) -> tuple[int, int]:
    """The syscall in a forked child that exits at once (unshare, ptrace, personality)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            result, code = raw(name, *args)
            os.write(write_end, f"{result} {code}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    data = os.read(read_end, 64).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    result_text, _, code_text = data.partition(" ")
    return int(result_text or -1), int(code_text or errno.ECHILD)


def classify(result: int, code: int) -> tuple[str, str]:
    """allowed / EPERM / ENOSYS / EACCES, and the evidence (what came back)."""
    if result != -1:
        return "allowed", f"returned {result}"
    name = errname(code)
    if code in (errno.EPERM, errno.ENOSYS, errno.EACCES):
        return name, f"-1 {name}"
    return "allowed", f"-1 {name}: past the permission checks, refused only for its arguments"


def syscalls(values: Observations) -> None:
    machine = platform.machine()
    if machine not in SYSCALLS:
        for key in ("mount", "ptrace", "io_uring_setup"):
            observe(values, f"syscall.{key}", None, f"no syscall table for {machine}")
        return
    os.makedirs(MNT, exist_ok=True)
    c_null = ctypes.c_void_p(0)
    root_fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    ns_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    iov_buffer = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(iov_buffer), 8)
    remote = (ctypes.c_void_p * 2)(0x1000, 8)
    uring_params = ctypes.create_string_buffer(120)
    trials: list[tuple[str, Any]] = [
        ("mount", lambda: raw("mount", b"none", MNT.encode(), b"tmpfs", 0, c_null)),
        ("umount2", lambda: raw("umount2", MNT.encode(), 0)),
        ("pivot_root", lambda: raw("pivot_root", MNT.encode(), MNT.encode())),
        ("chroot", lambda: in_child("chroot", b"/")),
        ("unshare.user", lambda: in_child("unshare", CLONE_NEWUSER)),
        ("unshare.mount", lambda: in_child("unshare", CLONE_NEWNS)),
        ("unshare.net", lambda: in_child("unshare", CLONE_NEWNET)),
        ("setns", lambda: in_child("setns", ns_fd, CLONE_NEWNET)),
        ("keyctl", lambda: raw("keyctl", 0, -3, 0)),  # GET_KEYRING_ID of the session ring
        ("add_key", lambda: raw("add_key", c_null, c_null, c_null, 0, -2)),
        ("bpf", lambda: raw("bpf", 0, c_null, 0)),
        ("perf_event_open", lambda: raw("perf_event_open", c_null, 0, -1, -1, 0)),
        ("ptrace", lambda: in_child("ptrace", PTRACE_SEIZE, 1, 0, 0)),  # pid 1, not ours
        ("process_vm_readv", lambda: raw("process_vm_readv", 1, local, 1, remote, 1, 0)),
        ("kexec_load", lambda: raw("kexec_load", 0, 1000, c_null, 0x8000)),  # bad flags
        ("init_module", lambda: raw("init_module", c_null, 0, b"")),
        ("finit_module", lambda: raw("finit_module", -1, b"", 0)),
        ("reboot", lambda: raw("reboot", 0, 0, 0, c_null)),  # invalid magic
        ("swapon", lambda: raw("swapon", b"/nonexistent-swap", 0)),
        ("open_by_handle_at", lambda: raw("open_by_handle_at", root_fd, c_null, 0)),
        ("userfaultfd", lambda: raw("userfaultfd", UFFD_USER_MODE_ONLY)),
        ("io_uring_setup", lambda: raw("io_uring_setup", 1, uring_params)),
        ("personality", lambda: in_child("personality", ADDR_NO_RANDOMIZE)),
        # size 0 is below any clone_args: EINVAL where the call is answered, nothing created
        ("clone3", lambda: raw("clone3", c_null, 0)),
    ]
    try:
        for key, trial in trials:
            result, code = trial()
            verdict, evidence = classify(result, code)
            if result > 2 and key in ("userfaultfd", "io_uring_setup"):  # a new descriptor
                os.close(result)
            if key == "mount" and result == 0:
                raw("umount2", MNT.encode(), 0)
            observe(values, f"syscall.{key}", verdict, f"{machine}: {evidence}")
    finally:
        os.close(root_fd)
        os.close(ns_fd)


# --- filesystem -------------------------------------------------------------------------


def mountinfo() -> list[dict[str, Any]]:
    """/proc/self/mountinfo as (mount point, root in its fs, device, options, fstype)."""
    mounts = []
    with open("/proc/self/mountinfo") as table:
        for line in table:
            head, _, tail = line.partition(" - ")
            fields, extra = head.split(), tail.split()
            mounts.append({
                "point": fields[4].replace("\\040", " "), "root": fields[3], "dev": fields[2],
                "options": set(fields[5].split(",")),
                "fstype": extra[0] if extra else "", "super": extra[2] if len(extra) > 2 else "",
            })  # fmt: skip
    return mounts


def mount_of(mounts: list[dict[str, Any]], path: str) -> dict[str, Any] | None:
    """The mount that holds ``path`` (the longest mount point above it, last one wins)."""
    best = None
    for entry in mounts:
        point = entry["point"]
        holds = path == point or path.startswith(point.rstrip("/") + "/") or point == "/"
        if holds and (best is None or len(point) >= len(best["point"])):
            best = entry
    return best


def try_write(path: str) -> str:
    """'written' (and removed) or the errno name of the refusal."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return errname(exc.errno or 0)
    os.close(fd)
    os.unlink(path)
    return "written"


def try_write_existing(path: str) -> str:
    """Open an existing file for writing: 'writable', 'absent' or the errno name."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return errname(exc.errno or 0)
    os.close(fd)
    return "writable"


def flags_of(entry: dict[str, Any] | None) -> str:
    return "no mount" if entry is None else ",".join(sorted(entry["options"]))


def filesystem(values: Observations, attachments: dict[str, str]) -> None:
    mounts = mountinfo()
    root = mount_of(mounts, "/")
    writes = {p: try_write(f"{p.rstrip('/')}/.policy-probe") for p in ("/", "/etc", "/usr")}
    observe(
        values, "fs.root",
        {"read_only": root is not None and "ro" in root["options"], "writes": writes},
        f"/ mounted {flags_of(root)}; writes: "
        + ", ".join(f"{path} {result}" for path, result in writes.items()),
    )  # fmt: skip
    kcore = proc_file("/proc/kcore", mounts)
    observe(values, "fs.proc_kcore", kcore, f"/proc/kcore: {kcore}")
    sysrq = try_write_existing("/proc/sysrq-trigger")
    observe(values, "fs.proc_sysrq", sysrq, f"/proc/sysrq-trigger: {sysrq}")
    proc_sys = mount_of(mounts, "/proc/sys/kernel")
    sys_write = try_write_existing("/proc/sys/kernel/domainname")
    observe(
        values, "fs.proc_sys",
        {"read_only": proc_sys is not None and "ro" in proc_sys["options"], "write": sys_write},
        f"/proc/sys mounted {flags_of(proc_sys)}; write to kernel/domainname: {sys_write}",
    )  # fmt: skip
    sysfs = mount_of(mounts, "/sys/kernel")
    observe(
        values, "fs.sys", sysfs is not None and "ro" in sysfs["options"],
        f"/sys mounted {flags_of(sysfs)}",
    )  # fmt: skip
    cgroup(values, mounts)
    for name, path in (("scratch", "/flow/scratch"), ("tmp", "/tmp")):
        scratch(values, mounts, name, path)
    for name, access in sorted(attachments.items()):
        attachment(values, mounts, name, access)
    setuid(values)


def proc_file(path: str, mounts: list[dict[str, Any]]) -> str:
    """'absent', 'masked' (an empty file bound over it) or 'readable'/'unreadable'."""
    if not os.path.exists(path):
        return "absent"
    entry = mount_of(mounts, path)
    if entry is not None and entry["point"] == path:
        return "masked"
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError as exc:
        return f"unreadable ({errname(exc.errno or 0)})"
    return "readable"


def cgroup(values: Observations, mounts: list[dict[str, Any]]) -> None:
    targets = ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max")
    target = next((f for f in targets if os.path.exists(f)), None)
    entries = [m for m in mounts if m["fstype"] in ("cgroup", "cgroup2")]
    writable = [m["point"] for m in entries if "ro" not in m["options"]]
    result = "absent" if target is None else try_write_existing(target)
    observe(
        values, "fs.cgroup", {"writable_mounts": writable, "write": result},
        f"{len(entries)} cgroup mount(s), writable: {writable or 'none'}; "
        f"write to {target}: {result}",
    )  # fmt: skip


def scratch(values: Observations, mounts: list[dict[str, Any]], name: str, path: str) -> None:
    entry = mount_of(mounts, path)
    if entry is None or not os.path.isdir(path):
        observe(values, f"fs.{name}", None, f"{path}: not mounted")
        return
    info = os.statvfs(path)
    size = info.f_blocks * info.f_frsize
    options = entry["options"] | set(entry["super"].split(","))
    value = {
        "size": size, "nosuid": "nosuid" in options, "nodev": "nodev" in options,
        "write": try_write(f"{path}/.policy-probe"),
    }  # fmt: skip
    observe(
        values, f"fs.{name}", value,
        f"{path}: {entry['fstype']} {size >> 20} MiB, {flags_of(entry)}; write: {value['write']}",
    )  # fmt: skip


def attachment(values: Observations, mounts: list[dict[str, Any]], name: str, access: str) -> None:
    """Can the attachment be written, through its own mount or any other mount of it?"""
    path = f"/flow/attachments/{name}"
    entry = mount_of(mounts, path)
    if entry is None or entry["point"] != path:
        observe(values, f"fs.attachment.{name}", None, f"{path}: not mounted")
        return
    direct = try_write(f"{path}/.policy-probe")
    aliases = []  # another writable mount of the same directory or one above it
    for other in mounts:
        if other is entry or other["dev"] != entry["dev"] or "ro" in other["options"]:
            continue
        above = other["root"].rstrip("/")
        if entry["root"] == other["root"] or entry["root"].startswith(above + "/"):
            alias = other["point"].rstrip("/") + entry["root"][len(above) :]
            if os.path.isdir(alias) and try_write(f"{alias}/.policy-probe") == "written":
                aliases.append(alias)
    writable = direct == "written" or bool(aliases)
    observe(
        values, f"fs.attachment.{name}",
        {"declared": access, "writable": writable, "direct": direct, "aliases": aliases},
        f"{path} mounted {flags_of(entry)}; write: {direct}"
        + (f"; writable through {', '.join(aliases)}" if aliases else ""),
    )  # fmt: skip


def walk(skip: tuple[str, ...] = ("/proc", "/sys")) -> tuple[list[str], list[str], bool]:
    """Sockets and setuid/setgid files, walking the tree without following links."""
    sockets, setuid_files, seen, stack = [], [], 0, ["/"]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > WALK_LIMIT:
                return sockets, setuid_files, True
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if entry.path not in skip:
                    stack.append(entry.path)
            elif stat.S_ISSOCK(info.st_mode):
                sockets.append(entry.path)
            elif stat.S_ISREG(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                setuid_files.append(entry.path)
    return sockets, setuid_files, False


def setuid(values: Observations) -> None:
    _, files, truncated = WALKED
    nnp = no_new_privs()[0] == 1
    observe(
        values, "fs.setuid", {"files": sorted(files), "no_new_privs": nnp},
        f"{len(files)} setuid/setgid file(s){' (walk cut short)' if truncated else ''}: "
        f"{', '.join(sorted(files)) or 'none'}; NoNewPrivs {int(nnp)}: exec grants no privilege",
    )  # fmt: skip


# --- devices, network, engine ------------------------------------------------------------


def devices(values: Observations) -> None:
    nodes = []
    for top, dirs, files in os.walk("/dev"):
        for name in files + dirs:
            path = os.path.join(top, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
                nodes.append(path)
    observe(values, "dev.nodes", sorted(nodes), ", ".join(sorted(nodes)))
    try:
        os.mknod("/tmp/.policy-probe-null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except OSError as exc:
        result = errname(exc.errno or 0)
    else:
        os.unlink("/tmp/.policy-probe-null")
        result = "created"
    observe(values, "dev.mknod", result, f"mknod c 1 3 in /tmp: {result}")


def network(values: Observations) -> None:
    names = sorted(name for _, name in socket.if_nameindex())
    observe(values, "net.interfaces", names, ", ".join(names))
    if names != ["lo"]:  # a real network: send nothing, the row fails on the interfaces
        note = f"not tried: interfaces {names} present"
        observe(values, "net.connect", None, note)
        observe(values, "net.dns", None, note)
        return
    started = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: no route exists in this netns
            result = "connected"
        except TimeoutError:
            result = "timeout"
        except OSError as exc:
            result = errname(exc.errno or 0)
    took = time.monotonic() - started
    observe(values, "net.connect", result, f"connect 192.0.2.1:9: {result} in {took * 1000:.0f} ms")
    try:
        socket.getaddrinfo("example.com", 80)
        dns = "resolved"
    except OSError as exc:
        dns = f"failed ({exc})"
    observe(values, "net.dns", dns, f"getaddrinfo example.com: {dns}")


def engine(values: Observations) -> None:
    found, _, truncated = WALKED
    candidates = sorted(set(found) | {p for p in ENGINE_SOCKETS if os.path.exists(p)})
    reachable = []
    for path in candidates:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            try:
                sock.connect(path)
                reachable.append(path)
            except OSError:
                pass
    observe(
        values, "engine.sockets", {"sockets": candidates, "reachable": reachable},
        f"{len(candidates)} socket(s) found{' (walk cut short)' if truncated else ''}: "
        f"{', '.join(candidates) or 'none'}; connectable: {', '.join(reachable) or 'none'}",
    )  # fmt: skip


# --- limits -----------------------------------------------------------------------------


def read_first(*paths: str) -> tuple[str | None, str]:
    for path in paths:
        try:
            with open(path) as file:
                return file.read().strip(), path
        except OSError:
            continue
    return None, " or ".join(paths)


def as_limit(text: str | None) -> int | None:
    """A cgroup number; None for unlimited ('max' or cgroup v1's huge sentinel)."""
    if text is None or text == "max" or int(text) >= 1 << 62:
        return None
    return int(text)


def mem_total() -> int | None:
    """MemTotal of /proc/meminfo in bytes."""
    text, _ = read_first("/proc/meminfo")
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        if name == "MemTotal":
            return int(value.split()[0]) << 10
    return None


def limits(values: Observations) -> None:
    memory, where = read_first(
        "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    )
    if memory is not None:
        observe(values, "limits.memory", as_limit(memory), f"{where}: {memory}")
    else:  # no cgroup files (gVisor): its kernel sizes its memory to the sandbox's limit
        total = mem_total()
        observe(
            values, "limits.memory", total,
            f"no {where}; /proc/meminfo MemTotal: "
            + ("absent" if total is None else f"{total >> 10} kB"),
        )  # fmt: skip
    pids, where = read_first("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")
    observe(values, "limits.pids", as_limit(pids), f"{where}: {pids}")
    cpu_max, where = read_first("/sys/fs/cgroup/cpu.max")
    if cpu_max is None:
        quota, _ = read_first("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        period, where = read_first("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        cpu_max = None if quota is None or period is None else f"{quota} {period}"
        where = "/sys/fs/cgroup/cpu/cpu.cfs_{quota,period}_us"
    cpus = None
    if cpu_max is not None:
        quota_text, _, period_text = cpu_max.partition(" ")
        if quota_text not in ("max", "-1"):
            cpus = int(quota_text) / int(period_text)
    observe(values, "limits.cpu", cpus, f"{where}: {cpu_max}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    observe(values, "limits.nofile", hard, f"RLIMIT_NOFILE soft {soft}, hard {hard}")


def progress(text: str) -> None:
    """A line on stderr: what a stress test was doing when its sandbox ended shows there."""
    os.write(2, f"policy-probe: {text}\n".encode())


def stress_pids(values: Observations) -> None:
    """Fork until refused, each child waiting on a pipe; then release them all."""
    read_end, write_end = os.pipe()
    children = []
    refusal = "not refused within 100000 forks"
    progress("stress.pids: forking until refused")
    for _ in range(100_000):
        try:
            pid = os.fork()
        except OSError as exc:
            refusal = errname(exc.errno or 0)
            break
        if pid == 0:
            os.close(write_end)
            os.read(read_end, 1)
            os._exit(0)
        children.append(pid)
        progress(f"stress.pids: {len(children) + 1} tasks")
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    os.close(read_end)
    tasks = len(children) + 1
    observe(
        values, "stress.pids", {"tasks": tasks, "refusal": refusal},
        f"{tasks} tasks, then fork: {refusal}",
    )  # fmt: skip


def stress_memory(values: Observations) -> None:
    """A child allocates (each page touched) until it is killed."""
    progress("stress.memory: allocating until killed")
    pid = os.fork()
    if pid == 0:
        hog = []
        while True:  # 16 MiB at a time, each page touched
            hog.append(bytearray(16 << 20))
            progress(f"stress.memory: {len(hog) * 16} MiB")
            if len(hog) > 1024:  # 16 GiB and still alive: no limit worth the name
                os._exit(3)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    observe(values, "stress.memory", killed, f"allocating child ended with status {status:#x}")


BURN_SLICE = 2000
"""Loop turns between two clock reads of a burner (well under a millisecond of work)."""


def burn(seconds: float, out: int) -> None:
    """Spin for ``seconds`` of wall time; write (turns, fastest turns per second) to ``out``.

    The work done, not the CPU time the kernel accounts, measures the CPU received: gVisor
    accounts its tasks' time itself, and counts time the host's quota held them back.
    """
    turns, fastest = 0, 0.0
    now = time.monotonic()
    end = now + seconds
    while now < end:
        for _ in range(BURN_SLICE):
            pass
        turns += BURN_SLICE
        before, now = now, time.monotonic()
        if now > before:
            fastest = max(fastest, BURN_SLICE / (now - before))
    os.write(out, f"{turns} {fastest}\n".encode())


def stress_cpu(values: Observations) -> None:
    """Burn on every CPU at once; the CPUs received are the turns made over the fastest rate.

    The fastest rate is a slice that ran unthrottled, so the estimate is at most the CPU
    time the burners got (a slow slice only lowers it).
    """
    burners, seconds = max(os.cpu_count() or 1, 2), 1.0
    progress(f"stress.cpu: {burners} burners for {seconds} s")
    read_end, write_end = os.pipe()
    before, started = os.times(), time.monotonic()
    pids = []
    for _ in range(burners):
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            burn(seconds, write_end)
            os._exit(0)
        pids.append(pid)
    os.close(write_end)
    for pid in pids:
        os.waitpid(pid, 0)
    after, wall = os.times(), time.monotonic() - started
    with os.fdopen(read_end) as reports:
        lines = [line.split() for line in reports.read().splitlines()]
    received = sum(int(turns) / float(rate) for turns, rate in lines if float(rate) > 0)
    accounted = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    share = round(received / wall, 2)
    observe(
        values, "stress.cpu", share,
        f"{burners} burners: {received:.2f} s of CPU work in {wall:.2f} s "
        f"(the kernel accounted {accounted:.2f} s)",
    )  # fmt: skip


STRESS = {"pids": stress_pids, "memory": stress_memory, "cpu": stress_cpu}
"""The stress tests, each run alone in a sandbox of its own (one may end that sandbox)."""


WALKED: tuple[list[str], list[str], bool] = ([], [], False)


def battery(attachments: dict[str, str]) -> Observations:
    global WALKED
    values: Observations = {}
    WALKED = walk()
    identity(values)
    syscalls(values)
    filesystem(values, attachments)
    devices(values)
    network(values)
    engine(values)
    limits(values)
    return values


async def run(ctx: RunContext) -> RunResult:
    given = ctx.input if isinstance(ctx.input, dict) else {}
    test = given.get("stress")
    if test is not None:
        if test not in STRESS:
            raise ValueError(f"stress {test!r}: expected one of {', '.join(STRESS)}")
        values: Observations = {}
        STRESS[test](values)
        return RunResult("done", {"observations": values})
    declared = {
        name: str(given.get("attachments", {}).get(name, att.access))
        for name, att in ctx.attachments.items()
    }
    return RunResult("done", {"observations": battery(declared)})


if __name__ == "__main__":
    if sys.argv[1:] == ["--print"]:  # by hand: docker run --rm IMAGE python3 ... --print
        import json

        print(json.dumps(battery({}), indent=1))
    else:
        handle(run)
