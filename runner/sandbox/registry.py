"""The one place a sandbox backend is chosen and built.

Backends are registered under the entry-point group ``flow_runner.sandboxes`` (as
capability providers are under ``flow_runner.capabilities``): each name points at a
factory ``(SandboxSpec) -> (Sandbox, StopGraces)``. The CLI, configured flows, batch and
``policy verify`` all fill in a :class:`SandboxSpec` and call :func:`open_sandbox`; none
of them constructs a backend. The shipped backends are known by :data:`SHIPPED`, so a
checkout run from source (no installed metadata, or metadata of an older install) finds
them; a test keeps :data:`SHIPPED` equal to pyproject.toml's table.

A shipped name always means the shipped backend: an installed package may add backends
but not take over ``docker`` or ``process`` (which would swap the sandbox of every run
without a word). So the entry points are read only for another name, and a run on a
shipped backend never pays for reading the installed packages' metadata (about 13 ms of
a cold ``exec``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from runner.sandbox.base import Sandbox
from runner.sandbox.errors import SandboxError

if TYPE_CHECKING:
    from runner.sandbox.profiles import SandboxProfile

ENTRY_POINT_GROUP: Final = "flow_runner.sandboxes"
SHIPPED: Final = {
    "docker": "runner.sandbox.docker.sandbox:open_docker",
    "process": "runner.sandbox.process:open_process",
}


class BackendUnknown(SandboxError):
    """No backend is registered under the name asked for."""


@dataclass(frozen=True)
class StopGraces:
    """How long a component of this sandbox gets to stop (seconds): after the root's
    ``request/cancel`` and after its response, before it is killed."""

    cancel: float = 2.0
    exit: float = 2.0


@dataclass(frozen=True)
class SandboxSpec:
    """What a caller asks of a sandbox; each backend reads the fields it knows.

    ``command`` replaces an image's command (``docker``) or is the argv itself
    (``process``). ``profile`` is a profile name, a TOML path, or a loaded profile;
    ``base_dir`` is where a relative profile path starts (a configuration's directory).
    ``user`` (``UID[:GID]``) replaces the profile's user. ``client`` is a docker-py
    client to use instead of the process-wide one; ``record_engine`` asks the Docker
    backend to keep what the engine put in effect (``policy verify``).
    """

    backend: str
    image: str | None = None
    command: tuple[str, ...] | None = None
    profile: str | Path | SandboxProfile = "default"
    base_dir: Path | None = None
    cwd: Path | None = None
    env: Mapping[str, str] | None = None
    user: str | None = None
    client: Any = None
    record_engine: bool = False


Factory = Callable[[SandboxSpec], tuple[Sandbox, StopGraces]]


def open_sandbox(spec: SandboxSpec) -> tuple[Sandbox, StopGraces]:
    """Build the sandbox ``spec`` names, with its stop graces.

    Raises a :class:`SandboxError` (an unknown backend, a bad profile, a missing
    command): nothing has run yet.
    """
    return _factory(spec.backend)(spec)


def backends() -> list[str]:
    """The names of the registered backends."""
    return sorted(_registered())


def _registered() -> dict[str, str]:
    from importlib.metadata import entry_points

    found = {entry.name: entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}
    return {**found, **SHIPPED}


def _factory(name: str) -> Factory:
    target = SHIPPED.get(name)
    if target is None:
        registered = _registered()
        if name not in registered:
            raise BackendUnknown(
                f"no sandbox backend named {name!r} (installed: "
                f"{', '.join(sorted(registered))}); fix the name, or install the package "
                f"that registers it under the {ENTRY_POINT_GROUP!r} entry-point group"
            )
        target = registered[name]
    module, _, attribute = target.partition(":")
    factory: Factory = getattr(importlib.import_module(module), attribute)
    return factory


def load_spec_profile(spec: SandboxSpec) -> SandboxProfile:
    """The spec's profile, loaded (relative to ``base_dir``) and with ``user`` applied."""
    from runner.sandbox.profiles import SandboxProfile, load_profile, with_user

    profile = spec.profile
    if not isinstance(profile, SandboxProfile):
        if spec.base_dir is not None and (spec.base_dir / profile).is_file():
            profile = spec.base_dir / profile
        profile = load_profile(profile)
    return profile if spec.user is None else with_user(profile, spec.user)
