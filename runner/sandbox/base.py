"""The one small interface every sandbox backend offers the host.

A :class:`Sandbox` launches an invocation as a :class:`RunningComponent` (three byte
streams, ``wait``, ``kill``) and cleans up shielded on exit, so a deadline, Ctrl-C or a
crash cannot leak a process or a container. A backend knows images, never FLOW packages
(:class:`ImageSource`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

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
    """Everything a backend needs to prepare one invocation's sandbox. ``scratch_dir``:
    a host directory kept after the run; ``None``: a private one, removed at the end."""

    attachments: tuple[Attachment, ...] = ()
    scratch_dir: Path | None = None
    run_id: str = ""
    parent_run_id: str | None = None


@dataclass(frozen=True)
class DiskBreach:
    """A bounded host directory grew past its bound (``added_*``: since launch), or could
    not be measured, during a run, so the run was stopped."""

    name: str
    """``scratch`` or the attachment's name."""
    path: str
    reason: Literal["bytes", "entries", "unreadable"]
    added_bytes: int
    limit_bytes: int
    added_entries: int
    limit_entries: int
    unreadable: str = ""
    knob: str = ""
    """The profile's setting that bounds the bytes, named so a user knows what to raise."""

    def message(self) -> str:
        """One sentence for the run's error."""
        where = f"{self.name} ({self.path})"
        if self.reason == "unreadable":
            return (
                f"{where} could not be measured against its disk bound: the runner cannot "
                f"read {self.unreadable}"
            )
        if self.reason == "entries":
            return (
                f"{where} gained more than {self.limit_entries} files and directories, its "
                "bound (the sandbox profile's disk_entries: raise it, or write fewer files)"
            )
        setting = (
            f" (the sandbox profile's {self.knob}: raise it, or write less)" if self.knob else ""
        )
        return (
            f"{where} grew by {self.added_bytes} bytes, past its bound of "
            f"{self.limit_bytes} bytes{setting}"
        )

    def details(self) -> dict[str, str | int]:
        """The breach as JSON-ready error details."""
        details: dict[str, str | int] = {
            "name": self.name,
            "path": self.path,
            "reason": self.reason,
            "addedBytes": self.added_bytes,
            "limitBytes": self.limit_bytes,
            "addedEntries": self.added_entries,
            "limitEntries": self.limit_entries,
        }
        if self.unreadable:
            details["unreadable"] = self.unreadable
        return details


@dataclass
class SandboxFacts:
    """What the backend observed, filled in as the run proceeds: the one record of how
    the component ended (cleanup records it for a component it had to kill)."""

    exit_code: int | None = None
    oom_killed: bool = False
    killed_by_host: bool = False
    disk_breach: DiskBreach | None = None
    timings: dict[str, float] = field(default_factory=dict)
    details: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class ImmediateSend(Protocol):
    """A stdin that can also be written without waiting, where an answer is made."""

    def send_nowait(self, data: bytes) -> bool:
        """Write ``data`` now if that needs no wait (nor an earlier ``send``), else write
        nothing and return False. Raises as ``send`` would."""
        ...


class RunningComponent(Protocol):
    """A started component process, seen only through its stdio and lifecycle."""

    stdin: ByteSendStream
    """Protocol frames to the component; ``aclose()`` half-closes (the component sees EOF).
    Both backends' stdin is also :class:`ImmediateSend`."""
    stdout: ByteReceiveStream
    stderr: ByteReceiveStream
    attachment_paths: Mapping[str, str]
    """Attachment name → the path the component sees inside its sandbox."""
    scratch_path: str
    facts: SandboxFacts

    async def wait(self) -> int:
        """Wait for the process to exit; its exit status (128+N for signal N). Past a
        bound of untaken output this waits for ``stdout`` or ``stderr`` to be read."""
        ...

    async def kill(self) -> None:
        """Kill the process now (SIGKILL); idempotent, safe after exit."""
        ...


@dataclass(frozen=True)
class ImageEntry:
    """One entry under a path read out of an image, named relative to that path; the
    bytes of ``other`` (a symlink, a hard link, a device) are not read."""

    path: str
    kind: Literal["file", "dir", "other"]
    data: bytes = b""


class ImageSource(Protocol):
    """What a backend can read out of the image it runs, without running any of it."""

    image_id: str
    """The image's content digest: the same id is the same files."""
    labels: Mapping[str, str]

    async def files(self, path: str, *, max_bytes: int) -> list[ImageEntry] | None:
        """The entries under ``path`` (``None`` if the image has no such path); more than
        ``max_bytes`` in all raises :class:`~runner.sandbox.errors.SandboxError`."""
        ...


class Sandbox(Protocol):
    """A backend that can launch invocations; one launch per invocation."""

    name: str
    """The backend's registered name (``docker``, ``process``): the run report's ``backend``."""

    async def image_source(self) -> ImageSource | None:
        """The image this sandbox runs, to read files from; ``None`` when it runs none.
        Raises :class:`~runner.sandbox.errors.SandboxError` (a missing image, no engine)."""
        ...

    def planned_paths(self, request: LaunchRequest) -> tuple[Mapping[str, str], str]:
        """The attachment paths (name -> path) and scratch path ``request`` will get (or of
        the same JSON length), so the ``flow/run`` frame is measured before anything starts."""
        ...

    def launch(self, request: LaunchRequest) -> AbstractAsyncContextManager[RunningComponent]:
        """Prepare and start the component; on exit, kill if needed and clean up, shielded."""
        ...
