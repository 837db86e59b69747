"""Sandbox profiles: the limits and privileges one invocation runs with, as reviewed files.

A profile is a small TOML file so that the policy a run used can be read, diffed and
reviewed apart from the code. The model is strict: an unknown key or a misspelt value is
an error that names the file and the key, because a typo in a security policy must not
silently fall back to a default. Loosening is always spelt out: a network other than
``none`` needs ``allow_network = true``, root needs ``allow_root = true``, and a host path
the attachment refusal list would refuse needs an ``allowed_mounts`` entry.

The repository's ``sandbox-profiles/`` directory is the single source of truth for the
shipped profiles. A source checkout (and an editable install) finds it next to the
``runner`` package; an installed wheel finds the copy that the build installs as data
files under ``<prefix>/share/flow-runner/sandbox-profiles``.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from runner.protocol.names import is_local_name
from runner.sandbox.errors import SandboxError

PROFILE_DIR_NAME = "sandbox-profiles"
_CHECKOUT_DIR = Path(__file__).resolve().parents[2] / PROFILE_DIR_NAME
_INSTALLED_DIR = Path(sys.prefix) / "share" / "flow-runner" / PROFILE_DIR_NAME
_SIZE = re.compile(r"^\s*(\d+)\s*([bkmg]?)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class ProfileError(SandboxError, ValueError):
    """A sandbox profile could not be found, read or validated."""


def parse_size(value: object) -> object:
    """Turn a Docker-style size (``"512m"``, ``"2g"``, ``1048576``) into bytes.

    Units are binary, as in ``docker run --memory``: k = KiB, m = MiB, g = GiB. Anything
    that is not a size is handed on unchanged for the model to reject with its own error.
    """
    if isinstance(value, str) and (match := _SIZE.match(value)):
        return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    return value


Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
CapabilityName = Annotated[str, Field(pattern=r"^(?:CAP_)?[A-Z_]+$")]
HostPath = Annotated[Path, Field(strict=False)]


class SandboxProfile(BaseModel):
    """Limits and privileges for one invocation; sizes are bytes, graces are seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # pydantic's (Rust) regex: `$` is the end of the text, so "abc\n" does not match.
    name: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$", max_length=64)
    description: str = ""
    runtime: Literal["runc", "runsc"] = "runc"
    user: str = Field(default="65534:65534", pattern=r"^[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.-]+)?$")
    allow_root: bool = False
    read_only_root: bool = True
    network: str = Field(default="none", min_length=1)
    allow_network: bool = False
    memory: Size = 512 << 20
    cpus: float = Field(default=1.0, gt=0, le=1024)
    pids: int = Field(default=256, ge=8)
    nofile: int = Field(default=1024, ge=16)
    scratch_size: Size = 256 << 20
    tmp_size: Size = 64 << 20
    attachment_quota: Size | None = None
    """Bytes each read-write attachment may grow by during a run; ``None``: unbounded."""
    disk_entries: int = Field(default=65536, ge=16)
    """Files and directories scratch, /tmp and each bounded host directory may gain."""
    disk_poll: float = Field(default=0.2, ge=0.02, le=5.0)
    """Seconds between two measurements of a bounded host directory (see disk.py)."""
    cap_drop: tuple[CapabilityName, ...] = Field(default=("ALL",), strict=False)
    cap_add: tuple[CapabilityName, ...] = Field(default=(), strict=False)
    no_new_privileges: bool = True
    seccomp: Literal["unconfined"] | HostPath | None = None
    """A seccomp profile file, ``"unconfined"`` (no filter: spelt out, never a default),
    or ``None`` for the engine's default filter."""
    init: bool = True
    cancel_grace: float = Field(default=2.0, ge=0)
    exit_grace: float = Field(default=2.0, ge=0)
    allowed_mounts: tuple[HostPath, ...] = Field(default=(), strict=False)

    _seccomp_json: str | None = PrivateAttr(default=None)

    @property
    def seccomp_json(self) -> str | None:
        """The seccomp profile's JSON text, read once at load time, or ``None``."""
        return self._seccomp_json

    @field_validator("seccomp", mode="after")
    @classmethod
    def _resolve_seccomp(cls, value: Path | str | None, info: ValidationInfo) -> Path | str | None:
        return _resolve(value, info) if isinstance(value, Path) else value

    @field_validator("allowed_mounts", mode="after")
    @classmethod
    def _resolve_mounts(cls, value: tuple[Path, ...], info: ValidationInfo) -> tuple[Path, ...]:
        return tuple(_resolve(path, info) for path in value)

    @model_validator(mode="after")
    def _check_network_and_load_seccomp(self) -> Self:
        if not self.allow_root:
            _check_not_root(self.user)
        if self.network != "none" and not self.allow_network:
            raise ValueError(
                f"key 'network' = {self.network!r} is refused: components run with network "
                "'none'; set allow_network = true next to it to open the network on purpose"
            )
        if isinstance(self.seccomp, Path):
            self._seccomp_json = _read_seccomp(self.seccomp)
        return self


