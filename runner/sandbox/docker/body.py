"""The body of a run's ``POST /containers/create``, built without importing docker-py.

It is the JSON docker-py's ``create_container_config`` and ``create_host_config`` write
for the arguments the Docker backend passes, and a test holds the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def create_body(
    image: str,
    command: Sequence[str] | None,
    *,
    user: str,
    labels: Mapping[str, str],
    host_config: Mapping[str, Any],
) -> dict[str, Any]:
    """A container of ``image`` (``command`` ``None``: the image's own) with stdin open
    for one attach, stdout and stderr attached, no TTY, as docker-py writes it."""
    body: dict[str, Any] = {
        "User": user,
        "Tty": False,
        "OpenStdin": True,
        "StdinOnce": True,
        "AttachStdin": True,
        "AttachStdout": True,
        "AttachStderr": True,
    }
    if command is not None:
        body["Cmd"] = list(command)
    body.update(Image=image, NetworkDisabled=False, HostConfig=dict(host_config))
    body["Labels"] = dict(labels)
    return body


def bind_mount(target: str, source: str, kind: str, *, read_only: bool) -> dict[str, Any]:
    """A ``Mounts`` entry (``kind``: ``bind``, or ``volume`` for a named volume), as
    docker-py's ``Mount(target, source, type=kind, read_only=read_only)``."""
    if kind not in ("bind", "volume"):
        raise ValueError(f"a mount of a held path is a bind or a volume, not {kind!r}")
    return {"Target": target, "Source": source, "Type": kind, "ReadOnly": read_only}


def host_config(
    *,
    network_mode: str,
    read_only: bool,
    memory: int,
    nano_cpus: int,
    pids_limit: int,
    nofile: int,
    cap_drop: Sequence[str],
    cap_add: Sequence[str],
    security_opt: Sequence[str],
    init: bool,
    runtime: str,
    tmpfs: Mapping[str, str],
    mounts: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The engine's ``HostConfig`` as docker-py's ``create_host_config`` writes it (swap
    equal to ``memory``, ``nofile`` soft and hard, no log driver)."""
    config: dict[str, Any] = {
        "Memory": memory,
        "MemorySwap": memory,
        "ReadonlyRootfs": read_only,
        "NetworkMode": network_mode or "default",
    }
    if cap_add:
        config["CapAdd"] = list(cap_add)
    if cap_drop:
        config["CapDrop"] = list(cap_drop)
    config["SecurityOpt"] = list(security_opt)
    config["Ulimits"] = [{"Name": "nofile", "Soft": nofile, "Hard": nofile}]
    config["LogConfig"] = {"Type": "none", "Config": {}}
    if tmpfs:
        config["Tmpfs"] = dict(tmpfs)
    if pids_limit:
        config["PidsLimit"] = pids_limit
    config["Init"] = init
    if nano_cpus:
        config["NanoCpus"] = nano_cpus
    if runtime:
        config["Runtime"] = runtime
    config["Mounts"] = [dict(mount) for mount in mounts]
    return config
