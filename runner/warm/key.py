"""The installation key: which code a warm runner imported, as a short digest.

A server is reachable only under the key it computed before importing anything, and a
client asks only under the key of what it would import, so an edited checkout, an upgraded
package or another interpreter never reaches a server holding the old code. The key covers
flow-runner's version, ``sys.executable``, the interpreter's flags, ``-W`` and ``-X``
options and ``PYTHON*`` variables (some are read only at start: ``PYTHONHASHSEED``); each
``sys.path`` entry with the names imports can find there; and every file of the ``runner``
package (path, size, modification time). A file edited in place inside another installed
package is not seen (restart the server after editing a dependency).
"""

from __future__ import annotations

import os
import sys
from _blake2 import blake2b  # hashlib's own blake2b; hashlib itself costs ~10 ms to import

import runner

KEY_HEX = 24
"""Hex digits of a key: 96 bits, and a socket path well inside ``sun_path``."""


def installation_key() -> str:
    digest = blake2b(digest_size=KEY_HEX // 2)
    interpreter = sorted((k, v) for k, v in os.environ.items() if k.startswith("PYTHON"))
    facts = (runner.__version__, sys.executable, repr(sys.flags), sys.warnoptions, sys._xoptions)
    digest.update(repr((facts, interpreter)).encode("utf-8", "surrogateescape"))
    for entry in sys.path:
        where = entry or os.getcwd()  # "" is the working directory; others stay as written
        digest.update(f"path\0{where}\0{_importable(where)}\n".encode("utf-8", "surrogateescape"))
    top = os.path.dirname(os.path.abspath(runner.__file__))
    digest.update(f"package\0{top}\n".encode("utf-8", "surrogateescape"))
    _tree(digest, top, "")
    return digest.hexdigest()


IMPORTABLE = (".py", ".pyc", ".so", ".pth", ".egg-link", ".zip")
"""Suffixes of the files an import or ``site`` may read from a ``sys.path`` directory."""


def _importable(where: str) -> list[str] | None:
    """The names of a ``sys.path`` entry's importable files, packages and distribution
    metadata (None: not a directory): installing a package changes them, a report written
    into the working directory does not."""
    try:
        with os.scandir(where) as found:
            return sorted(
                entry.name
                for entry in found
                if entry.name.endswith(IMPORTABLE) or (entry.is_dir() and _package(entry.name))
            )
    except OSError:
        return None


def _package(name: str) -> bool:
    """Whether a directory of this name can be imported, or holds a distribution's metadata."""
    return (name.isidentifier() and name != "__pycache__") or name.endswith(
        (".dist-info", ".egg-info")
    )


def _tree(digest: blake2b, top: str, relative: str) -> None:
    with os.scandir(os.path.join(top, relative)) as found:
        entries = sorted(found, key=lambda entry: entry.name)
    for entry in entries:
        if entry.name == "__pycache__":
            continue
        name = os.path.join(relative, entry.name)
        if entry.is_dir(follow_symlinks=False):
            _tree(digest, top, name)
            continue
        facts = entry.stat(follow_symlinks=False)
        line = f"{name}\0{facts.st_size}\0{facts.st_mtime_ns}\n"
        digest.update(line.encode("utf-8", "surrogateescape"))
