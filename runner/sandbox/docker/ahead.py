"""A container started ahead, without an event loop: created, attached and its start asked
for in three blocking calls, the start's answer read only when the container is wanted.

The engine takes ~150 ms to start a container; a process that asks for the start and goes
on with its own work (a cold ``exec``'s imports: :mod:`runner.cli.head_start`) has that
time back. The warm runner's pool makes its containers with it too
(:func:`~runner.sandbox.docker.sandbox.prepare_pooled`), so a launch claims either the same
way (``PooledContainer``). Only what the engine's modules need is imported here: they are
what a run imports anyway, so importing them first costs the process nothing.

What it is asked to start comes from a record a process wrote earlier, so it starts only
a configuration no looser than the shipped profiles' security settings (:func:`startable`).
"""

from __future__ import annotations

import contextlib
import re
import socket
import sys
import uuid
from collections.abc import Mapping
from typing import Any, Final

from runner.sandbox.docker.engine import create_body
from runner.sandbox.docker.http import Asked, EngineHttp, NoAnswer
from runner.sandbox.labels import Process, run_labels
from runner.sandbox.profile_rules import read_seccomp
from runner.sandbox.profiles import profiles_dir

ATTACH_QUERY: Final = {"stdin": "1", "stdout": "1", "stderr": "1", "stream": "1"}
START_ANSWER: Final = 5.0
"""Seconds the engine has to say it started the container; then it is given up (removed)."""

_HOST_KEYS: Final = frozenset(
    {"Memory", "MemorySwap", "ReadonlyRootfs", "NetworkMode", "SecurityOpt", "Ulimits"}
    | {"LogConfig", "Tmpfs", "PidsLimit", "Init", "Runtime", "Mounts", "CapDrop"}
)
"""The ``HostConfig`` keys ``sandbox._host_config`` writes for a launch without a host path
(and ``NanoCpus`` where the profile sets CPUs), no other."""
_TMPFS: Final = re.compile(r"rw,nosuid,nodev,size=[1-9][0-9]*,nr_inodes=[1-9][0-9]*,mode=1777")
_USER: Final = re.compile(r"[1-9][0-9]*(:[1-9][0-9]*)?")
_IMAGE_ID: Final = re.compile(r"sha256:[0-9a-f]{64}")


class Ahead:
    """A container whose start was asked for: its id, run id and our end of its attach
    socket; :meth:`refusal` reads the engine's answer."""

    def __init__(
        self, http: EngineHttp, config: Mapping[str, Any], owner: Process | None = None
    ) -> None:
        """Labelled as ``owner``'s, the process that keeps it (this one unless given)."""
        self.run_id = uuid.uuid4().hex
        self._http = http
        body = create_body(
            config["image"],
            config["command"],
            user=config["user"],
            labels=run_labels(self.run_id, owner=owner),
            host_config=config["host_config"],
        )
        created = http.ask_blocking("POST", "/containers/create", body=body).reply()
        found = created.json() if created.status == 201 else None
        if not isinstance(found, dict) or not isinstance(found.get("Id"), str):
            raise NoAnswer(f"create: {created.status} {created.message}")
        self.container_id: str = found["Id"]
        self.sock: socket.socket | None = None
        self._start: Asked | None = None
        try:
            self.sock, refused = http.hijack(
                f"/containers/{self.container_id}/attach", ATTACH_QUERY
            )
            if self.sock is None:
                raise NoAnswer(f"attach: {refused.status} {refused.message}")
            self._start = http.ask_blocking("POST", f"/containers/{self.container_id}/start")
        except BaseException:
            self.remove()
            raise

    def refusal(self) -> str | None:
        """None once the engine says it started it, else why not (no answer within
        :data:`START_ANSWER` seconds included). Blocking; once."""
        if self._start is None:
            return "its start was not asked for"
        asked, self._start = self._start, None
        try:
            reply = asked.reply(START_ANSWER)
        except NoAnswer as exc:
            return str(exc)
        return None if reply.status in (204, 304) else f"{reply.status} {reply.message}"

    def remove(self) -> None:
        """Force-remove it (gone already is fine) and close our sockets. Blocking."""
        if self._start is not None:
            self._start.close()
            self._start = None
        if self.sock is not None:
            self.sock.close()
        query = {"v": "1", "force": "1"}
        try:
            reply = self._http.ask_blocking(
                "DELETE", f"/containers/{self.container_id}", query=query
            )
            answer = reply.reply()
            why = None if answer.status in (204, 404, 409) else answer.message
        except NoAnswer as exc:
            why = str(exc)
        if why is not None:  # it names this process: the next sweep after it removes it
            with contextlib.suppress(OSError):
                sys.stderr.write(
                    f"flow-runner: the container started ahead, {self.container_id[:12]}, "
                    f"was not removed ({why}); `flow-runner gc` removes it once this command "
                    "has ended\n"
                )


