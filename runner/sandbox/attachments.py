"""Attachments: host paths an invocation may see, and the host paths it never may.

``--attach NAME=HOSTPATH[:ro|:rw]`` is the one way a run reaches host files, so a
mistaken or malicious spec is stopped here, before any sandbox exists.

A path is opened once (``O_PATH | O_NOFOLLOW``) and judged by what it *is*: its type
(only a directory or a regular file), the path the kernel gives it and its identity (a
bind mount of a refused directory is refused too). Refused: ``/``, the system trees,
every container engine's and runtime's state, anything in a ``.ssh`` directory, a file
named ``docker.sock``, and a directory exposing one of those from above (``/run``, a
home directory). A socket or device node among an attached directory's first
:data:`SCAN_LIMIT` entries is refused too; symlinks inside are not followed.

A checked path could be swapped for a symlink before the engine mounts it by whoever can
write a parent directory, so every parent must be changeable only by root or this user:
inside a read-write attachment nothing can be attached. The backend holds the descriptor
and compares what it mounted with it (:meth:`HeldPath.recheck`). A profile's
``allowed_mounts`` lets a path at or under a listed one through on purpose.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from runner.protocol.names import MAX_ATTACHMENTS, is_local_name
from runner.sandbox.base import Access, Attachment
from runner.sandbox.errors import SandboxError

_MODES: dict[str, Access] = {"ro": "read", "rw": "read-write"}
_SUFFIX: dict[Access, str] = {"read": "ro", "read-write": "rw"}
_SPEC_FORM = "write NAME=HOSTPATH[:ro|:rw], e.g. data=./input:ro"
_OTHERS_ATTACH = (
    "attach another directory (e.g. a copy of just what the component needs), or list the "
    "path in the sandbox profile's allowed_mounts to allow it on purpose"
)

DOCKER_SOCKETS = (Path("/var/run/docker.sock"), Path("/run/docker.sock"))
ENGINE_STATE = tuple(
    Path(p)
    for p in (
        "/run/docker",
        "/var/lib/docker",
        "/run/containerd",
        "/var/lib/containerd",
        "/run/runc",
        "/run/runsc",
        "/var/run/runsc",
        "/run/podman",
        "/run/containers",
        "/var/lib/containers",
        "/run/crun",
        "/run/buildkit",
        "/var/lib/buildkit",
    )
)
"""Container engines' and runtimes' sockets and state: whoever reaches them controls every
container, and so the host."""
REFUSED_TREES = (
    tuple(Path(p) for p in ("/proc", "/sys", "/dev", "/etc", "/boot", "/root"))
    + ENGINE_STATE
    + DOCKER_SOCKETS
)
_MAX_LINKS = 40
"""Symlinks followed on the way to one host path before it is called a loop (as Linux)."""
SCAN_LIMIT = 10_000
"""Entries of an attached directory looked at for sockets and device nodes."""


class AttachmentError(SandboxError, ValueError):
    """An attachment spec is malformed, or names a host path that must not be attached."""

    transient = False


def parse_attach(spec: str) -> Attachment:
    """Parse ``NAME=HOSTPATH[:ro|:rw]`` (read-only by default; only a final ``:ro`` or
    ``:rw`` is a mode). The path must exist and is stored resolved, not yet judged
    (:func:`check_attachment`)."""
    name, sep, rest = spec.partition("=")
    if not sep:
        raise AttachmentError(f"attachment {spec!r} has no '='; {_SPEC_FORM}")
    _check_name(name, spec)
    path_text, access = _split_mode(rest)
    if not path_text:
        raise AttachmentError(f"attachment {spec!r} has no host path; {_SPEC_FORM}")
    try:
        host_path = resolve_links(Path(path_text).expanduser())
    except UntrustedLink as exc:
        raise AttachmentError(f"attachment {spec!r} is refused: {exc}") from None
    except (OSError, RuntimeError) as exc:
        hint = ""
        if ":" in path_text:
            hint = f" (only a final :ro or :rw is a mode, so {path_text!r} was taken as the path)"
        raise AttachmentError(
            f"attachment {spec!r}: host path {path_text!r} does not exist or cannot be "
            f"resolved{hint}; {_missing_fix(Path(path_text))}"
        ) from exc
    return Attachment(name=name, host_path=host_path, access=access)


class UntrustedLink(ValueError):
    """A symlink on the way to a host path sits where others can change it."""


def resolve_links(given: Path) -> Path:
    """``given`` resolved (it must exist), each symlink's directories judged first as a
    path's parents are: a link others can change could point anywhere by a later run.
    Raises :class:`UntrustedLink` naming it, ``OSError`` if a part is missing or loops."""
    parts = deque(given.absolute().parts[1:])
    current, links = Path("/"), 0
    while parts:
        part = parts.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        if not stat.S_ISLNK(os.lstat(candidate).st_mode):
            current = candidate
            continue
        links += 1
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(given))
        refusal = _parent_refusal(candidate)
        if refusal is not None:
            raise UntrustedLink(
                f"its path goes through the symlink {candidate}, which {refusal}; attach "
                "what it points to by its own path if that is what you mean"
            )
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            current = Path("/")
            parts.extendleft(reversed(target.parts[1:]))
        else:
            parts.extendleft(reversed(target.parts))
    return current


def parse_attachments(specs: Iterable[str]) -> tuple[Attachment, ...]:
    """Parse several specs; a name may be given only once, and at most 256 of them."""
    attachments = tuple(parse_attach(spec) for spec in specs)
    check_unique(attachments)
    return attachments


def check_unique(attachments: Iterable[Attachment]) -> None:
    """Refuse two attachments with the same name, or more than Run/1 allows in one run."""
    seen: set[str] = set()
    for att in attachments:
        if att.name in seen:
            raise AttachmentError(
                f"attachment {spec_of(att)!r}: the name {att.name!r} is attached twice; "
                "give each attachment its own name"
            )
        seen.add(att.name)
    if len(seen) > MAX_ATTACHMENTS:
        raise AttachmentError(
            f"{len(seen)} attachments given, and a run may have at most {MAX_ATTACHMENTS} "
            "(Run/1 flow/run.attachments); attach a common parent directory instead"
        )


def check_attachments(attachments: Iterable[Attachment], allowed_mounts: Iterable[Path]) -> None:
    """Check names are unique and that every path may be attached under the profile."""
    attachments = tuple(attachments)
    check_unique(attachments)
    allowed = tuple(allowed_mounts)
    for att in attachments:
        check_attachment(att, allowed)


def check_attachment(att: Attachment, allowed_mounts: Iterable[Path] = ()) -> None:
    """Refuse a host path that would hand the component the host, unless the profile allows it."""
    hold(att, allowed_mounts).close()


@dataclass
class HeldPath:
    """A judged attachment, held open so that what is mounted can be compared with it."""

    attachment: Attachment
    fd: int
    path: Path
    """The path the kernel gave the descriptor: what a backend must bind."""
    identity: tuple[int, int]
    """``(st_dev, st_ino)`` of what was judged."""

    def recheck(self) -> None:
        """Refuse if :attr:`path` no longer names the judged file (it was swapped)."""
        try:
            now = os.stat(self.path)
        except OSError as exc:
            raise self.changed(f"it is gone ({exc.strerror})") from exc
        if (now.st_dev, now.st_ino) != self.identity:
            raise self.changed("it now names another file")

    def changed(self, what: str) -> AttachmentError:
        return AttachmentError(
            f"attachment {spec_of(self.attachment)!r} is refused: {self.path} changed after "
            f"it was checked ({what}); whoever can write its parent directories could have "
            "put a link to another path there. Attach a path only you or root can change"
        )

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_READ, _WRITE, _SEARCH = 4, 2, 1


def check_usable(held: HeldPath, user: str, *, shown_as: str | None = None) -> None:
    """Refuse a held path the sandbox's ``user`` (``UID:GID``) cannot use as attached
    (else writes fail inside and the run may succeed). Mode bits only: a path with a POSIX
    ACL, or a named ``user``, is not judged. ``shown_as`` names it in the message."""
    uid_text, _, gid_text = user.partition(":")
    if not (uid_text.isdigit() and gid_text.isdigit()):
        return
    uid, gid = int(uid_text), int(gid_text)
    info = os.fstat(held.fd)
    directory = stat.S_ISDIR(info.st_mode)
    writes = held.attachment.access == "read-write"
    if directory:
        need = (_WRITE if writes else _READ) | _SEARCH
    else:
        need = _READ | (_WRITE if writes else 0)
    if _has_acl(held.fd):
        return
    mode = info.st_mode
    if info.st_uid == uid:
        bits = (mode >> 6) & 7
    elif info.st_gid == gid:
        bits = (mode >> 3) & 7
    else:
        bits = mode & 7
    if bits & need == need:
        return
    asked = {_READ: "read", _WRITE: "write", _SEARCH: "search"}
    what = " and ".join(word for bit, word in asked.items() if need & bit)
    name = shown_as or f"attachment {spec_of(held.attachment)!r}"
    owner = f"{info.st_uid}:{info.st_gid}"
    grant = "rwx" if directory else ("rw" if writes else "r")
    # Running as the owner is no fix for root: a profile refuses uid 0 by default.
    as_owner = (
        f"; or run as its owner: --user {owner} (exec and batch) or the profile's `user`"
        if info.st_uid != 0
        else ""
    )
    raise AttachmentError(
        f"{name} is unusable: the component runs as {uid}:{gid} and could not {what} "
        f"{held.path} (owner {owner}, mode {stat.S_IMODE(mode):04o}, "
        f"{'directory' if directory else 'file'}). Fixes: let {uid}:{gid} in, "
        f"`chown {uid}:{gid} {held.path}` or `setfacl -m u:{uid}:{grant} {held.path}`; "
        f"or give a path {uid}:{gid} may {what}{as_owner}"
    )


def _missing_fix(path: Path) -> str:
    """What to do about a missing path: in a container, mount it in; else create it."""
    from runner.sandbox.own_container import in_container

    if not in_container():
        return "create it or fix the path"
    inner = Path(os.path.abspath(path.expanduser()))
    return (
        f"flow-runner runs in a container, which has only what is mounted into it: start it "
        f'with `-v HOSTPATH:{inner}` (or a directory above it, e.g. -v "$PWD:$PWD" -w '
        f'"$PWD"), HOSTPATH being where the engine\'s host has it; or create it or fix the path'
    )


def _has_acl(fd: int) -> bool:
    try:
        os.getxattr(f"/proc/self/fd/{fd}", "system.posix_acl_access")
    except OSError:
        return False
    return True


def hold(
    att: Attachment, allowed_mounts: Iterable[Path] = (), *, directory: bool = False
) -> HeldPath:
    """Open ``att``'s path once and judge the descriptor; the caller closes the result.
    ``directory`` demands a directory (a scratch). A refusal is :class:`AttachmentError`."""
    _check_name(att.name, spec_of(att))
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(resolve_links(att.host_path), flags)  # links planted since the parse?
    except UntrustedLink as exc:
        raise AttachmentError(f"attachment {spec_of(att)!r} is refused: {exc}") from None
    except (OSError, RuntimeError) as exc:
        raise AttachmentError(
            f"attachment {spec_of(att)!r}: host path {att.host_path} does not exist or is "
            f"not {'a directory' if directory else 'readable'}; create it or fix the path"
        ) from exc
    try:
        return _judge(att, fd, tuple(Path(p).resolve() for p in allowed_mounts))
    except BaseException:
        os.close(fd)
        raise


def spec_of(att: Attachment) -> str:
    """The ``NAME=HOSTPATH:MODE`` spec that describes ``att``."""
    return f"{att.name}={att.host_path}:{_SUFFIX[att.access]}"


def _check_name(name: str, spec: str) -> None:
    if not is_local_name(name):
        raise AttachmentError(
            f"attachment {spec!r}: name {name!r} is not a LocalName (1-64 lowercase letters, "
            "digits and single dashes, e.g. input-data); rename it"
        )


def _split_mode(rest: str) -> tuple[str, Access]:
    head, sep, tail = rest.rpartition(":")
    if sep and tail in _MODES:
        return head, _MODES[tail]
    return rest, "read"


def _judge(att: Attachment, fd: int, allowed: tuple[Path, ...]) -> HeldPath:
    info = os.fstat(fd)
    proc_path = f"/proc/self/fd/{fd}"
    path = Path(os.readlink(proc_path))
    held = HeldPath(att, fd, path, (info.st_dev, info.st_ino))
    if stat.S_ISLNK(info.st_mode) or not path.is_absolute():
        raise held.changed("it became a symlink, or left this mount namespace")
    held.recheck()  # the kernel's name for it is still its name
    if any(_within(path, tree) for tree in allowed):
        return held
    reason = _type_refusal(info.st_mode) or _refusal(path, held.identity)
    reason = reason or _parent_refusal(path) or _scan(proc_path, path, info.st_mode)
    if reason is not None:
        raise AttachmentError(
            f"attachment {spec_of(att)!r} is refused: {path} {reason}; {_OTHERS_ATTACH}"
        )
    return held


def _type_refusal(mode: int) -> str | None:
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    return f"is {_kind(mode)}, and only directories and regular files can be attached"


def _kind(mode: int) -> str:
    if stat.S_ISSOCK(mode):
        return "a unix socket (whoever serves it, e.g. a container engine, is reachable)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    return "a FIFO" if stat.S_ISFIFO(mode) else "not a directory or regular file"


def _refusal(path: Path, identity: tuple[int, int]) -> str | None:
    """Why ``path`` (resolved) with ``identity`` must not be attached, or ``None``."""
    if path == Path("/"):
        return "is the host's root directory"
    if path.name == "docker.sock":
        return "is the Docker socket (control of the engine is control of the host)"
    if ".ssh" in path.parts:
        return "is or is inside a .ssh directory (keys and their trust)"
    for tree, tree_identity in _resolved(REFUSED_TREES).items():
        if path == tree or identity == tree_identity:
            return f"is {tree}, which belongs to the host's system or its container engine"
        if _within(path, tree):
            return f"is inside {tree}, which belongs to the host's system or its container engine"
    for refused in _resolved(REFUSED_TREES):
        if _within(refused, path):
            return f"contains {refused}"
    for child in (".ssh", "docker.sock"):
        if os.path.lexists(path / child):
            return f"holds {path / child}"
    return None


def _parent_refusal(path: Path) -> str | None:
    """Why someone other than root or this user could swap ``path`` before it is mounted."""
    trusted = {0, os.geteuid()}
    child = path
    for parent in path.parents:
        info, below = os.lstat(parent), os.lstat(child)
        writable = info.st_mode & 0o002 or (info.st_mode & 0o020 and info.st_gid != 0)
        sticky_and_ours = info.st_mode & stat.S_ISVTX and below.st_uid in trusted
        if info.st_uid not in trusted or (writable and not sticky_and_ours):
            return (
                f"has a parent directory, {parent}, that users other than root and you can "
                f"change (owner uid {info.st_uid}, mode {stat.filemode(info.st_mode)}), so "
                "the path could be swapped for a link elsewhere before it is mounted"
            )
        child = parent
    return None


def _scan(root: str, shown_as: Path, mode: int) -> str | None:
    """The first socket or device node among a directory's first :data:`SCAN_LIMIT`
    entries; ``root`` is the held descriptor's ``/proc/self/fd`` path (the tree judged)."""
    if not stat.S_ISDIR(mode):
        return None
    pending, seen = deque([root]), 0
    while pending:
        try:
            with os.scandir(pending.popleft()) as entries:
                for entry in entries:
                    if seen == SCAN_LIMIT:
                        return None
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                        kind = entry.stat(follow_symlinks=False).st_mode
                        if not stat.S_ISFIFO(kind):
                            inner = entry.path.removeprefix(root).lstrip("/")
                            return f"holds {shown_as / inner}, which is {_kind(kind)}"
        except OSError:
            continue  # unreadable by this user, or gone meanwhile: not checked
    return None


def _resolved(paths: tuple[Path, ...]) -> dict[Path, tuple[int, int] | None]:
    """The paths as written and resolved (``/var/run`` -> ``/run``), with identities."""
    found: dict[Path, tuple[int, int] | None] = {}
    for path in {*paths, *(p.resolve() for p in paths)}:
        try:
            info = os.stat(path)
        except OSError:
            found[path] = None
        else:
            found[path] = (info.st_dev, info.st_ino)
    return found


def _within(path: Path, tree: Path) -> bool:
    return path == tree or tree in path.parents
