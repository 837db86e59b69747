"""Disk bounds for host directories a run writes into: measured by polling, not by the kernel.

A private scratch is a tmpfs whose size and inode count the kernel enforces. A host
directory (``--scratch DIR``, a read-write attachment) has no such bound on this engine:
``--storage-opt size`` needs overlay2 on XFS with project quotas, and a loop-mounted
filesystem would need root on the host and would replace the user's directory with
another one. So the backend measures each bounded directory before the run and then every
``disk_poll`` seconds while it runs, and stops the run as soon as one has grown past its
bound. The poll comes sooner while a directory grows fast: the first walk comes at once,
each next one within half the time the growth rate measured since the last needs to reach
the bound (but at most every ``_FASTEST_POLL`` s), and the pause at most doubles from one
walk to the next, so a component writing from its start meets short pauses. What it writes
between the last walk and the kill taking effect still lands past the bound, and a burst
after a quiet spell can add up to ``disk_poll`` s of writing: this is a limit on a runaway,
not a quota a filesystem would keep. Measured on this 2-core machine, a component writing
as fast as it can (~600 MiB/s) into a 256 MiB scratch directory ended 8-47 MiB past it
(detected 1-29 MiB past, the rest written while the kill took 140-180 ms), against 20-231
MiB with a fixed 0.2 s poll.

A walk is bounded: it counts at most the entries the bound allows (plus what was there at
launch), and a directory with more entries than that is over its bound, so a component
that plants millions of files costs the host one bounded walk. Bytes are the space
allocated (``st_blocks``), a file with several links counted once; symbolic links are
not followed and other filesystems mounted below are not entered. A directory the runner
cannot read cannot be measured and counts as a breach. A walk is not atomic: a subtree
moved while it is walked may be missed by that one walk.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from runner.sandbox.base import Attachment, DiskBreach
from runner.sandbox.errors import DockerSandboxError

if TYPE_CHECKING:
    from runner.sandbox.profiles import SandboxProfile

_WALK_SHARE = 3.0
"""The pause after a walk is at least this many times the walk's own duration, so that
watching a large tree costs at most about a quarter of a core."""
_FASTEST_POLL = 0.01
"""The shortest pause between walks, however fast a directory grows."""


@dataclass(frozen=True)
class Usage:
    """What one walk found under a directory."""

    bytes: int
    entries: int
    complete: bool
    """False when the walk stopped at its entry cap."""
    unreadable: str = ""
    """A directory below that could not be read, if any."""


def measure(root: Path, max_entries: int) -> Usage:
    """Allocated bytes and entries under ``root`` (itself excluded), counting at most
    ``max_entries`` entries."""
    try:
        root_dev = os.stat(root).st_dev  # what scandir(root) lists: a link's target
    except FileNotFoundError:  # removed on the host: nothing of the run is left there
        return Usage(0, 0, complete=True)
    total = entries = 0
    linked: set[int] = set()
    pending = [os.fspath(root)]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as listing:
                for entry in listing:
                    entries += 1
                    if entries > max_entries:
                        return Usage(total, entries, complete=False)
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # removed since it was listed
                        continue
                    except OSError:  # a name too long to reach (a tree deeper than PATH_MAX)
                        return Usage(total, entries, complete=False, unreadable=entry.path)
                    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                        if info.st_ino in linked:
                            continue
                        linked.add(info.st_ino)
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode) and info.st_dev == root_dev:
                        pending.append(entry.path)
        except (FileNotFoundError, NotADirectoryError):  # removed or replaced meanwhile
            continue
        except OSError:  # no permission; a tree deeper than PATH_MAX; a loop of links
            return Usage(total, entries, complete=False, unreadable=directory)
    return Usage(total, entries, complete=True)


@dataclass(frozen=True)
class DiskBound:
    """One host directory, what it held at launch, and how much it may grow."""

    name: str
    path: Path
    limit_bytes: int
    limit_entries: int
    base_bytes: int
    base_entries: int
    knob: str
    """The sandbox profile's setting that gives ``limit_bytes``, named in a breach."""

    @classmethod
    def at_launch(
        cls, name: str, path: Path, limit_bytes: int, limit_entries: int, knob: str
    ) -> DiskBound:
        """Measure ``path`` now; refuse a directory too large to measure within the cap."""
        usage = measure(path, limit_entries)
        if not usage.complete:
            what = (
                f"cannot be read ({usage.unreadable})"
                if usage.unreadable
                else (f"already holds more than {limit_entries} entries")
            )
            raise DockerSandboxError(
                f"{name} directory {path} {what}, so its disk bound cannot be measured; "
                "use an emptier directory or raise disk_entries in the sandbox profile"
            )
        return cls(name, path, limit_bytes, limit_entries, usage.bytes, usage.entries, knob)

    def check(self) -> DiskBreach | None:
        """Measure once; the breach, or ``None`` while within the bound."""
        return self.reading()[1]

    def reading(self) -> tuple[int, DiskBreach | None]:
        """Measure once: the bytes added since launch, and the breach if any."""
        usage = measure(self.path, self.base_entries + self.limit_entries)
        added_bytes = usage.bytes - self.base_bytes
        added_entries = usage.entries - self.base_entries
        reason: Literal["bytes", "entries", "unreadable"]
        if usage.unreadable:
            reason = "unreadable"
        elif not usage.complete:
            reason = "entries"
        elif added_bytes > self.limit_bytes:
            reason = "bytes"
        else:
            return added_bytes, None
        return added_bytes, DiskBreach(
            self.name,
            str(self.path),
            reason,
            added_bytes,
            self.limit_bytes,
            added_entries,
            self.limit_entries,
            usage.unreadable,
            self.knob,
        )


