"""Files written for the user (``--report``, ``--junit``, ``--jsonl``, ``--snapshot``,
``batch merge -o``): judged before anything runs, then written whole or not at all.

:func:`check_output` refuses a path that cannot be written before any container exists,
not after the run, losing its result. :func:`write_output` renames a temporary file over
the target, so a reader never sees half a file. Standard library only: any layer may use it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class OutputPathError(ValueError):
    """An output path that cannot be written; the message names the option, path and fix."""


def check_output(path: Path, option: str) -> None:
    """Refuse ``path`` (given as ``option``) unless a file can be written there now."""
    where = f"{option} {path}"
    parent = path.parent
    if path.is_dir():
        hint = {
            "--junit": "junit.xml",
            "--jsonl": "results.jsonl",
            "--snapshot": "snapshot.json",
            "--report": "report.json",
            "--results": "results.sqlite",
            "--output": "merged.sqlite",
        }.get(option, "out")
        raise OutputPathError(
            f"{where} is a directory; give a file path, e.g. {option} {path / hint}"
        )
    if not parent.is_dir():
        if parent.exists():
            raise OutputPathError(f"{where}: {parent} is not a directory; give another path")
        raise OutputPathError(
            f"{where}: no directory {parent}; create it first (mkdir -p {parent}) "
            "or give another path"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"{where}: cannot create files in {parent} (permission denied); "
            "give a path in a directory you can write"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputPathError(
            f"{where}: the file exists and is not writable for you; remove it or give another path"
        )


def write_output(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (an existing file keeps its mode). A path that is
    no regular file (``/dev/stdout``, a FIFO) is written in place: a rename would replace it."""
    try:
        info = path.stat()
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        with path.open("wb") as out:
            out.write(data)
        return
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode) if info else _created_mode())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _created_mode() -> int:
    """The mode ``open(path, "w")`` would have given a new file (0666 less the umask)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask
