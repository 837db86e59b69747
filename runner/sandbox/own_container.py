"""The engine's container this process runs in, if any, read from ``/proc/self/mountinfo``.

Every container a run makes is labelled with it (``runner.sandbox.labels``), so this is
on every run's path; the translation of bind sources that a runner in a container also
needs (``runner.sandbox.pathmap``) is only on the path of a run with host paths, and is
imported there.

The engine bind-mounts its ``/etc/hostname``, ``/etc/hosts`` and ``/etc/resolv.conf``
from ``<data-root>/containers/<id>/``, which names the id whatever the hostname was set
to.
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
    """The id of the engine's container this process runs in, from mountinfo, or ``None``.

    The hostname is not used: ``--hostname`` sets it to anything. This is also what the
    owner label records (``runner_container_labels``) so that gc can tell the containers
    of a runner container that is gone.
    """
    try:
        text = mountinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 4 and (match := _CONTAINER_ROOT.search(fields[3])):
            return match.group(1)
    return None
