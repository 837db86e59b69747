"""Sweep up containers whose flow-runner process died before it could remove them.

Cleanup in ``runner.sandbox.docker.sandbox`` is shielded, but a SIGKILL, an OOM kill or a
power cut still leaves containers behind. Every ``exec`` sweeps before it starts, so a
sweep removes only what is provably abandoned: what it cannot prove dead is alive.

A container is judged only if its labels carry a valid MAC under this machine's key
(``runner.sandbox.labels``): forged or copied labels are not ours to judge. Its owner,
named by boot id, pid namespace, pid and start time, is dead when

* it ran in this boot and in the sweeper's pid namespace, and its pid is gone, another
  process now (another start time), or a zombie;
* it ran in another boot, and the container is not running and was created before this
  boot began (stopped by the reboot; a signed container is this machine's).

A pooled container claimed by a run (``labels.record_claim``) is dead only once the run's
process is dead too. Anything else is left alone: another pid namespace's runner (its pids
are not ours to see), another boot's container that runs or is younger than this boot,
an older flow-runner's unsigned labels; remove those by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.sandbox.docker.engine import default_engine, engine_for, engine_unavailable
from runner.sandbox.docker.http import EngineHttp, NoAnswer, Reply
from runner.sandbox.errors import DockerSandboxError
from runner.sandbox.labels import (
    LABEL_CREATED,
    LABEL_INSPECT,
    LABEL_PARENT_RUN_ID,
    LABEL_PROCESS,
    LABEL_RUN_ID,
    LABEL_RUNNER_CONTAINER,
    Process,
    drop_claim,
    is_signed,
    machine_key,
    own_container,
    process_stat,
    read_claim,
)

if TYPE_CHECKING:
    import docker

_CONFLICT = 409
_CLOCK_SLACK_MS = 2_000
"""The boot time in /proc/stat has one-second granularity."""
_STOPPED = frozenset({"created", "exited", "dead"})
"""Engine states of a container that does not run (a missing state proves nothing)."""


@dataclass(frozen=True)
class Sweeper:
    """What the sweeping process knows for sure: its key, its own name, its boot's start."""

    key: bytes
    here: Process
    booted_ms: int

    @classmethod
    def current(cls) -> Sweeper:
        return cls(machine_key(), Process.current(), _boot_time_ms())

    def abandoned(
        self,
        labels: Mapping[str, str],
        state: str | None,
        gone: Callable[[str], bool] | None = None,
    ) -> bool:
        """True only if these are our labels and their owner is provably dead.

        A container made by a runner in another container (``flow-runner.runner-container``)
        is abandoned once that container no longer runs (``gone`` asks the engine): nothing
        is left in it to clean up; while it runs, only its own runner can judge its pids.
        """
        if not is_signed(labels, self.key):
            return False
        runner = labels.get(LABEL_RUNNER_CONTAINER)
        if runner and gone is not None and runner != own_container():
            return gone(runner)
        return self.dead(Process.parse(labels.get(LABEL_PROCESS, "")), labels, state)

    def dead(self, owner: Process | None, labels: Mapping[str, str], state: str | None) -> bool:
        """Whether ``owner`` (of a container with these labels and state) is provably dead."""
        if owner is None:
            return False
        if owner.boot_id != self.here.boot_id:
            created = labels.get(LABEL_CREATED, "")
            return (
                state in _STOPPED
                and created.isdigit()
                and int(created) < self.booted_ms - _CLOCK_SLACK_MS
            )
        if owner.pid_ns != self.here.pid_ns:
            return False
        found = process_stat(owner.pid)
        if found is None:
            return True
        process_state, start_ticks = found
        return start_ticks != owner.start_ticks or process_state in ("Z", "X")

    def made_here_for(
        self, runs: Collection[str], summaries: Sequence[Mapping[str, Any]]
    ) -> Removable:
        """Whether labels are ours, name this very process as the owner, and name one of
        ``runs`` or a run below one (a child flow's, at any depth, as the parent run ids
        on this process's listed containers, ``summaries``, link them; a run whose own
        container is gone links none: a caller names such runs in ``runs`` too)."""
        here = self.here.label()
        parents: dict[str, str] = {}
        for summary in summaries:
            labels = summary.get("Labels") or {}
            run, parent = labels.get(LABEL_RUN_ID), labels.get(LABEL_PARENT_RUN_ID)
            if run and parent and labels.get(LABEL_PROCESS) == here and is_signed(labels, self.key):
                parents[run] = parent

        def below(run: str | None) -> bool:
            seen: set[str] = set()
            while run is not None and run not in seen:
                if run in runs:
                    return True
                seen.add(run)
                run = parents.get(run)
            return False

        def removable(
            labels: Mapping[str, str], state: str | None, gone: Callable[[str], bool]
        ) -> bool:
            return (
                is_signed(labels, self.key)
                and labels.get(LABEL_PROCESS) == here
                and (below(labels.get(LABEL_RUN_ID)) or below(labels.get(LABEL_PARENT_RUN_ID)))
            )

        return removable


