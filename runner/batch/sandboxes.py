"""The batch's sandboxes: one per image, command and profile, pinned to the planned image.

A batch of 100,000 rows has a handful of distinct (image, command, profile) triples, and
building a sandbox (the backend looked up among the installed entry points) or asking the
engine for its image on every run is runner CPU taken from the engine on a loaded
machine. So each triple's sandbox is built once per batch, and the image it runs is asked
of the engine once (:class:`PinnedSandbox`).

Each sandbox runs the image *id* the tag resolved to when the batch was planned (the id
its rows' invocation keys name), not the tag: a tag rebuilt while the batch runs changes
neither what the batch's remaining rows run nor what their keys say, and the next batch
(which resolves the tag afresh) gets new keys and runs them again. A tag that named no
image when planned stays a tag, so each run refuses it with the engine's own
``ImageMissing`` (``IMAGE_MISSING``).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from runner.sandbox.base import ImageSource, LaunchRequest, RunningComponent, Sandbox
from runner.sandbox.profiles import SandboxProfile
from runner.sandbox.registry import SandboxSpec, StopGraces, open_sandbox

from .keys import ImageIds
from .manifest import Row


class PinnedSandbox:
    """A backend's sandbox whose image source is asked for once and then kept.

    The first answer is kept (a failure is not: a missing image is refused run by run);
    every other attribute is the backend's.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self._source: ImageSource | None = None
        self.name = sandbox.name

    async def image_source(self) -> ImageSource | None:
        if self._source is None:
            self._source = await self._sandbox.image_source()
        return self._source

    def planned_paths(self, request: LaunchRequest) -> tuple[Mapping[str, str], str]:
        return self._sandbox.planned_paths(request)

    def launch(self, request: LaunchRequest) -> AbstractAsyncContextManager[RunningComponent]:
        return self._sandbox.launch(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sandbox, name)


class Sandboxes:
    """The image rows' sandboxes of one batch, by (image, command, profile)."""

    def __init__(self, image_ids: ImageIds) -> None:
        self._image_ids = image_ids
        self._built: dict[tuple[str, tuple[str, ...] | None, int], _Built] = {}

    def __call__(self, row: Row) -> tuple[Sandbox, StopGraces]:
        """The row's sandbox and its stop graces (built on first use, from the registry)."""
        assert row.image is not None and row.profile is not None
        key = (row.image, row.command, id(row.profile))
        built = self._built.get(key)
        if built is None:
            spec = SandboxSpec(
                "docker",
                image=self._image_ids.planned(row.image),
                command=row.command,
                profile=row.profile,
            )
            sandbox, graces = open_sandbox(spec)
            built = self._built[key] = _Built(row.profile, PinnedSandbox(sandbox), graces)
        return built.sandbox, built.graces


@dataclass(frozen=True)
class _Built:
    """One built sandbox; holds its profile so the ``id`` in its key stays that profile's."""

    profile: SandboxProfile
    sandbox: PinnedSandbox
    graces: StopGraces
