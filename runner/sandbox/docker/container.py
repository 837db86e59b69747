"""A started container, seen by the host as a :class:`RunningComponent`: exit is the end
of the attach stream, confirmed by one inspect; a removed container or a lost engine is a
:class:`SandboxLost` (its :class:`Lease`); an OOM is the cgroup's verdict where it has one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from runner.sandbox.base import Attachment, SandboxFacts
from runner.sandbox.docker.attach import AttachConnection
from runner.sandbox.docker.engine import CallStalled, Engine, Lease
from runner.sandbox.docker.oom import OomWatch, watch_oom

SCRATCH_PATH = "/flow/scratch"
ATTACHMENTS_DIR = "/flow/attachments"
STOP_TIMEOUT = 10.0
"""Seconds cleanup waits for a killed container to be reported stopped before removing."""


class Container:
    """A started container: its stdio over the attach connection, wait, kill and stop."""

    def __init__(
        self,
        engine: Engine,
        lease: Lease,
        connection: AttachConnection,
        attachments: tuple[Attachment, ...],
        facts: SandboxFacts,
    ) -> None:
        self._engine = engine
        self._lease = lease
        self._connection = connection
        self._started = time.perf_counter()
        self.stdin: ByteSendStream = connection.stdin
        self.stdout: ByteReceiveStream = connection.stdout
        self.stderr: ByteReceiveStream = connection.stderr
        self.attachment_paths: Mapping[str, str] = {
            att.name: f"{ATTACHMENTS_DIR}/{att.name}" for att in attachments
        }
        self.scratch_path = SCRATCH_PATH
        self.facts = facts
        self._oom: OomWatch | None = None
        # Registering with the cgroup takes milliseconds of blocking writes: not on the loop.
        # An OOM before the watch is registered is still counted (the cgroup's own counter).
        self._watching = threading.Thread(
            target=self._watch_oom, args=(lease.container_id,), daemon=True
        )
        self._watching.start()

    def _watch_oom(self, container_id: str) -> None:
        self._oom = watch_oom(container_id)

    async def _watched(self) -> None:
        """Return once the OOM watch is registered, known impossible, or 5 s late."""
        if self._watching.is_alive():
            await anyio.to_thread.run_sync(self._watching.join, 5.0)

    async def wait(self) -> int:
        """Read the attach stream to its end (keeping unread output), then confirm exit."""
        if self.facts.exit_code is not None:
            return self.facts.exit_code
        await self._connection.drain()
        state = await self._stopped_state()
        await self._watched()
        if state["ExitCode"] == 137 and not self.facts.killed_by_host:
            # A SIGKILL nobody here sent: the OOM killer's, or another's. Ask the cgroup.
            if self._oom is not None:
                await anyio.to_thread.run_sync(self._oom.settle)
            if not state["OOMKilled"] and (self._oom is None or self._oom.verdict is not True):
                state = await self._late_oom(state)
        return self._record(state)

    async def kill(self) -> None:
        """SIGKILL the container; a no-op once it has stopped; :class:`SandboxLost` if
        it was removed or its engine is gone. A kill not answered in time (the engine
        waits for output to be taken) is made again once the attach stream is let go."""
        if self.facts.exit_code is not None:
            return
        was_killed = self.facts.killed_by_host
        self.facts.killed_by_host = True  # recorded first: 137 is read as our doing
        try:
            killed = await self._engine.kill(self._lease)
        except CallStalled:
            # The engine waits to hand over output the host does not take: let it go.
            # The first kill was sent: a container found stopped now was stopped by it.
            await self._connection.aclose()
            try:
                await self._engine.kill(self._lease)
            except CallStalled as exc:
                raise self._lease.loss(exc) from exc
            killed = True
        if not killed:
            self.facts.killed_by_host = was_killed

    async def stop(self) -> None:
        """Kill if still running and record the final state; used by cleanup."""
        if self.facts.exit_code is not None:
            return
        await self.kill()
        with anyio.move_on_after(STOP_TIMEOUT):
            state = await self._stopped_state()
            await self._watched()
            self._record(state)

    async def _inspect(self) -> dict[str, Any]:
        state: dict[str, Any] = (await self._engine.inspect(self._lease))["State"]
        return state

    async def _stopped_state(self) -> dict[str, Any]:
        """Inspect until the engine reports the container stopped (polling, backing off)."""
        delay = 0.005
        while True:
            state = await self._inspect()
            if not state["Running"]:
                return state
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def _late_oom(self, state: dict[str, Any]) -> dict[str, Any]:
        """Re-read, for up to ~3 s, a SIGKILL neither the host nor the OOM killer sent:
        the engine's OOM flag may come late, and ``docker rm -f`` (kill, then remove) is a
        loss (:class:`ContainerGone`, raised by the re-read), not a kill by a signal."""
        cgroup_can_tell = self._oom is not None and self._oom.verdict is not None
        delay = 0.05
        while delay < 2:
            await anyio.sleep(delay)
            latest = await self._inspect()
            if latest["OOMKilled"] and not cgroup_can_tell:
                return latest
            delay *= 2
        return state

    def _record(self, state: dict[str, Any]) -> int:
        """Note the stopped state in the facts (the cgroup's OOM verdict first); its exit code."""
        exit_code = self.facts.exit_code = int(state["ExitCode"])
        verdict = None if self._oom is None else self._oom.verdict
        if self._oom is None or verdict is None:
            self.facts.oom_killed = bool(state["OOMKilled"])
            self.facts.details["oom_source"] = "engine"
        else:
            self.facts.oom_killed = verdict
            self.facts.details["oom_source"] = self._oom.source
        self.facts.timings["run"] = time.perf_counter() - self._started
        return exit_code
