"""The batch's sandboxes: one per (image, command, profile), built once per batch (not per
run: runner CPU taken from the engine) and asked for its image once (:class:`PinnedSandbox`).

Each runs the image *id* its rows' keys were planned with, so a tag rebuilt while the
batch runs changes neither what the rows run nor their keys. A tag that named no image
stays a tag, refused run by run as ``IMAGE_MISSING``.
"""

from __future__ import annotations

from typing import Any

from runner.sandbox.base import ImageSource, Sandbox
from runner.sandbox.profiles import SandboxProfile
from runner.sandbox.registry import SandboxSpec, StopGraces, open_sandbox

from .keys import ImageIds
from .manifest import Row


class PinnedSandbox:
    """A backend's sandbox whose image source, once found, is kept (a failure is not);
    every other attribute is the backend's."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self._source: ImageSource | None = None

    async def image_source(self) -> ImageSource | None:
        if self._source is None:
            self._source = await self._sandbox.image_source()
        return self._source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sandbox, name)


class Sandboxes:
    """The image rows' sandboxes of one batch, by (image, command, profile)."""

    def __init__(self, image_ids: ImageIds) -> None:
        self._image_ids = image_ids
        self._built: dict[
            tuple[str, tuple[str, ...] | None, int],
            tuple[SandboxProfile, PinnedSandbox, StopGraces],
        ] = {}
        """Keyed by the profile's id, so each holds its profile (the id stays its own)."""

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
            built = self._built[key] = (row.profile, PinnedSandbox(sandbox), graces)
        return built[1], built[2]