Removable = Callable[[Mapping[str, str], "str | None", Callable[[str], bool]], bool]
"""Whether a container (labels, state; ``gone`` asks about another) is one to remove."""


def sweep(
    client: docker.DockerClient | None = None, *, runs: Collection[str] | None = None
) -> list[str]:
    """Force-remove (with anonymous volumes) the provably abandoned containers; return ids.

    With ``runs``, instead the containers this very process made for those runs and the
    runs below them, once over (a batch's end: a removal that failed is not tried again,
    and an unanswered create may have made one; a sweep spares a live owner's).

    The engine is asked directly (``http.py``, blocking): no docker-py on the way to an
    ``exec``. An engine reached only through docker-py (TLS, ssh) is refused, as a run is.
    """
    engine = default_engine() if client is None else engine_for(client)
    return sweep_engine(engine.direct(), runs=runs)


def sweep_engine(http: EngineHttp, *, runs: Collection[str] | None = None) -> list[str]:
    """:func:`sweep` of the engine at ``http``."""
    sweeper = Sweeper.current()
    summaries: list[dict[str, Any]] = []
    for label in (LABEL_RUN_ID, LABEL_INSPECT):
        query = {"limit": "-1", "all": "1", "size": "0", "trunc_cmd": "0"}
        query["filters"] = json.dumps({"label": [label]})
        found = _json(_call(http, "GET", "/containers/json", query))
        if not isinstance(found, list):
            raise engine_unavailable(RuntimeError("the engine's container list is not a list"))
        summaries += [summary for summary in found if isinstance(summary, dict)]
    removable = sweeper.abandoned if runs is None else sweeper.made_here_for(runs, summaries)
    removed: list[str] = []
    for summary in summaries:
        labels, state, container_id = (
            summary.get("Labels") or {},
            summary.get("State"),
            str(summary["Id"]),
        )
        # The labels first: once their owner is dead, no claim record can come after.
        if not removable(labels, state, lambda id: _gone(http, id)):
            continue
        claimer = read_claim(container_id, sweeper.key)
        if claimer is not None and not sweeper.dead(Process.parse(claimer), labels, state):
            continue
        reply = _call(http, "DELETE", f"/containers/{container_id}", {"v": "1", "force": "1"})
        if reply.status in (204, 404):
            drop_claim(container_id)
        if reply.status in (404, _CONFLICT):  # removed meanwhile; another sweep removes it
            continue
        if reply.status != 204:
            raise DockerSandboxError(
                f"could not remove abandoned container {container_id[:12]}: "
                f"{reply.message}; remove it with `docker rm -f {container_id[:12]}`"
            )
        removed.append(container_id)
    return removed


def _call(http: EngineHttp, method: str, path: str, query: Mapping[str, str]) -> Reply:
    try:
        return http.ask_blocking(method, path, query=query).reply()
    except NoAnswer as exc:
        raise engine_unavailable(exc) from exc


def _json(reply: Reply) -> Any:
    """The JSON of a 200 reply; any other is an engine that failed."""
    try:
        if reply.status == 200:
            return reply.json()
    except NoAnswer as exc:
        raise engine_unavailable(exc) from exc
    raise engine_unavailable(RuntimeError(f"{reply.status} {reply.message}"))


def _boot_time_ms() -> int:
    """When this boot began (unix ms, ``btime`` in /proc/stat)."""
    boot = Path("/proc/stat").read_text()
    btime = next(int(line.split()[1]) for line in boot.splitlines() if line.startswith("btime"))
    return btime * 1000


def _gone(http: EngineHttp, container_id: str) -> bool:
    """True if the engine has no running (or restarting) container ``container_id``."""
    reply = _call(http, "GET", f"/containers/{container_id}/json", {})
    if reply.status == 404:
        return True
    info = _json(reply)
    state = info.get("State") if isinstance(info, dict) else None
    if not isinstance(state, dict):
        raise engine_unavailable(RuntimeError("the engine's inspect document has no State"))
    return not (state.get("Running") or state.get("Restarting"))
