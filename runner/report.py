"""RunReport: what happened in one run, for people (`--report FILE`) and for machines.

The reasons stand next to the verdict, so a failed run says why without re-running it.
An output only, so plain frozen dataclasses written with the standard library's ``json``:
members in field order, ``unsandboxed`` last, text as UTF-8. A float under 1e-4 is spelled
``0.00001`` / ``1.5e-6`` (serde_json's spelling, which existing report files keep), not
``repr``'s ``1e-05`` / ``1.5e-06``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from runner.json1 import JSONValue


@dataclass(frozen=True)
class ReportedError:
    """A Run failure: a wire code or PROTOCOL_ERROR / CHANNEL_LOST."""

    code: str
    message: str
    details: JSONValue = None


@dataclass(frozen=True)
class SandboxLoss:
    """The run's container, or the engine running it, went away during the run."""

    what: Literal["container", "engine"]
    """``container``: removed by someone else, the run's failure (exit 4); ``engine``: it
    failed or stopped answering, an infrastructure failure (exit 5: a retry may succeed)."""
    step: str
    """The launch step that noticed it: attach, start, run or cleanup."""
    seconds: float
    """When it was noticed, from just before the container was created."""
    container_id: str
    container_left: bool
    """True if cleanup could not remove the container: the next ``flow-runner gc`` does."""


@dataclass(frozen=True)
class ReportedPackage:
    """The FLOW package a run was held to (settings, attachments, input, result, ports)."""

    name: str
    digest: str
    source: str
    """The image id it was read from, or the host directory (``--package DIR``)."""


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """One run, judged; its fields in the order its JSON shows them."""

    run_id: str
    target: str
    backend: str
    """The sandbox backend's registered name (``docker``, ``process``, a plugin's)."""
    package: ReportedPackage | None = None
    """The package the run was held to; ``null``: nothing was checked against one."""
    status: Literal["succeeded", "failed"]
    outcome: str | None = None
    error: ReportedError | None = None
    reasons: list[str] = field(default_factory=list)
    exit_code: int | None = None
    oom_killed: bool = False
    host_kill: str | None = None
    condition: str | None = None
    lost: SandboxLoss | None = None
    timings: dict[str, float] = field(default_factory=dict)
    pooled: bool = False
    """The component ran in a container the warm runner's pool had started ahead."""
    bytes_from_component: int = 0
    bytes_to_component: int = 0
    component_requests: int = 0
    dispatches: int = 0
    stderr_bytes: int = 0
    stderr_truncated: bool = False
    stderr: str = ""
    children: list[RunReport] = field(default_factory=list)
    children_omitted: int = 0
    """Children whose reports were not kept here (a tree keeps 256; runner/flows.py)."""

    @property
    def unsandboxed(self) -> bool:
        """The component ran as a host process with no sandbox: said plainly, since its
        result looks like any other."""
        return self.backend == "process"

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object (``unsandboxed`` after the fields)."""
        members = {item.name: getattr(self, item.name) for item in fields(self)}
        for name in ("package", "error", "lost"):
            if members[name] is not None:
                members[name] = asdict(members[name])
        members["children"] = [child.as_json() for child in self.children]
        members["unsandboxed"] = self.unsandboxed
        return members

    def dumps(self, *, indent: int | None = 2) -> str:
        """The report's JSON text: indented (``--report``), or on one line (``None``)."""
        compact = (",", ":") if indent is None else None
        text = json.dumps(self.as_json(), ensure_ascii=False, indent=indent, separators=compact)
        return _SMALL_FLOAT.sub(_respelled, text) if "e-" in text else text


_SMALL_FLOAT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?)([0-9.]+)e-0?([0-9]+)')
"""A JSON string (kept as it is), or a float that ``repr`` wrote with a negative exponent."""


def _respelled(match: re.Match[str]) -> str:
    sign, mantissa, power = match.groups()
    if mantissa is None:
        return match[0]
    if power == "5":
        return f"{sign}0.0000{mantissa.replace('.', '')}"
    return f"{sign}{mantissa}e-{power}"
