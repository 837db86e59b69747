"""Attachments: host paths an invocation may see, and the host paths it never may.

``--attach NAME=HOSTPATH[:ro|:rw]`` is the one way a run reaches host files, so this module
is where a mistaken or malicious spec is stopped, before any sandbox exists. It is
backend-neutral: the Docker backend binds the paths, the process backend hands them over.

Every path is resolved (symlinks included) before it is judged, so a link to ``/etc``
is refused like ``/etc`` itself. Refused: the Docker socket (any file named
``docker.sock``), ``/``, the system trees ``/proc``, ``/sys``, ``/dev``, ``/etc``,
``/boot``, ``/var/lib/docker`` and ``/root`` with everything inside them, any path that is
or is inside a ``.ssh`` directory, and any directory that would expose one of those from
above: an ancestor of a refused path (``/var``, ``/run``), or a directory holding a
``.ssh`` directory or a ``docker.sock`` directly (a home directory). Only those direct
children are looked at; a tree is not searched. A profile's ``allowed_mounts`` lets a path
through on purpose when it is, or is inside, one of the listed paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from runner.sandbox.base import Access, Attachment

LOCAL_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_MODES: dict[str, Access] = {"ro": "read", "rw": "read-write"}
_SUFFIX: dict[Access, str] = {"read": "ro", "read-write": "rw"}
_SPEC_FORM = "write NAME=HOSTPATH[:ro|:rw], e.g. data=./input:ro"

DOCKER_SOCKETS = (Path("/var/run/docker.sock"), Path("/run/docker.sock"))
REFUSED_TREES = tuple(
    Path(p) for p in ("/proc", "/sys", "/dev", "/etc", "/boot", "/var/lib/docker", "/root")
)


class AttachmentError(ValueError):
    """An attachment spec is malformed, or names a host path that must not be attached."""


def parse_attach(spec: str) -> Attachment:
    """Parse ``NAME=HOSTPATH[:ro|:rw]``; the access defaults to read-only.

    Only a final ``:ro`` or ``:rw`` is a mode, so a path may contain ``:`` (a path that
    itself ends in ``:ro`` needs an explicit mode after it). The path must exist and is
    stored resolved, symlinks included; it is not judged here (see
    :func:`check_attachment`).
    """
    name, sep, rest = spec.partition("=")
    if not sep:
        raise AttachmentError(f"attachment {spec!r} has no '='; {_SPEC_FORM}")
    _check_name(name, spec)
    path_text, access = _split_mode(rest)
    if not path_text:
        raise AttachmentError(f"attachment {spec!r} has no host path; {_SPEC_FORM}")
    try:
        host_path = Path(path_text).expanduser().resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        hint = ""
        if ":" in path_text:
            hint = f" (only a final :ro or :rw is a mode, so {path_text!r} was taken as the path)"
        raise AttachmentError(
            f"attachment {spec!r}: host path {path_text!r} does not exist or cannot be "
            f"resolved{hint}; create it or fix the path"
        ) from exc
    return Attachment(name=name, host_path=host_path, access=access)


def parse_attachments(specs: Iterable[str]) -> tuple[Attachment, ...]:
    """Parse several specs; a name may be given only once."""
    attachments = tuple(parse_attach(spec) for spec in specs)
    check_unique(attachments)
    return attachments


def check_unique(attachments: Iterable[Attachment]) -> None:
    """Refuse two attachments with the same name."""
    seen: set[str] = set()
    for att in attachments:
        if att.name in seen:
            raise AttachmentError(
                f"attachment {spec_of(att)!r}: the name {att.name!r} is attached twice; "
                "give each attachment its own name"
            )
        seen.add(att.name)


def check_attachments(attachments: Iterable[Attachment], allowed_mounts: Iterable[Path]) -> None:
    """Check names are unique and that every path may be attached under the profile."""
    attachments = tuple(attachments)
    check_unique(attachments)
    allowed = tuple(allowed_mounts)
    for att in attachments:
        check_attachment(att, allowed)


def check_attachment(att: Attachment, allowed_mounts: Iterable[Path] = ()) -> None:
    """Refuse a host path that would hand the component the host, unless the profile allows it."""
    _check_name(att.name, spec_of(att))
    try:
        path = att.host_path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise AttachmentError(
            f"attachment {spec_of(att)!r}: host path {att.host_path} does not exist; "
            "create it or fix the path"
        ) from exc
    if any(_within(path, Path(allowed).resolve()) for allowed in allowed_mounts):
        return
    reason = _refusal(path)
    if reason is not None:
        raise AttachmentError(
            f"attachment {spec_of(att)!r} is refused: {path} {reason}; attach another "
            "directory (e.g. a copy of just what the component needs), or list the path in "
            "the sandbox profile's allowed_mounts to allow it on purpose"
        )


def spec_of(att: Attachment) -> str:
    """The ``NAME=HOSTPATH:MODE`` spec that describes ``att``."""
    return f"{att.name}={att.host_path}:{_SUFFIX[att.access]}"


def _check_name(name: str, spec: str) -> None:
    if not (LOCAL_NAME.match(name) and len(name) <= 64):
        raise AttachmentError(
            f"attachment {spec!r}: name {name!r} is not a LocalName (1-64 lowercase letters, "
            "digits and single dashes, e.g. input-data); rename it"
        )


def _split_mode(rest: str) -> tuple[str, Access]:
    head, sep, tail = rest.rpartition(":")
    if sep and tail in _MODES:
        return head, _MODES[tail]
    return rest, "read"


def _refusal(path: Path) -> str | None:
    """Why ``path`` (already resolved) must not be attached, or ``None``."""
    if path == Path("/"):
        return "is the host's root directory"
    if path.name == "docker.sock" or path in _resolved(DOCKER_SOCKETS):
        return "is the Docker socket (control of the engine is control of the host)"
    if ".ssh" in path.parts:
        return "is or is inside a .ssh directory (keys and their trust)"
    for tree in _resolved(REFUSED_TREES):
        if _within(path, tree):
            return f"is {tree} or inside it, and {tree} belongs to the host's system"
    for refused in _resolved(REFUSED_TREES + DOCKER_SOCKETS):
        if _within(refused, path):
            return f"contains {refused}"
    for child in (".ssh", "docker.sock"):
        if (path / child).exists():
            return f"holds {path / child}"
    return None


def _resolved(paths: tuple[Path, ...]) -> set[Path]:
    """The paths both as written and resolved (``/var/run`` is a link to ``/run``)."""
    return {*paths, *(p.resolve() for p in paths)}


def _within(path: Path, tree: Path) -> bool:
    return path == tree or tree in path.parents