def start_ahead(config: Mapping[str, Any]) -> Ahead | None:
    """Create and attach a container of the launch configuration ``config`` (as
    :meth:`DockerSandbox.launch_config` gives it), labelled as this process's, and ask for
    its start; None where it is not :func:`startable` or the engine is not reached directly
    (TLS, ssh). :class:`NoAnswer` if the engine would not. The engine's address is asked
    here, not through ``default_engine``, whose worker-thread limiter imports asyncio
    (~25 ms)."""
    if not startable(config):
        return None
    http = EngineHttp.from_env()
    return None if http is None else Ahead(http, config)


def startable(config: object) -> bool:
    """Whether ``config`` is a launch configuration a shipped profile could have made with
    no host path, every security setting as strict: no network, every capability dropped,
    a read-only root, no new privileges, a shipped seccomp profile, memory (no swap), pids
    and ``nofile`` limits, no log driver, tmpfs mounts private and bounded in bytes and
    files, runc or gVisor, a numeric user and group other than root's, an image by its id.
    Only the image, the command and the limits' values are the record's own."""
    if not isinstance(config, dict) or set(config) != {
        "image", "command", "user", "host_config", "source"
    }:  # fmt: skip
        return False
    host, command = config["host_config"], config["command"]
    return (
        isinstance(config["image"], str)
        and _IMAGE_ID.fullmatch(config["image"]) is not None
        and (
            command is None
            or (isinstance(command, list) and all(isinstance(w, str) for w in command))
        )
        and isinstance(config["user"], str)
        and _USER.fullmatch(config["user"]) is not None
        and isinstance(host, dict)
        and _strict(host)
    )


def _strict(host: dict[str, Any]) -> bool:
    """The ``HostConfig`` part of :func:`startable`."""
    keys = set(host)
    limits = [host.get(name) for name in ("Memory", "MemorySwap", "PidsLimit")]
    tmpfs = host.get("Tmpfs")
    ulimits = host.get("Ulimits")
    return (
        _HOST_KEYS <= keys <= _HOST_KEYS | {"NanoCpus"}
        and host["NetworkMode"] == "none"
        and host["Mounts"] == []
        and host["CapDrop"] == ["ALL"]
        and host["ReadonlyRootfs"] is True
        and host["LogConfig"] == {"Type": "none", "Config": {}}
        and host["Runtime"] in ("runc", "runsc")
        and isinstance(host["Init"], bool)
        and all(type(value) is int and value > 0 for value in limits)
        and host["MemorySwap"] == host["Memory"]
        and ("NanoCpus" not in host or (type(host["NanoCpus"]) is int and host["NanoCpus"] > 0))
        and isinstance(ulimits, list)
        and len(ulimits) == 1
        and isinstance(ulimits[0], dict)
        and set(ulimits[0]) == {"Name", "Soft", "Hard"}
        and ulimits[0]["Name"] == "nofile"
        and type(ulimits[0]["Soft"]) is int
        and ulimits[0]["Soft"] > 0
        and ulimits[0]["Soft"] == ulimits[0]["Hard"]
        and isinstance(tmpfs, dict)
        and set(tmpfs) <= {"/tmp", "/dev/shm", "/flow/scratch"}
        and all(isinstance(o, str) and _TMPFS.fullmatch(o) for o in tmpfs.values())
        and host["SecurityOpt"] in [["no-new-privileges", f"seccomp={text}"] for text in _seccomp()]
    )


def _seccomp() -> list[str]:
    """The shipped seccomp profiles' texts, as a profile naming one carries it."""
    try:
        return [read_seccomp(path) for path in sorted(profiles_dir().glob("seccomp-*.json"))]
    except (OSError, ValueError):
        return []
