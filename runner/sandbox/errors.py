"""Errors a sandbox backend raises while preparing, running or cleaning up.

They live apart from the backends so that callers (the CLI, the API) can catch them
without importing docker-py for a run that never touches Docker.

Two families, because they mean different things to whoever started the run: a
:class:`DockerSandboxError` is raised *before* anything runs (no engine, no image, no
runtime: fix the set-up; nothing was run), a :class:`SandboxLost` *after* the run's
container was created, when the container or the engine goes away under it (the run has
failed; it is judged and reported, not refused).
"""

from __future__ import annotations

from typing import Literal


class SandboxError(RuntimeError):
    """A backend could not prepare its sandbox; the message names the cause and the fix."""

    transient: bool = True
    """Whether the same invocation may get past it when tried again (an engine that failed
    or did not answer: a batch retries it); each kind whose cause an invocation meets
    every time (a missing image, a bad profile) says ``False``."""


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

    ``step`` is the launch step that noticed it (``attach``, ``start``, ``run``,
    ``cleanup``), ``seconds`` how long after the container's creation that was, and
    ``container_left`` whether the container is still on the engine because cleanup,
    which runs after the loss, could not remove it.
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
    """The run's container was removed by someone else (``docker rm -f``, a wrong gc).

    A failure of the run: its component's channel was lost with the container.
    """

    what = "container"
    reason = "the container was removed by someone else"


class EngineLost(SandboxLost):
    """The engine failed or stopped answering after the run's container was created.

    An infrastructure failure, not the component's: retrying may succeed. The container
    may be left on the engine; the next ``flow-runner gc`` (or ``exec``) removes it.
    """

    what = "engine"
    reason = "the Docker engine failed or went away"
