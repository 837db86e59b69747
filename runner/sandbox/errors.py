"""Errors a sandbox backend raises (here, so callers need not import docker-py): a
:class:`SandboxError` *before* anything runs (fix the set-up); a :class:`SandboxLost`
*after* the container was created (the run failed: judged and reported, not refused).
"""

from __future__ import annotations

from typing import Literal


class SandboxError(RuntimeError):
    """A backend could not prepare its sandbox; the message names the cause and the fix."""

    transient: bool = True
    """Whether the same invocation may get past it when tried again (a batch retries it);
    ``False`` for a cause met every time (a missing image, a bad profile)."""


class ProfileError(SandboxError, ValueError):
    """A sandbox profile could not be found, read or validated."""

    transient = False


class CommandNotFound(SandboxError):
    """The process backend's command cannot be started (missing, not executable)."""

    transient = False


class FilesTooLarge(SandboxError):
    """Files read out of an image exceed the caller's bound."""

    transient = False


class DockerSandboxError(SandboxError):
    """The Docker backend could not prepare, run or clean up a container."""


class EngineUnavailable(DockerSandboxError):
    """No Docker engine answers."""


class ImageMissing(DockerSandboxError):
    """The image is not on the engine (flow-runner never pulls)."""

    transient = False


class RuntimeMissing(DockerSandboxError):
    """The profile's container runtime (e.g. gVisor's runsc) is not registered."""

    transient = False


class SandboxLost(RuntimeError):
    """A created container, or the engine running it, went away during the run.

    ``step``: the launch step that noticed it; ``seconds``: since the container's
    creation; ``container_left``: cleanup could not remove it.
    """

    what: Literal["container", "engine"]
    reason: str
    """One line for the report's reasons."""

    def __init__(self, message: str, *, container_id: str, step: str, seconds: float) -> None:
        super().__init__(message)
        self.container_id = container_id
        self.step = step
        self.seconds = seconds
        self.container_left = False


class ContainerGone(SandboxLost):
    """The run's container was removed by someone else (``docker rm -f``, a wrong gc)."""

    what = "container"
    reason = "the container was removed by someone else"


class EngineLost(SandboxLost):
    """The engine failed or stopped answering after the run's container was created:
    not the component's failure; a retry may succeed, ``flow-runner gc`` removes what
    was left."""

    what = "engine"
    reason = "the Docker engine failed or went away"
