"""The one place a sandbox backend is chosen and built: a factory ``(SandboxSpec) ->
(Sandbox, StopGraces)`` registered under the entry-point group ``flow_runner.sandboxes``.
The shipped backends (:data:`SHIPPED`) cannot be taken over by an installed package, so
entry points are read only for another name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from runner.sandbox.base import Sandbox
from runner.sandbox.errors import SandboxError

if TYPE_CHECKING:
    from runner.sandbox.profiles import SandboxProfile

ENTRY_POINT_GROUP: Final = "flow_runner.sandboxes"
SHIPPED: Final = {
    "docker": "runner.sandbox.docker.sandbox:open_docker",
    "process": "runner.sandbox.process:open_process",
}
ENGINES: Final = {"docker": "runner.sandbox.docker.service:DockerSandboxEngine"}
"""The backends whose sandboxes run on an engine a caller may ask about (:class:`SandboxEngine`)."""


class BackendUnknown(SandboxError):
    """No backend is registered under the name asked for."""

    transient = False


@dataclass(frozen=True)
class StopGraces:
    """Seconds a component gets to stop before the host kills it."""

    cancel: float = 2.0
    """From the root's ``request/cancel`` to the kill."""
    exit: float = 2.0
    """From the root response (and the half-close of stdin) to the kill."""


@dataclass(frozen=True)
class SandboxSpec:
    """What a caller asks of a sandbox; each backend reads the fields it knows.
    ``profile``: a name, a TOML path (relative to ``base_dir``) or a loaded profile;
    ``user`` (``UID[:GID]``) replaces its user; ``record_engine``: for ``policy verify``."""

    backend: str
    image: str | None = None
    command: tuple[str, ...] | None = None
    profile: str | Path | SandboxProfile = "default"
    base_dir: Path | None = None
    cwd: Path | None = None
    env: Mapping[str, str] | None = None
    user: str | None = None
    record_engine: bool = False


Factory = Callable[[SandboxSpec], tuple[Sandbox, StopGraces]]


def open_sandbox(spec: SandboxSpec) -> tuple[Sandbox, StopGraces]:
    """Build the sandbox ``spec`` names, with its stop graces; a :class:`SandboxError`
    (an unknown backend, a bad profile, a missing command) before anything ran."""
    return _factory(spec.backend)(spec)


class SandboxEngine(Protocol):
    """What a caller of many sandboxes (a batch) asks of the process-wide engine behind
    them: which image a tag names, and the removal of what runs left. Blocking calls."""

    def image_id(self, image: str) -> str | None:
        """The id of the image ``image`` (a tag or an id) names now; ``None`` if the engine
        has none. Raises :class:`SandboxError` when the engine does not answer."""
        ...

    def sweep(self, runs: Collection[str] | None = None) -> list[str]:
        """Remove the sandboxes whose owner provably died (``flow-runner gc``); with
        ``runs``, instead every one this very process made for those runs or for a run
        below them (a child flow's, at any depth), once they are over. The ids removed."""
        ...

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by the backend, is a failure of the engine that the same
        call may get past when tried again (a :class:`SandboxError` says so itself)."""
        ...


def sandbox_engine(backend: str) -> SandboxEngine:
    """The engine behind ``backend``'s sandboxes; :class:`BackendUnknown` if it has none
    a caller may ask about (the ``process`` backend runs on no engine)."""
    target = ENGINES.get(backend)
    if target is None:
        raise BackendUnknown(
            f"the sandbox backend {backend!r} has no engine to ask about images and left "
            f"sandboxes (backends with one: {', '.join(sorted(ENGINES))}); run it with one of them"
        )
    engine: SandboxEngine = _load(target)()
    return engine


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
    factory: Factory = _load(target)
    return factory


def _load(target: str) -> Any:
    """The object a ``module:attribute`` entry-point value names."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def load_spec_profile(spec: SandboxSpec) -> SandboxProfile:
    """The spec's profile, loaded (relative to ``base_dir``) and with ``user`` applied."""
    from runner.sandbox.profiles import SandboxProfile, load_profile, with_user

    profile = spec.profile
    if not isinstance(profile, SandboxProfile):
        if spec.base_dir is not None and (spec.base_dir / profile).is_file():
            profile = spec.base_dir / profile
        profile = load_profile(profile)
    return profile if spec.user is None else with_user(profile, spec.user)
