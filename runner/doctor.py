"""``flow-runner doctor``: what this runner would drive, and proof that its paths map.

It reports the engine, runtimes, cgroups, socket, path map and missing example images,
then proves the map for each directory given: a nonce written there must be read back by
a sibling container mounting the *translated* source, so a wrong map fails here, not
silently in a run. Each line is a :class:`Finding`; a failed one carries the fix.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNTIMES = ("runc", "runsc")
PROBE_TARGET = "/flow/doctor"
_EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
_FALLBACK_PROBE_IMAGE = "flow-runner/base:bookworm"


@dataclass(frozen=True)
class Finding:
    """One line: what was looked at, what was found, and the fix if bad."""

    name: str
    detail: str
    ok: bool = True
    fix: str = ""

    def render(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        line = f"{mark} {self.name:11} {self.detail}"
        return line if self.ok else f"{line}\n     fix: {self.fix}"


def diagnose(directories: Sequence[Path]) -> Iterator[Finding]:
    """The findings, one by one (the engine first: without it nothing else is looked at)."""
    from runner.sandbox.docker.engine import connect
    from runner.sandbox.errors import EngineUnavailable
    from runner.sandbox.pathmap import PathMap

    socket_text = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    yield _socket(socket_text)
    try:
        client = connect()
        version = client.version()
        info = client.info()
    except EngineUnavailable as exc:
        yield Finding("engine", "no answer", False, str(exc))
        return
    except Exception as exc:  # docker-py's errors for a socket we may not read
        yield Finding("engine", f"no answer ({exc})", False, _socket_fix(socket_text))
        return
    yield Finding("engine", f"Docker {version.get('Version')} (API {version.get('ApiVersion')})")
    runtimes = set(info.get("Runtimes") or {})
    for runtime in RUNTIMES:
        present = runtime in runtimes
        note = "registered" if present else "not registered (only the strict profile needs it)"
        fine = present or runtime != "runc"
        yield Finding(f"runtime {runtime}", note, fine, "reinstall the engine")
    yield Finding("cgroup", f"v{info.get('CgroupVersion', '?')} ({info.get('CgroupDriver', '?')})")
    path_map = PathMap.from_self(client.api)
    if not path_map.in_container:
        yield Finding("container", "no: flow-runner runs on the engine's host")
    elif path_map.container_id is None:
        yield Finding("container", "yes, but none of this engine's: paths are taken as they are")
    else:
        yield Finding("container", f"yes: {path_map.container_id[:12]}")
    for line in path_map.describe():
        yield Finding("path map", line)
    yield from _example_images(client)
    for directory in directories:
        yield _prove(client, path_map, directory)


def _socket(socket_text: str) -> Finding:
    if not socket_text.startswith("unix://"):
        return Finding("socket", socket_text)
    path = Path(socket_text.removeprefix("unix://"))
    try:
        info = path.stat()
    except OSError as exc:
        return Finding("socket", f"{path}: {exc.strerror}", False, _socket_fix(socket_text))
    if not stat.S_ISSOCK(info.st_mode):
        return Finding("socket", f"{path} is not a socket", False, _socket_fix(socket_text))
    groups = ",".join(str(group) for group in sorted({os.getgid(), *os.getgroups()}))
    return Finding(
        "socket", f"{path} (group {info.st_gid}; this process: uid {os.getuid()}, groups {groups})"
    )


def _socket_fix(socket_text: str) -> str:
    path = socket_text.removeprefix("unix://")
    return (
        f"mount the engine's socket (`-v /var/run/docker.sock:{path}`); in the runner image "
        "the entrypoint joins its group, and with `--user` add it: `--group-add "
        f"$(stat -c %g /var/run/docker.sock)`; on the host start an engine with `make engine`"
    )


def _example_images(client: Any) -> Iterator[Finding]:
    """The images the checkout's examples need (images/build.sh names them so)."""
    if not _EXAMPLES.is_dir():
        return
    names = sorted(
        f"flow-runner/examples-{d.name}:latest"
        if d.parent == _EXAMPLES
        else f"flow-runner/examples-{d.parent.name}-{d.name}:latest"
        for d in (*_EXAMPLES.glob("*/"), *_EXAMPLES.glob("*/*/"))
        if (d / "Dockerfile").exists()
    )
    tags = {tag for image in client.images.list() for tag in image.tags}
    missing = [name for name in names if name not in tags]
    if missing:
        yield Finding("examples", f"missing {', '.join(missing)}", False, "run `make images`")
    else:
        yield Finding("examples", f"all {len(names)} images present")


def _prove(client: Any, path_map: Any, directory: Path) -> Finding:
    """Write a nonce into ``directory`` and read it back through a sibling container."""
    from runner.sandbox.attachments import AttachmentError
    from runner.sandbox.docker.service import read_through_sibling

    name = f"prove {directory}"
    path = directory.resolve()
    if not path.is_dir():
        return Finding(name, "not a directory", False, f"create {directory} or name another")
    try:
        source = path_map.translate(path)
    except AttachmentError as exc:
        return Finding(name, "not covered", False, str(exc))
    nonce = secrets.token_hex(16)
    note = path / f".flow-runner-doctor-{nonce}"
    try:
        note.write_text(nonce)
    except OSError as exc:
        fix = "name a directory this user can write"
        return Finding(name, f"cannot write there ({exc.strerror})", False, fix)
    try:  # the runner's own image when it runs in a container (the engine surely has it)
        image = _FALLBACK_PROBE_IMAGE
        if path_map.container_id:
            image = str(client.api.inspect_container(path_map.container_id)["Image"])
        seen = read_through_sibling(
            client, image, source.source, source.type, PROBE_TARGET, note.name
        )
    finally:
        note.unlink(missing_ok=True)
    where = f"{source.type}:{source.source}"
    if seen.strip() == nonce:
        return Finding(name, f"a sibling read the nonce back from {where}")
    return Finding(
        name,
        f"a sibling mounting {where} did not find the nonce ({seen.strip()[:200]!r})",
        False,
        "mount the directory into the runner's container at the path it has here, "
        "from the host path the engine sees (`-v HOSTDIR:DIR`)",
    )
