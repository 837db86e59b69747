"""Errors a sandbox backend raises while preparing, running or cleaning up.

They live apart from the backends so that callers (the CLI, the API) can catch them
without importing docker-py for a run that never touches Docker.
"""

from __future__ import annotations


class SandboxError(RuntimeError):
    """A backend could not prepare its sandbox; the message names the cause and the fix."""


class CommandNotFound(SandboxError):
    """The process backend's command cannot be started (missing, not executable)."""


class DockerSandboxError(SandboxError):
    """The Docker backend could not prepare, run or clean up a container."""


class EngineUnavailable(DockerSandboxError):
    """No Docker engine answers."""


class ImageMissing(DockerSandboxError):
    """The image is not on the engine (flow-runner never pulls)."""


class RuntimeMissing(DockerSandboxError):
    """The profile's container runtime (e.g. gVisor's runsc) is not registered."""