def launch_bounds(
    profile: SandboxProfile, attachments: tuple[Attachment, ...], scratch: Attachment | None
) -> tuple[DiskBound, ...]:
    """The host directories of a launch that need polling, measured now (blocking)."""
    bounds = []
    if scratch is not None:
        bounds.append(
            DiskBound.at_launch(
                "scratch",
                scratch.host_path,
                profile.scratch_size,
                profile.disk_entries,
                "scratch_size",
            )
        )
    if profile.attachment_quota is not None:
        bounds.extend(
            DiskBound.at_launch(
                att.name,
                att.host_path,
                profile.attachment_quota,
                profile.disk_entries,
                "attachment_quota",
            )
            for att in attachments
            if att.access == "read-write"
        )
    return tuple(bounds)


class DiskWatch:
    """A thread that checks every bound each interval and reports the first breach once.

    A thread, not a task: the backend's launch is a context manager that must not run the
    caller's block inside a task group of its own.
    """

    def __init__(
        self,
        bounds: tuple[DiskBound, ...],
        interval: float,
        on_breach: Callable[[DiskBreach], None],
    ) -> None:
        self._bounds = bounds
        self._interval = interval
        self._on_breach = on_breach
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flow-runner-disk", daemon=True)
        self.breach: DiskBreach | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> DiskBreach | None:
        """End the polling (blocking, at most one walk) and measure once more: what was
        written in the last interval, or before a kill took effect, counts too. Returns
        the breach with the last figures, if any."""
        self._stopping.set()
        self._thread.join()
        self.breach = self._check() or self.breach
        return self.breach

    def _run(self) -> None:
        begun = time.monotonic()
        last = [(begun, 0)] * len(self._bounds)  # each bound's last (time, added bytes)
        pause = _FASTEST_POLL  # the growth rate is not known yet
        while not self._stopping.wait(pause):
            started = time.monotonic()
            due = self._interval
            for i, bound in enumerate(self._bounds):
                added, breach = bound.reading()
                if breach is not None:
                    self.breach = breach
                    self._on_breach(breach)
                    return
                now = time.monotonic()
                due = min(
                    due, _due(bound.limit_bytes - added, added - last[i][1], now - last[i][0])
                )
                last[i] = (now, added)
            walked = time.monotonic() - started
            pause = max(_FASTEST_POLL, _WALK_SHARE * walked, min(due, 2 * pause))

    def _check(self) -> DiskBreach | None:
        for bound in self._bounds:
            breach = bound.check()
            if breach is not None:
                return breach
        return None


def _due(room: int, grown: int, seconds: float) -> float:
    """Seconds until the next walk should come: half the time the growth rate measured
    over the last ``seconds`` needs to fill the ``room`` left (no limit while not growing)."""
    if grown <= 0 or seconds <= 0:
        return float("inf")
    return room / (grown / seconds) / 2
