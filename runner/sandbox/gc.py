"""Sweep up containers whose flow-runner process died before it could remove them.

Cleanup in ``runner.sandbox.docker`` is shielded from cancellation, but a SIGKILL, an OOM
kill or a power cut of the host process still leaves its containers behind. Every
container carries ``flow-runner.owner = <hostname>:<pid>`` and ``flow-runner.created``
(unix ms), so a later run can tell a leftover from the container of a live run.

Only containers owned by *this* host are judged. A pid means nothing on another host, and
an engine can be shared (``DOCKER_HOST``, a socket mounted into several pods), so other
hosts' containers are always left alone; their own runners sweep them. A container is
abandoned when its owner pid no longer exists here, or exists but started after the
container was created (the pid was reused). Containers without a readable owner label are
left alone too: they were not made by this code.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from runner.sandbox.docker import (
    LABEL_CREATED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    default_client,
    engine_unavailable,
)

_CLOCK_SLACK_MS = 2_000
"""The boot time in /proc/stat has one-second granularity; allow for it and then some."""


def sweep(client: docker.DockerClient | None = None) -> list[str]:
    """Force-remove (with anonymous volumes) this host's abandoned containers; return ids."""
    api = (client or default_client()).api
    host = socket.gethostname()
    removed: list[str] = []
    try:
        summaries = api.containers(all=True, filters={"label": LABEL_RUN_ID})
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise engine_unavailable(exc) from exc
    for summary in summaries:
        if not is_abandoned(summary.get("Labels") or {}, host):
            continue
        try:
            api.remove_container(summary["Id"], v=True, force=True)
        except docker.errors.NotFound:
            continue  # removed meanwhile, by its owner's cleanup or another sweep
        removed.append(summary["Id"])
    return removed


def is_abandoned(labels: Mapping[str, str], host: str) -> bool:
    """True if the labels name an owner process on ``host`` that is no longer there."""
    owner_host, sep, pid_text = labels.get(LABEL_OWNER, "").rpartition(":")
    if not sep or owner_host != host or not pid_text.isdigit():
        return False
    created = labels.get(LABEL_CREATED, "")
    return not _owner_alive(int(pid_text), int(created) if created.isdigit() else None)


def _owner_alive(pid: int, created_ms: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    started_ms = _process_start_ms(pid)
    if started_ms is None or created_ms is None:
        return True
    return started_ms <= created_ms + _CLOCK_SLACK_MS


def _process_start_ms(pid: int) -> int | None:
    """When ``pid`` started (unix ms), from /proc; ``None`` where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime, clock ticks since boot) counts from after the ")" ending comm.
    ticks = int(stat.rpartition(")")[2].split()[19])
    btime = next(int(line.split()[1]) for line in boot.splitlines() if line.startswith("btime"))
    return round((btime + ticks / os.sysconf("SC_CLK_TCK")) * 1000)
