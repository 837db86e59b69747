"""A local subprocess backend: no isolation, for development, tests and inside a pod.
The component leads its own session, so a kill of its group reaches what it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from runner.sandbox.base import LaunchRequest, RunningComponent, SandboxFacts
from runner.sandbox.errors import CommandNotFound
from runner.sandbox.pipes import Pipes
from runner.sandbox.registry import SandboxSpec, StopGraces

_SCRATCH_PREFIX = "flow-runner-scratch-"


class ProcessComponent:
    """A component running as a local process group, its stdio pipes of our own."""

    def __init__(
        self, process: Process, pipes: Pipes, attachment_paths: Mapping[str, str], scratch_path: str
    ) -> None:
        assert pipes.stdin and pipes.stdout and pipes.stderr
        self._process = process
        self.stdin: ByteSendStream = pipes.stdin
        self.stdout: ByteReceiveStream = pipes.stdout
        self.stderr: ByteReceiveStream = pipes.stderr
        self.attachment_paths = attachment_paths
        self.scratch_path = scratch_path
        self.facts = SandboxFacts()

    async def wait(self) -> int:
        code = await self._process.wait()
        self.facts.exit_code = 128 - code if code < 0 else code
        return self.facts.exit_code

    async def kill(self) -> None:
        if self._process.returncode is None:
            self.facts.killed_by_host = True
            self.kill_group()

    def kill_group(self) -> None:
        """SIGKILL the process group we created (the child leads its own session)."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)


def open_process(spec: SandboxSpec) -> tuple[ProcessSandbox, StopGraces]:
    """The ``process`` backend's factory: ``spec.command`` is the argv."""
    if not spec.command:
        raise CommandNotFound("the process backend needs a command: exec --process -- COMMAND")
    return ProcessSandbox(spec.command, env=spec.env, cwd=spec.cwd), StopGraces()


class ProcessSandbox:
    """Launch a component as ``argv`` with the given environment and working directory."""

    name = "process"

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        if not argv:
            raise ValueError("the process backend needs a command: exec --process -- COMMAND")
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd

    async def image_source(self) -> None:
        """A host command runs no image: there are no image files to read."""
        return None

    def planned_paths(self, request: LaunchRequest) -> tuple[Mapping[str, str], str]:
        """Host paths as they are; a private scratch as long as its ``mkdtemp`` name."""
        private = Path(tempfile.gettempdir(), _SCRATCH_PREFIX + "x" * 8)
        scratch = request.scratch_dir or private
        return {a.name: str(a.host_path) for a in request.attachments}, str(scratch)

    @asynccontextmanager
    async def launch(self, request: LaunchRequest) -> AsyncIterator[RunningComponent]:
        """Start the process; on exit kill its group if needed and remove private scratch."""
        scratch = request.scratch_dir
        private = scratch is None
        if scratch is None:
            scratch = Path(tempfile.mkdtemp(prefix=_SCRATCH_PREFIX))
        started = time.monotonic()
        component: ProcessComponent | None = None
        pipes = Pipes()
        try:
            await pipes.open()
            stdin, stdout, stderr = pipes.child
            try:
                process = await anyio.open_process(
                    self.argv,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=stderr,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except OSError as exc:  # missing, not executable, a directory, ...
                raise CommandNotFound(
                    f"cannot start {self.argv[0]!r}: {exc.strerror}; give the path of an "
                    "executable (exec --process -- COMMAND [ARGS...])"
                ) from exc
            finally:
                pipes.started()  # the child's ends are the child's now (or nobody's)
            paths = {a.name: str(a.host_path) for a in request.attachments}
            component = ProcessComponent(process, pipes, paths, str(scratch))
            component.facts.timings["start"] = time.monotonic() - started
            yield component
        finally:
            with anyio.CancelScope(shield=True):
                cleanup = time.monotonic()
                pipes.close()
                if component is not None:
                    component.kill_group()  # also reaches what the component started
                    await component.wait()
                    await component._process.aclose()
                    component.facts.timings["cleanup"] = time.monotonic() - cleanup
                if private:
                    shutil.rmtree(scratch, ignore_errors=True)
