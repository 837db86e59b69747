"""The engine's container this process runs in, if any, read from ``/proc/self/mountinfo``:
the engine bind-mounts ``/etc/hostname``, ``hosts`` and ``resolv.conf`` from
``<data-root>/containers/<id>/``, whatever the hostname. Kept apart from
``runner.sandbox.pathmap``: every run's labels need it, only runs with host paths that.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
_CONTAINER_ROOT = re.compile(r"/containers/([0-9a-f]{64})/(?:hostname|hosts|resolv\.conf)$")


def in_container() -> bool:
    """Whether this process looks containerised: podman's and systemd's ``container``
    variable, Docker's ``/.dockerenv``, or (:func:`own_container_id`) its mountinfo."""
    marked = os.environ.get("container")  # noqa: SIM112 (podman's name for it)
    return bool(marked) or Path("/.dockerenv").exists() or own_container_id() is not None


def own_container_id(mountinfo: Path = MOUNTINFO) -> str | None:
    """The id of the engine's container this process runs in, or ``None`` (the hostname
    proves nothing: ``--hostname`` sets it to anything)."""
    try:
        text = mountinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 4 and (match := _CONTAINER_ROOT.search(fields[3])):
            return match.group(1)
    return None
