"""RunReport: what happened in one run, for people (`--report FILE`) and for machines.

The report keeps the classification reasons next to the verdict, so a failed run says why
(trailing bytes, exit 7, killed after the deadline, out of memory, a container removed
under it, an engine that went away) without re-running it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field


class ReportedError(BaseModel):
    """A Run failure: a wire code or PROTOCOL_ERROR / CHANNEL_LOST."""

    code: str
    message: str
    details: Any = None


class SandboxLoss(BaseModel):
    """The run's container, or the engine running it, went away during the run."""

    what: Literal["container", "engine"]
    """``container``: removed by someone else, a failure of the run (CLI exit 4);
    ``engine``: the engine failed or stopped answering, an infrastructure failure (CLI
    exit 5: retrying may succeed)."""
    step: str
    """The launch step that noticed it: attach, start, run or cleanup."""
    seconds: float
    """How far into the run (from just before its container was created) it was noticed."""
    container_id: str
    container_left: bool
    """True if cleanup could not remove the container: the next ``flow-runner gc`` does."""


class ReportedPackage(BaseModel):
    """The FLOW package a run was held to (settings, attachments, input, result, ports)."""

    name: str
    digest: str
    source: str
    """The image id it was read from, or the host directory (``--package DIR``)."""


class RunReport(BaseModel):
    """One run, judged."""

    run_id: str
    target: str
    backend: str
    """The sandbox backend's registered name (``docker``, ``process``, a plugin's)."""
    package: ReportedPackage | None = None
    """The package the run was held to; ``null``: nothing was checked against one."""
    status: Literal["succeeded", "failed"]
    outcome: str | None = None
    error: ReportedError | None = None
    reasons: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    oom_killed: bool = False
    host_kill: str | None = None
    condition: str | None = None
    lost: SandboxLoss | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    bytes_from_component: int = 0
    bytes_to_component: int = 0
    component_requests: int = 0
    dispatches: int = 0
    stderr_bytes: int = 0
    stderr_truncated: bool = False
    stderr: str = ""
    children: list[RunReport] = Field(default_factory=list)
    children_omitted: int = 0
    """Children whose reports were not kept here (a tree keeps 256; runner/flows.py)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unsandboxed(self) -> bool:
        """The component ran as a host process, with no sandbox at all (``--process``, or a
        configured flow with a ``command`` and no ``image``): said plainly, since its
        result looks like any other."""
        return self.backend == "process"
