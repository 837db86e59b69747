"""The one small interface every sandbox backend offers the host.

The host (``runner.host.driver``) never knows whether it drives a local subprocess or a
container: it asks a :class:`Sandbox` to ``launch`` an invocation, receives a
:class:`RunningComponent` with three byte streams plus ``wait``/``kill``, and leaves the
``async with`` block whatever happens. Backends own their cleanup and run it shielded on
exit, so a deadline, Ctrl-C or a crash cannot leak a process or a container.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from anyio.abc import ByteReceiveStream, ByteSendStream

Access = Literal["read", "read-write"]


@dataclass(frozen=True)
class Attachment:
    """A host path the invocation may see under a LocalName, read-only or read-write."""

    name: str
    host_path: Path
    access: Access = "read"


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a backend needs to prepare one invocation's sandbox.

    ``scratch_dir`` is a host directory to use as scratch (kept after the run); ``None``
    asks the backend for a private scratch that it removes at the end.
    """

    attachments: tuple[Attachment, ...] = ()
    scratch_dir: Path | None = None
    run_id: str = ""
    parent_run_id: str | None = None


@dataclass
class SandboxFacts:
    """What the backend observed; filled in as the run proceeds, read for the report."""

    exit_code: int | None = None
    oom_killed: bool = False
    killed_by_host: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    details: dict[str, object] = field(default_factory=dict)


class RunningComponent(Protocol):
    """A started component process, seen only through its stdio and lifecycle."""

    stdin: ByteSendStream
    """Protocol frames to the component; ``aclose()`` half-closes (the component sees EOF)."""
    stdout: ByteReceiveStream
    stderr: ByteReceiveStream
    attachment_paths: Mapping[str, str]
    """Attachment name → the path the component sees inside its sandbox."""
    scratch_path: str
    facts: SandboxFacts

    async def wait(self) -> int:
        """Wait for the process to exit and return its exit status (128+N for signal N)."""
        ...

    async def kill(self) -> None:
        """Kill the process now (SIGKILL); idempotent, safe after exit."""
        ...


class Sandbox(Protocol):
    """A backend that can launch invocations; one launch per invocation."""

    def launch(self, request: LaunchRequest) -> AbstractAsyncContextManager[RunningComponent]:
        """Prepare and start the component; on exit, kill if needed and clean up, shielded."""
        ...
