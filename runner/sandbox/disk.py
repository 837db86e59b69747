"""Disk bounds for host directories a run writes into: measured by polling, not by the kernel.

A host directory (``--scratch DIR``, a read-write attachment) has no kernel bound here
(``--storage-opt size`` needs XFS project quotas). So each is measured before the run and
then at most ``disk_poll`` seconds apart, sooner while it grows fast, and the run is
stopped once one is past its bound: a limit on a runaway, not a quota.

A walk counts at most the entries the bound allows, so planted files cost one bounded
walk. Bytes are the space allocated, hard links once; symlinks are not followed, other
filesystems not entered; an unreadable directory counts as a breach.
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
    """Allocated bytes and entries under ``root`` (excluded), at most ``max_entries``."""
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
    wanted = (
        [("scratch", scratch.host_path, profile.scratch_size, "scratch_size")] if scratch else []
    )
    if profile.attachment_quota is not None:
        quota = profile.attachment_quota
        wanted += [
            (att.name, att.host_path, quota, "attachment_quota")
            for att in attachments
            if att.access == "read-write"
        ]
    entries = profile.disk_entries
    return tuple(
        DiskBound.at_launch(name, path, size, entries, knob) for name, path, size, knob in wanted
    )


class DiskWatch:
    """A thread that checks every bound each interval and reports the first breach once
    (a thread: the backend's launch must not run the caller's block in a task group)."""

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
        """End the polling (blocking) and measure once more (what was written before a
        kill took effect counts too); the breach, if any."""
        self._stopping.set()
        self._thread.join()
        breaches = (bound.reading()[1] for bound in self._bounds)
        self.breach = next((b for b in breaches if b is not None), None) or self.breach
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


def _due(room: int, grown: int, seconds: float) -> float:
    """Half the time the growth rate over the last ``seconds`` needs to fill ``room``."""
    if grown <= 0 or seconds <= 0:
        return float("inf")
    return room / (grown / seconds) / 2
