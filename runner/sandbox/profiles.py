"""Sandbox profiles: the limits and privileges one invocation runs with, as reviewed files.

A profile is a small TOML file held to a strict model (:mod:`runner.sandbox.profile_model`).
The shipped ones are ``sandbox-profiles/`` (in a checkout, or under
``<prefix>/share/flow-runner`` once installed); a file whose bytes are a shipped
profile's (:data:`SHIPPED`) is read without the model, so such a run never imports
pydantic.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from runner.protocol.names import is_local_name
from runner.sandbox.errors import ProfileError
from runner.sandbox.profile_rules import parse_size, read_seccomp, resolve

if TYPE_CHECKING:
    from runner.json1 import JSONValue

__all__ = [
    "ProfileError",
    "SandboxProfile",
    "disk_summary",
    "list_profiles",
    "load_profile",
    "parse_size",
    "profiles_dir",
    "seccomp_summary",
    "with_user",
]

PROFILE_DIR_NAME = "sandbox-profiles"
_CHECKOUT_DIR = Path(__file__).resolve().parents[2] / PROFILE_DIR_NAME
_INSTALLED_DIR = Path(sys.prefix) / "share" / "flow-runner" / PROFILE_DIR_NAME

SHIPPED: Final = frozenset(
    {
        "fcfaa995ebe07e829cc11332d2fb61079a7c7df05bc4b2ab1ed5e0620277e7ce",  # default.toml
        "0287796768e86769d136e679805b30c828de780ad9cbbee35ada02bb7b1f2ba6",  # dev.toml
        "9f53c87df81cc895fa4609a46fec609f1492097334c011c930dc61413adc599b",  # strict.toml
    }
)
"""SHA-256 of each shipped profile file, whose bytes tests/test_profiles.py validates."""


@dataclass(frozen=True)
class SandboxProfile:
    """Limits and privileges for one invocation; sizes are bytes, graces are seconds.
    Built in code, it is validated as a file is (pydantic's ``ValidationError``)."""

    name: str
    description: str = ""
    runtime: Literal["runc", "runsc"] = "runc"
    user: str = "65534:65534"
    allow_root: bool = False
    read_only_root: bool = True
    network: str = "none"
    allow_network: bool = False
    memory: int = 512 << 20
    cpus: float = 1.0
    pids: int = 256
    nofile: int = 1024
    scratch_size: int = 256 << 20
    tmp_size: int = 64 << 20
    attachment_quota: int | None = None
    """Bytes each read-write attachment may grow by during a run; ``None``: unbounded."""
    disk_entries: int = 65536
    """Files and directories scratch, /tmp and each bounded host directory may gain."""
    disk_poll: float = 0.2
    """Seconds between two measurements of a bounded host directory (see disk.py)."""
    cap_drop: tuple[str, ...] = ("ALL",)
    cap_add: tuple[str, ...] = ()
    no_new_privileges: bool = True
    seccomp: Literal["unconfined"] | Path | None = None
    """A seccomp profile file, ``"unconfined"`` (no filter: spelt out, never a default),
    or ``None`` for the engine's default filter."""
    init: bool = True
    cancel_grace: float = 2.0
    exit_grace: float = 2.0
    allowed_mounts: tuple[Path, ...] = ()
    seccomp_json: str | None = field(default=None, init=False, repr=False)
    """The seccomp profile's JSON text, read once at load time, or ``None``."""

    def __post_init__(self) -> None:
        from runner.sandbox.profile_model import validate

        given = {  # the keys given, as the model's own constructor would have them
            key: value
            for key, value in _keys(self).items()
            if key == "name" or value != _DEFAULTS[key] or type(value) is not type(_DEFAULTS[key])
        }
        _fill(self, *validate(given))

    @classmethod
    def _validated(cls, values: Mapping[str, object], seccomp_json: str | None) -> SandboxProfile:
        """A profile of values already validated (by the model, or shipped)."""
        profile = object.__new__(cls)
        _fill(profile, values, seccomp_json)
        return profile

    def as_json(self) -> dict[str, JSONValue]:
        """The profile's keys and values as JSON, in the model's order (a batch key's)."""
        return {key: _json(value) for key, value in _keys(self).items()}


def _keys(profile: SandboxProfile) -> dict[str, object]:
    """The profile's keys (every field but the derived ``seccomp_json``) and values."""
    return {f.name: getattr(profile, f.name) for f in fields(profile) if f.init}


def _fill(profile: SandboxProfile, values: Mapping[str, object], seccomp_json: str | None) -> None:
    for key, value in values.items():
        object.__setattr__(profile, key, value)
    object.__setattr__(profile, "seccomp_json", seccomp_json)


def _json(value: object) -> JSONValue:
    if isinstance(value, tuple):
        return [_json(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    assert value is None or isinstance(value, str | int | float)
    return value


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
    """``profile`` run as ``user`` (``UID[:GID]``; the GID defaults to the profile's),
    held to its rule on root."""
    from runner.sandbox.profile_model import validate_user

    uid, sep, gid = user.partition(":")
    if not uid.isdigit() or (sep and not gid.isdigit()):
        raise ProfileError(
            f"--user {user!r}: give numbers, UID or UID:GID (e.g. --user $(id -u):$(id -g))"
        )
    if not sep:
        gid = profile.user.partition(":")[2] or uid
    values, seccomp_json = validate_user(_keys(profile), f"{int(uid)}:{int(gid)}", given=user)
    return SandboxProfile._validated(values, seccomp_json)


def load_profile_file(path: Path) -> SandboxProfile:
    """Read and validate one profile file; the profile's name defaults to the file stem."""
    path = path.expanduser().resolve()
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise ProfileError(
            f"cannot read sandbox profile {path}: {exc.strerror}; check the path"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"sandbox profile {path} is not valid TOML: {exc}; fix it") from exc
    data.setdefault("name", path.stem)
    if hashlib.sha256(raw).hexdigest() in SHIPPED:
        shipped = _read_shipped(path, data)
        if shipped is not None:
            return shipped
    from runner.sandbox.profile_model import validate_file

    return SandboxProfile._validated(*validate_file(path, data))


_DEFAULTS: Final = {f.name: f.default for f in fields(SandboxProfile) if f.init}
_SIZES = frozenset({"memory", "scratch_size", "tmp_size", "attachment_quota"})
_FLOATS = frozenset({"cpus", "disk_poll", "cancel_grace", "exit_grace"})


def _read_shipped(path: Path, data: Mapping[str, Any]) -> SandboxProfile | None:
    """The profile in a shipped file's ``data``, as the model would make it; ``None`` when
    its seccomp file cannot be read (the model then says why)."""
    values: dict[str, object] = {}
    for key, default in _DEFAULTS.items():
        value = data.get(key, default)
        if key in _SIZES:
            value = parse_size(value)
        elif key in _FLOATS:
            value = float(value)
        elif key in ("cap_drop", "cap_add"):
            value = tuple(value)
        elif key == "allowed_mounts":
            value = tuple(resolve(Path(item), path.parent) for item in value)
        elif key == "seccomp" and value not in (None, "unconfined"):
            value = resolve(Path(value), path.parent)
        values[key] = value
    seccomp = values["seccomp"]
    try:
        seccomp_json = read_seccomp(seccomp) if isinstance(seccomp, Path) else None
    except ValueError:
        return None
    return SandboxProfile._validated(values, seccomp_json)


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
    """The profile's seccomp filter in brief. A family is ``denied`` when no call of it
    is allowed, ``restricted`` when only with argument conditions, else ``allowed``."""
    if profile.seccomp is None or profile.seccomp_json is None:
        return {"file": None, "filter": "the engine's built-in seccomp profile"}
    document = json.loads(profile.seccomp_json)
    rules = [rule for rule in document.get("syscalls", []) if isinstance(rule, dict)]
    plain: set[str] = set()
    conditional: set[str] = set()
    for rule in rules:
        if rule.get("action") == "SCMP_ACT_ALLOW":
            (conditional if rule.get("args") else plain).update(rule.get("names", []))
    families = {
        family: "allowed"
        if plain.intersection(names)
        else ("restricted" if conditional.intersection(names) else "denied")
        for family, names in SECCOMP_FAMILIES.items()
    }
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
        f"enforced by polling every {poll:g} s (sooner while it grows fast): the run is "
        "stopped once over, and what it writes before the kill takes effect can overshoot "
        "the bound"
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
