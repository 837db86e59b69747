"""A container started ahead, without an event loop: created, attached and its start asked
for in three blocking calls, the start's answer read only when the container is wanted.

The engine takes ~150 ms to start a container; a process that asks for the start and goes
on with its own work (a cold ``exec``'s imports: :mod:`runner.cli.head_start`) has that
time back. The container is made as :func:`~runner.sandbox.docker.sandbox.prepare_pooled`
makes a pooled one (the same create body, labels and attach), so a launch claims it as one
(``PooledContainer``). Only what the engine's modules need is imported here: they are
what a run imports anyway, so importing them first costs the process nothing.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Mapping
from typing import Any

from runner.sandbox.docker.engine import create_body
from runner.sandbox.docker.http import Asked, EngineHttp, NoAnswer
from runner.sandbox.labels import Process, run_labels

ATTACH_QUERY = {"stdin": "1", "stdout": "1", "stderr": "1", "stream": "1"}


class Ahead:
    """A container whose start was asked for: its id, run id and our end of its attach
    socket; :meth:`started` reads the engine's answer."""

    def __init__(self, http: EngineHttp, config: Mapping[str, Any]) -> None:
        self.run_id = uuid.uuid4().hex
        self._http = http
        body = create_body(
            config["image"],
            config["command"],
            user=config["user"],
            labels=run_labels(self.run_id, owner=Process.current()),
            host_config=config["host_config"],
        )
        created = http.call_blocking("POST", "/containers/create", body=body)
        if created.status != 201:
            raise NoAnswer(f"create: {created.status} {created.message}")
        self.container_id = str(created.json()["Id"])
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

    def started(self) -> bool:
        """Whether the engine started it (blocking until it says)."""
        if self._start is None:
            return False
        asked, self._start = self._start, None
        try:
            return asked.reply().status in (204, 304)
        except NoAnswer:
            return False

    def remove(self) -> None:
        """Force-remove it (gone already is fine) and close our sockets. Blocking."""
        if self._start is not None:
            self._start.close()
            self._start = None
        if self.sock is not None:
            self.sock.close()
        query = {"v": "1", "force": "1"}
        try:
            self._http.call_blocking("DELETE", f"/containers/{self.container_id}", query=query)
        except NoAnswer:
            return  # its owner, this process, will be gone: the next sweep removes it


def start_ahead(config: Mapping[str, Any]) -> Ahead | None:
    """Create and attach a container of the launch configuration ``config`` (as
    :meth:`DockerSandbox.launch_config` gives it), labelled as this process's, and ask for
    its start; None where the engine is not reached directly (TLS, ssh). :class:`NoAnswer`
    if the engine would not. The engine's address is asked here, not through
    ``default_engine``, whose worker-thread limiter imports asyncio (~25 ms)."""
    http = EngineHttp.from_env()
    return None if http is None else Ahead(http, config)
