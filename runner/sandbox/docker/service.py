"""The Docker backend's answers to callers that are not a run: a batch, ``doctor``.

:class:`DockerSandboxEngine` is the backend's
:class:`~runner.sandbox.registry.SandboxEngine`; :func:`read_through_sibling` is
``doctor``'s proof that a host path reaches a sibling container.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from runner.sandbox.docker.engine import default_engine, engine_address, engine_unavailable
from runner.sandbox.docker.http import NoAnswer
from runner.sandbox.errors import DockerSandboxError, SandboxError
from runner.sandbox.gc import sweep

if TYPE_CHECKING:
    import docker


class DockerSandboxEngine:
    """The process-wide Docker engine, as a caller of many runs asks about it."""

    def image_id(self, image: str) -> str | None:
        http = default_engine().direct()
        try:
            reply = http.ask_blocking("GET", f"/images/{quote(image, safe='/:@')}/json").reply()
            if reply.status == 404:
                return None
            info = reply.json() if reply.status == 200 else None
        except NoAnswer as exc:
            raise engine_unavailable(exc) from exc
        if not isinstance(info, dict) or not isinstance(info.get("Id"), str):
            raise DockerSandboxError(
                f"the Docker engine at {engine_address()} could not inspect image "
                f"{image!r}: {reply.status} {reply.message}"
            )
        return str(info["Id"])

    def sweep(self, runs: Collection[str] | None = None) -> list[str]:
        return sweep(runs=runs)

    def transient(self, exc: BaseException) -> bool:
        """As a :class:`SandboxError` says; else a failed connection or engine is."""
        if isinstance(exc, SandboxError):
            return exc.transient
        if isinstance(exc, ConnectionError):
            return True
        if "docker" not in sys.modules:  # nothing of docker-py ran, so nothing it raised
            return False
        import docker.errors
        import requests.exceptions

        if isinstance(exc, docker.errors.ImageNotFound):
            return False
        return isinstance(
            exc,
            docker.errors.APIError
            | requests.exceptions.ConnectionError
            | requests.exceptions.Timeout,
        )


def read_through_sibling(
    client: docker.DockerClient,
    image: str,
    source: str,
    source_type: Literal["bind", "volume"],
    target: str,
    filename: str,
) -> str:
    """What ``cat TARGET/FILENAME`` prints in a container of ``image`` mounting ``source``
    read-only at ``target`` (no network nor capabilities, this process's ids, removed
    after); a missing image or a refused mount is said instead."""
    import docker.errors
    from docker.types import Mount

    from runner.sandbox.labels import run_labels

    try:
        container = client.containers.create(
            image,
            entrypoint=["cat"],
            command=[f"{target}/{filename}"],
            user=f"{os.getuid()}:{os.getgid()}",
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mounts=[Mount(target, source, type=source_type, read_only=True)],
            labels=run_labels(f"doctor-{uuid.uuid4().hex}"),
        )
    except docker.errors.ImageNotFound:
        return f"image {image} is missing; run `make image`"
    except docker.errors.APIError as exc:
        return f"the engine refused the mount: {exc.explanation}"
    try:
        container.start()
        container.wait(timeout=30)
        return bytes(container.logs(stdout=True, stderr=True)).decode(errors="replace")
    finally:
        container.remove(force=True)