def _check_not_root(user: str) -> None:
    """Refuse uid 0 and gid 0, and any user whose ids the image, not the profile, decides.

    A name (even ``nobody``) is looked up in the image's ``/etc/passwd``, which the
    component's author writes, and a uid alone gets its group from there too (gid 0 if
    the image lists no such user): only numbers on both sides say who the component is.
    """
    uid, sep, gid = user.partition(":")
    if not (sep and uid.isdigit() and gid.isdigit()):
        raise ValueError(
            f"key 'user' = {user!r} is refused: write numeric UID:GID (e.g. \"65534:65534\"), "
            "since a name or a missing group is resolved by the image and may be root; set "
            "allow_root = true next to it to let the image decide on purpose"
        )
    if int(uid) == 0 or int(gid) == 0:
        raise ValueError(
            f"key 'user' = {user!r} is refused: uid 0 or gid 0 is root, and root in a "
            "container is close to root on the host (it reached the engine's socket when "
            "one was attached); set allow_root = true next to it to run as root on purpose"
        )


def _resolve(path: Path, info: ValidationInfo) -> Path:
    """Resolve ``path`` (symlinks too) against the profile file's directory."""
    base = (info.context or {}).get("base_dir", Path.cwd())
    return (Path(base) / path.expanduser()).resolve()


def _read_seccomp(path: Path) -> str:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(
            f"key 'seccomp': cannot read {path}: {exc.strerror}; fix the path (a relative "
            "path is taken from the profile's directory)"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"key 'seccomp': {path} is not JSON ({exc}); fix the file") from exc
    if not isinstance(document, dict):
        raise ValueError(f"key 'seccomp': {path} must hold a JSON object (a seccomp profile)")
    return json.dumps(document, separators=(",", ":"))


def profiles_dir() -> Path:
    """The directory holding the shipped profiles: the checkout's, else the installed copy."""
    for candidate in (_CHECKOUT_DIR, _INSTALLED_DIR):
        if candidate.is_dir():
            return candidate
    raise ProfileError(
        f"no {PROFILE_DIR_NAME} directory at {_CHECKOUT_DIR} (source checkout) or "
        f"{_INSTALLED_DIR} (installed package); reinstall flow-runner or pass a profile "
        "as a path to its .toml file"
    )


def list_profiles() -> list[str]:
    """Names of the shipped profiles, sorted."""
    return sorted(path.stem for path in profiles_dir().glob("*.toml"))


def load_profile(name_or_path: str | Path) -> SandboxProfile:
    """Load a shipped profile by name (``"default"``) or any profile file by path."""
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or text.endswith(".toml"):
        return load_profile_file(Path(name_or_path))
    if not is_local_name(text):
        raise ProfileError(
            f"{text!r} is neither a profile name (lowercase letters, digits and dashes) "
            "nor a path to a .toml file; use e.g. --profile default or --profile ./mine.toml"
        )
    path = profiles_dir() / f"{text}.toml"
    if not path.is_file():
        known = ", ".join(list_profiles()) or "none"
        raise ProfileError(
            f"no sandbox profile named {text!r} in {path.parent} (known: {known}); "
            "pick one of those or pass a path to a .toml file"
        )
    return load_profile_file(path)


def with_user(profile: SandboxProfile, user: str) -> SandboxProfile:
    """``profile`` run as ``user`` (``UID[:GID]``, numbers; the GID defaults to the
    profile's), held to the profile's rule on root (``allow_root``)."""
    uid, sep, gid = user.partition(":")
    if not uid.isdigit() or (sep and not gid.isdigit()):
        raise ProfileError(
            f"--user {user!r}: give numbers, UID or UID:GID (e.g. --user $(id -u):$(id -g))"
        )
    if not sep:
        gid = profile.user.partition(":")[2] or uid
    data = {**profile.model_dump(), "user": f"{int(uid)}:{int(gid)}"}
    try:
        return SandboxProfile.model_validate(data, strict=False)
    except ValidationError as exc:
        problems = "; ".join(
            str(error["msg"]).removeprefix("Value error, ") for error in exc.errors()
        )
        raise ProfileError(f"--user {user!r} with profile {profile.name!r}: {problems}") from None


def load_profile_file(path: Path) -> SandboxProfile:
    """Read and validate one profile file; the profile's name defaults to the file stem."""
    path = path.expanduser().resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(
            f"cannot read sandbox profile {path}: {exc.strerror}; check the path"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"sandbox profile {path} is not valid TOML: {exc}; fix it") from exc
    data.setdefault("name", path.stem)
    try:
        return SandboxProfile.model_validate(data, context={"base_dir": path.parent})
    except ValidationError as exc:
        raise ProfileError(_explain(path, exc)) from None


