"""Whether the kernel's OOM killer ran in a container: read from its memory cgroup.

The engine's ``OOMKilled`` flag may come after the exit it caused, or never, so the fact
is taken from the container's memory cgroup where this process can see it (as root).

cgroup v1: two eventfds are registered through ``cgroup.event_control``: first one on a
usage threshold no cgroup reaches (signalled only at the removal), then one on
``memory.oom_control`` (signalled in the OOM path and at the removal). The kernel removes
events newest first, so once the first fires, the second's signals after the cgroup went
are its removal plus one per OOM not read in time: no timing decides the verdict.

cgroup v2: ``memory.events`` is polled while the cgroup exists; an OOM read too late is
not seen (:attr:`OomWatch.verdict` ``None``). Where the cgroup cannot be watched,
:func:`watch_oom` returns ``None``; the engine's flag decides then.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_RECHECK = 1.0
"""Seconds between reads while no signal comes: a v2 cgroup's removal may not wake a
poller, and the thread must end once the cgroup is gone."""
_SETTLE = 5.0
"""Seconds the thread waits for the removal signal once the cgroup is gone (it comes
within milliseconds; the bound only frees the thread)."""
_NEVER = 1 << 62
"""A usage threshold no cgroup reaches: an event signalled only when the cgroup goes."""


def oom_kills(text: str) -> int:
    """The ``oom_kill`` count in ``memory.oom_control`` (v1) or ``memory.events`` (v2)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    raise ValueError("no oom_kill line (a kernel before 4.13)")


class OomWatch:
    """One container's memory cgroup, watched from just after start until it is removed."""

    def __init__(self, layout: str, fds: list[int], kills: int) -> None:
        """``fds``: the counter file (``memory.oom_control`` or ``memory.events``), and on
        v1 the OOM eventfd and the removal-only eventfd; all are closed by the watch."""
        self.source = f"cgroup {layout}"
        self._fds = fds
        self._lock = threading.Lock()
        self._kills = kills
        self._notified = False
        """A v1 signal taken while the cgroup existed: the kernel ran its OOM path."""
        self._unread_signals = 0
        """v1 OOM-eventfd signals taken after the cgroup was gone (its removal, and OOMs)."""
        self._gone = False
        self._settled = False
        self._thread = threading.Thread(target=self._run, name="flow-runner-oom", daemon=True)
        self._thread.start()

    @property
    def verdict(self) -> bool | None:
        """True once an OOM was seen; False when none happened; None when this watch
        cannot tell yet (see :meth:`settle`) or at all (v2)."""
        with self._lock:
            if self._kills > 0 or self._notified or self._unread_signals >= 2:
                return True
            return False if self._settled else None

    def settle(self, timeout: float = _SETTLE + 1) -> None:
        """Block until a v1 watch has its exact verdict (the cgroup's removal signal
        came); call once the engine reports the container stopped."""
        if len(self._fds) > 1:
            self._thread.join(timeout)

    def _take(self, fd: int) -> int:
        """Signals on an eventfd since its last read (non-blocking)."""
        with contextlib.suppress(BlockingIOError):
            return int.from_bytes(os.read(fd, 8), "little")
        return 0

    def _step(self) -> None:
        """Take the v1 signals and read the count (under the lock); an unreadable count
        means the cgroup is gone."""
        signals = self._take(self._fds[1]) if len(self._fds) > 1 else 0
        try:
            text = os.pread(self._fds[0], 4096, 0).decode()
        except OSError:
            self._gone = True
            self._unread_signals += signals
            return
        self._kills = max(self._kills, oom_kills(text))
        self._notified = self._notified or signals > 0

    def _run(self) -> None:
        v1 = len(self._fds) > 1
        try:
            while not self._gone:
                if v1:
                    select.select([self._fds[1]], [], [], _RECHECK)
                else:
                    select.select([], [], [self._fds[0]], _RECHECK)
                with self._lock:
                    self._step()
            if v1:
                removed, _, _ = select.select([self._fds[2]], [], [], _SETTLE)
                with self._lock:
                    self._unread_signals += self._take(self._fds[1])
                    self._settled = bool(removed)
        finally:
            for fd in self._fds:
                os.close(fd)


def watch_oom(container_id: str, root: Path = CGROUP_ROOT) -> OomWatch | None:
    """Begin watching a started container's memory cgroup; ``None`` if it is not visible
    here, cannot be registered with, or is already gone."""
    scope = f"docker-{container_id}.scope"
    candidates = [  # where Docker puts it, per cgroup layout and driver
        ("v1", root / "memory" / "docker" / container_id),
        ("v1", root / "memory" / "system.slice" / scope),
        ("v2", root / "docker" / container_id),
        ("v2", root / "system.slice" / scope),
    ]
    for layout, directory in candidates:
        name = "memory.oom_control" if layout == "v1" else "memory.events"
        try:
            counter = os.open(directory / name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        fds = [counter]
        try:
            if layout == "v1":
                usage = os.open(directory / "memory.usage_in_bytes", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    fds += [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for _ in range(2)]
                    control = os.open(directory / "cgroup.event_control", os.O_WRONLY)
                    try:
                        os.write(control, f"{fds[2]} {usage} {_NEVER}".encode())  # first
                        os.write(control, f"{fds[1]} {counter}".encode())
                    finally:
                        os.close(control)
                finally:
                    os.close(usage)
            kills = oom_kills(os.pread(counter, 4096, 0).decode())  # an OOM before the watch
            return OomWatch(layout, fds, kills)
        except (OSError, ValueError):
            for fd in fds:
                os.close(fd)
            return None
    return None
