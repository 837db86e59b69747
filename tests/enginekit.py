"""A second Docker engine that a test owns: started, stopped and started again at will.

Losing the engine in the middle of a run can only be tested against an engine the test
may stop; the machine's own engine serves everyone else's tests. :func:`second_engine`
starts Debian's ``dockerd`` with its own data root, exec root (so its own managed
containerd), pid file and unix socket, with no bridge and no iptables rules, under one
short temporary directory (unix socket paths are limited to 108 bytes). Whatever the test
does, the fixture stops that dockerd by its pid, then its containerd if a killed dockerd
left it, unmounts what they left mounted and removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

READY_SECONDS = 30.0
STOP_SECONDS = 30.0


class SecondEngine:
    """One dockerd under ``root``: ``start()``, ``terminate()``/``wait()``, ``start()``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "sock"
        self.host = f"unix://{self.socket}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """This environment with ``DOCKER_HOST`` naming this engine."""
        return {**os.environ, "DOCKER_HOST": self.host}

    def client(self) -> Any:
        return docker.DockerClient(base_url=self.host)

    def start(self) -> None:
        """Start dockerd on the data root (kept across restarts); return once it answers."""
        assert self.process is None, "already running"
        with (self.root / "dockerd.log").open("ab") as log:
            self.process = subprocess.Popen(
                [
                    "dockerd",
                    f"--data-root={self.root / 'data'}",
                    f"--exec-root={self.root / 'exec'}",
                    f"--pidfile={self.root / 'dockerd.pid'}",
                    f"--host={self.host}",
                    "--bridge=none",
                    "--iptables=false",
                    "--ip-masq=false",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + READY_SECONDS
        while not self._answers():
            if self.process.poll() is not None:
                raise AssertionError(f"dockerd ended at start: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"dockerd not ready in {READY_SECONDS} s: {self.log_tail()}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            with contextlib.closing(self.client()) as client:
                return bool(client.ping())
        except (docker.errors.DockerException, OSError):
            return False

    def load(self, source: Any, image: str) -> None:
        """Copy ``image`` from the ``source`` engine's client into this one."""
        loader = subprocess.Popen(
            ["docker", "-H", self.host, "load", "--quiet"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert loader.stdin is not None and loader.stderr is not None
        with loader.stdin:
            for chunk in source.images.get(image).save(named=True):
                loader.stdin.write(chunk)
        failure = loader.stderr.read()
        assert loader.wait(120) == 0, failure

    def terminate(self) -> None:
        """SIGTERM this dockerd by its pid: it closes its socket, then stops containers."""
        assert self.process is not None and self.process.poll() is None
        os.kill(self.process.pid, signal.SIGTERM)

    def wait(self, timeout: float = STOP_SECONDS) -> None:
        """Wait for the dockerd to end (SIGKILL after ``timeout``)."""
        assert self.process is not None
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def log_tail(self) -> str:
        path = self.root / "dockerd.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def close(self) -> None:
        """Stop everything this engine started and remove its directory."""
        if self.process is not None:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGTERM)
            self.wait()
        self._stop_orphaned_containerd()
        mounts = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(f"{self.root}/")
        ]
        for mount in sorted(mounts, reverse=True):  # the deepest first
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(self.root)

    def _stop_orphaned_containerd(self) -> None:
        """The managed containerd outlives a SIGKILLed dockerd; it is ours to stop."""
        pid_file = self.root / "exec" / "containerd" / "containerd.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(self.root).encode() in command:  # that pid is still our containerd
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def second_engine() -> Iterator[SecondEngine]:
    """A started second engine of the test's own; stopped and removed however it ends."""
    engine = SecondEngine(Path(tempfile.mkdtemp(prefix="fre-", dir="/tmp")))
    try:
        engine.start()
        yield engine
    finally:
        engine.close()
