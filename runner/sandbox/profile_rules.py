"""The rules a sandbox profile's values follow that are not types: sizes, users, files.

Shared by the profile model and the pydantic-free reading of a shipped profile; a rule
raises :class:`ValueError` with the text a user sees.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_SIZE = re.compile(r"^\s*(\d+)\s*([bkmg]?)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(value: object) -> object:
    """A Docker-style size (``"512m"``, ``"2g"``, ``1048576``; binary units) in bytes;
    anything else unchanged, for the model to reject."""
    if isinstance(value, str) and (match := _SIZE.match(value)):
        return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    return value


def check_not_root(user: str) -> None:
    """Refuse uid 0 and gid 0, and any user whose ids the image decides: a name, or a
    uid's group, is looked up in the image's ``/etc/passwd``, which the author writes."""
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


def resolve(path: Path, base: Path | None) -> Path:
    """Resolve ``path`` (symlinks too) against ``base``, the profile file's directory (the
    working directory for a profile built in code)."""
    return (Path(base if base is not None else Path.cwd()) / path.expanduser()).resolve()


def read_seccomp(path: Path) -> str:
    """The seccomp profile at ``path`` as compact JSON text, read once at load time."""
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
