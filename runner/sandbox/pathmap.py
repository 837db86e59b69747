"""Bind sources as the engine's host sees them, when flow-runner itself runs in a container.

The engine resolves a bind source on *its* host. So a path is judged on the runner's
view and only the source handed to the engine is translated, by the longest bind-mount
prefix among the runner container's mounts. A path no bind mount covers, or inside a
named volume (no subpaths), is refused. Outside a container the map is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from runner.sandbox.attachments import AttachmentError
from runner.sandbox.own_container import in_container, own_container_id


class PathNotCovered(AttachmentError):
    """A path the engine cannot see at the same place (or at all) from its host."""


@dataclass(frozen=True)
class HostSource:
    """What to give the engine as a mount's source: a host path, or a named volume."""

    type: Literal["bind", "volume"]
    source: str


@dataclass(frozen=True)
class RunnerMount:
    """One of the runner container's mounts: where it is inside, what it is outside."""

    destination: PurePosixPath
    type: str
    source: str
    """The host path of a bind mount; the volume's name for a named volume."""


@dataclass(frozen=True)
class PathMap:
    """The runner's view of paths -> the engine host's; the identity outside a container."""

    in_container: bool = False
    container_id: str | None = None
    """The runner's container on this engine (``None``: paths are taken as they are)."""
    mounts: tuple[RunnerMount, ...] = ()
    sees_engine_pids: bool = True
    """Whether a pid the engine reports names the same process here: only then can a
    started container's mounts be looked at through ``/proc/<pid>/root``."""

    @classmethod
    def from_self(cls, api: Any) -> PathMap:
        """The map of the container this process runs in (``api``: docker-py's)."""
        container_id = own_container_id()
        if container_id is None:
            return cls(in_container=in_container())
        import docker.errors

        try:
            info = api.inspect_container(container_id)
        except docker.errors.NotFound:
            return cls(in_container=True)
        mounts = tuple(
            RunnerMount(
                PurePosixPath(m["Destination"]),
                m.get("Type", ""),
                m.get("Name") if m.get("Type") == "volume" else m.get("Source", ""),
            )
            for m in info.get("Mounts") or ()
        )
        pid_mode = (info.get("HostConfig") or {}).get("PidMode", "")
        return cls(True, container_id, mounts, sees_engine_pids=pid_mode == "host")

    def translate(self, path: Path) -> HostSource:
        """The source the engine must mount for ``path`` (absolute, resolved) here."""
        if self.container_id is None:
            return HostSource("bind", str(path))
        inner = PurePosixPath(path)
        covering = [m for m in self.mounts if _within(inner, m.destination)]
        if not covering:
            raise PathNotCovered(
                f"{path} cannot be attached: no bind mount of the runner's container "
                f"({self.container_id[:12]}) covers it, so the engine's host does not have "
                f"it; start the runner with `-v HOSTPATH:{inner}` (or a directory above "
                "it), HOSTPATH being where the engine's host has it"
            )
        mount = max(covering, key=lambda m: len(m.destination.parts))
        rest = inner.relative_to(mount.destination)
        if mount.type == "bind":
            return HostSource("bind", str(PurePosixPath(mount.source) / rest))
        if mount.type == "volume" and mount.source:
            if rest == PurePosixPath("."):
                return HostSource("volume", mount.source)
            raise PathNotCovered(
                f"{path} cannot be attached: it is inside the named volume "
                f"{mount.source!r} (mounted at {mount.destination}), and this engine can "
                f"mount only a whole volume; attach {mount.destination} itself, or bind a "
                "host directory there instead (`-v HOSTDIR:"
                f"{mount.destination}`)"
            )
        raise PathNotCovered(
            f"{path} cannot be attached: it is on a {mount.type or 'private'} mount of the "
            f"runner's container ({mount.destination}), which the engine's host cannot "
            f"see; bind a host directory there (`-v HOSTDIR:{mount.destination}`)"
        )

    def describe(self) -> list[str]:
        """One line per mapping, for ``flow-runner doctor``."""
        if self.container_id is None:
            return ["identity: paths here are the engine's paths"]
        return [
            f"{m.destination} -> {m.type}:{m.source}"
            for m in sorted(self.mounts, key=lambda m: m.destination)
        ]


def _within(path: PurePosixPath, tree: PurePosixPath) -> bool:
    return path == tree or tree in path.parents
