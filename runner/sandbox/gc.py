"""Sweep up containers whose flow-runner process died before it could remove them.

Cleanup in ``runner.sandbox.docker`` is shielded from cancellation, but a SIGKILL, an OOM
kill or a power cut of the host process still leaves its containers behind. Every
container carries ``flow-runner.owner = <hostname>:<pid>`` and ``flow-runner.created``
(unix ms), so a later run can tell a leftover from the container of a live run.

Only containers owned by *this* host are judged. A pid means nothing on another host, and
an engine can be shared (``DOCKER_HOST``, a socket mounted into several pods), so other
hosts' containers are always left alone; their own runners sweep them. A container is
abandoned when its owner pid no longer exists here, or exists but started after the
container was created (the pid was reused), or is a zombie (killed, not yet reaped by its
parent). Containers without a readable owner label are left alone too: they were not made
by this code.
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
    LABEL_INSPECT,
    LABEL_OWNER,
    LABEL_RUN_ID,
    default_client,
    engine_unavailable,
)
from runner.sandbox.errors import DockerSandboxError
from runner.sandbox.pathmap import runner_container_abandoned

_CONFLICT = 409
_CLOCK_SLACK_MS = 2_000
"""The boot time in /proc/stat has one-second granularity; allow for it and then some."""


def sweep(client: docker.DockerClient | None = None) -> list[str]:
    """Force-remove (with anonymous volumes) this host's abandoned containers; return ids."""
    api = (client or default_client()).api
    host = socket.gethostname()
    removed: list[str] = []
    try:
        summaries = [
            summary
            for label in (LABEL_RUN_ID, LABEL_INSPECT)
            for summary in api.containers(all=True, filters={"label": label})
        ]
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise engine_unavailable(exc) from exc
    for summary in summaries:
        labels = summary.get("Labels") or {}
        verdict = runner_container_abandoned(labels, api)
        if not (is_abandoned(labels, host) if verdict is None else verdict):
            continue
        try:
            api.remove_container(summary["Id"], v=True, force=True)
        except docker.errors.NotFound:
            continue  # removed meanwhile, by its owner's cleanup or another sweep
        except docker.errors.APIError as exc:
            if exc.status_code == _CONFLICT:
                continue  # "removal already in progress": another sweep got there first
            raise DockerSandboxError(
                f"could not remove abandoned container {summary['Id'][:12]}: "
                f"{exc.explanation}; remove it with `docker rm -f {summary['Id'][:12]}`"
            ) from exc
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
    stat = _process_stat(pid)
    if stat is None:
        return True
    state, started_ms = stat
    if state in ("Z", "X"):
        return False  # killed (kill -9), only not yet reaped by its parent
    if created_ms is None:
        return True
    return started_ms <= created_ms + _CLOCK_SLACK_MS


def _process_stat(pid: int) -> tuple[str, int] | None:
    """``pid``'s state letter and start time (unix ms) from /proc; ``None`` if it cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/stat").read_text()
    except OSError:
        return None
    # After the ")" that ends comm: field 3 (state) first, field 22 (starttime, clock ticks
    # since boot) twenty places later.
    fields = stat.rpartition(")")[2].split()
    ticks = int(fields[19])
    btime = next(int(line.split()[1]) for line in boot.splitlines() if line.startswith("btime"))
    return fields[0], round((btime + ticks / os.sysconf("SC_CLK_TCK")) * 1000)