def _explain(path: Path, exc: ValidationError) -> str:
    problems = [_explain_one(error) for error in exc.errors()]
    return f"sandbox profile {path}: " + "; ".join(problems)


def _explain_one(error: ErrorDetails) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "(profile)"
    if error["type"] == "extra_forbidden":
        known = ", ".join(SandboxProfile.model_fields)
        return f"unknown key {key!r}; remove or rename it (known keys: {known})"
    message = str(error["msg"]).removeprefix("Value error, ")
    if key in {"memory", "scratch_size", "tmp_size", "attachment_quota"}:
        message += ' (write a size such as "512m" or "2g")'
    if key == "(profile)":
        return message
    return f"key {key!r} = {error['input']!r}: {message}; fix the value"


# --- what a profile enforces, and how (for `flow-runner profiles show`) ----------------

SECCOMP_FAMILIES: dict[str, tuple[str, ...]] = {
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "keyrings": ("keyctl", "add_key", "request_key"),
    "bpf": ("bpf",),
    "perf_event_open": ("perf_event_open",),
    "userfaultfd": ("userfaultfd",),
    "kernel modules and kexec": (
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
    ),
    "mounts and root changes": (
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "fsopen",
        "fsmount",
        "move_mount",
        "open_tree",
    ),
    "namespaces": ("setns", "unshare", "clone"),
    "tracing other processes": ("ptrace", "process_vm_readv", "process_vm_writev"),
    "swap and reboot": ("swapon", "swapoff", "reboot"),
    "file handles": ("open_by_handle_at", "name_to_handle_at"),
    "accounting, quotas, kernel log": ("acct", "quotactl", "syslog", "lookup_dcookie"),
    "port I/O": ("iopl", "ioperm"),
    "setting clocks": ("settimeofday", "clock_settime", "clock_adjtime", "adjtimex"),
    "personality": ("personality",),
}
"""Families of system calls no component needs, as ``profiles show`` reports them."""

_ERRNO_NAMES = {1: "EPERM", 38: "ENOSYS"}


def seccomp_summary(profile: SandboxProfile) -> dict[str, object]:
    """The profile's seccomp filter in brief: where it is, its default, what it allows.

    A family is ``denied`` when no call of it is allowed, ``restricted`` when its calls are
    allowed only with argument conditions (clone without namespace flags), else ``allowed``.
    """
    if profile.seccomp is None or profile.seccomp_json is None:
        return {"file": None, "filter": "the engine's built-in seccomp profile"}
    document = json.loads(profile.seccomp_json)
    rules = [rule for rule in document.get("syscalls", []) if isinstance(rule, dict)]
    plain: set[str] = set()
    conditional: set[str] = set()
    for rule in rules:
        if rule.get("action") == "SCMP_ACT_ALLOW":
            (conditional if rule.get("args") else plain).update(rule.get("names", []))
    families = {}
    for family, names in SECCOMP_FAMILIES.items():
        if plain.intersection(names):
            families[family] = "allowed"
        elif conditional.intersection(names):
            families[family] = "restricted"
        else:
            families[family] = "denied"
    errno = document.get("defaultErrnoRet", 1)
    summary: dict[str, object] = {
        "file": str(profile.seccomp),
        "defaultAction": document.get("defaultAction"),
        "defaultErrno": _ERRNO_NAMES.get(errno, errno),
        "allowedCalls": len(plain),
        "allowedWithConditions": sorted(conditional - plain),
        "families": families,
    }
    if profile.runtime == "runsc":
        summary["runtime"] = (
            "gVisor answers the component's system calls in its own kernel, and applies "
            "this filter inside its sandbox only when the engine runs runsc with "
            "--oci-seccomp; without it the filter is not applied"
        )
    return summary


def disk_summary(profile: SandboxProfile) -> dict[str, str]:
    """How each writable place is bounded under the profile, and by whom."""
    entries, poll = profile.disk_entries, profile.disk_poll
    polled = (
        f"enforced by polling every {poll:g} s: the run is stopped once over, and what it "
        "writes within one interval can overshoot the bound"
    )
    summary = {
        "scratch": (
            f"a private tmpfs of {profile.scratch_size} bytes and {entries} entries, "
            f"enforced by the kernel; a host directory (--scratch DIR) may grow by "
            f"{profile.scratch_size} bytes and {entries} entries, {polled}"
        ),
        "tmp": f"a tmpfs of {profile.tmp_size} bytes and {entries} entries, enforced by the kernel",
        "read-write attachments": (
            "not bounded; set attachment_quota to bound them"
            if profile.attachment_quota is None
            else f"each may grow by {profile.attachment_quota} bytes and {entries} entries, "
            + polled
        ),
        "root": (
            "read-only"
            if profile.read_only_root
            else "writable and not bounded (Docker bounds a container's root only with "
            "--storage-opt size, on overlay2 over XFS with pquota; flow-runner does not set it)"
        ),
    }
    return summary
