"""What ``k8s job`` and ``k8s batch`` check of a component image before rendering its pod.

The wrapper brings its own interpreter and libc, so the image needs only a command (the
pod's command replaces ENTRYPOINT and CMD, so they must be named in the pod) and the
wrapper's processor architecture, checked from inspect documents where a local engine
has the images; what could not be read is said, not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .manifests import RenderError


@dataclass(frozen=True)
class ImageFacts:
    """What an image's inspect document says that a pod depends on."""

    command: tuple[str, ...]
    """ENTRYPOINT then CMD: what the container would run."""
    package: str | None
    """The ``flow.package`` label: where the image keeps its FLOW package."""
    platform: str
    """``OS/ARCHITECTURE[/VARIANT]``, as the engine reports it."""

    @classmethod
    def of(cls, info: dict[str, Any]) -> ImageFacts:
        config = info.get("Config") or {}
        command = tuple((config.get("Entrypoint") or []) + (config.get("Cmd") or []))
        platform = "/".join(
            str(part) for part in (info.get("Os"), info.get("Architecture"), info.get("Variant"))
            if part
        )  # fmt: skip
        return cls(command, (config.get("Labels") or {}).get("flow.package"), platform)


def component_command(
    image: str,
    command: tuple[str, ...],
    facts: ImageFacts | None,
    why_not: str | None,
) -> tuple[tuple[str, ...], str | None]:
    """The component's command and the image's package label (``None`` if unread); with
    no ``facts`` (``why_not`` says why) the command must be named."""
    if facts is None:
        if not command:
            raise RenderError(
                f"{image!r}: name the component's command after the image (k8s job IMAGE "
                f"-- COMMAND ...); it could not be read from a local engine ({why_not})"
            )
        return command, None
    if command:
        return command, facts.package
    if not facts.command:
        raise RenderError(
            f"{image!r} has no ENTRYPOINT or CMD: nothing to run; name the component's "
            "command after the image (k8s job IMAGE -- COMMAND ...)"
        )
    return facts.command, facts.package


def platform_problem(
    image: str, facts: ImageFacts, runner_image: str, wrapper: ImageFacts
) -> str | None:
    """Why the wrapper of ``runner_image`` cannot run in ``image``'s container, if so."""
    if not facts.platform or not wrapper.platform or facts.platform == wrapper.platform:
        return None
    if facts.platform.split("/")[:2] == wrapper.platform.split("/")[:2]:
        return None  # a variant (arm64/v8) the engine reports for one and not the other
    return (
        f"{image!r} is built for {facts.platform}, and the wrapper in {runner_image!r} for "
        f"{wrapper.platform}: a pod runs both in one container; name a runner image built "
        f"for {facts.platform} (--runner-image), or use a {wrapper.platform} build of the image"
    )


def unchecked(image: str, why_not: str) -> str:
    """The note for an image that could not be inspected."""
    return (
        f"{image!r} was not inspected ({why_not}): not checked that it has the command and "
        "the processor architecture of the wrapper; the pod fails at its start if not"
    )
