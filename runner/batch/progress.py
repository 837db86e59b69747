"""What a batch shows while it runs: a live bar on a terminal (``rich``, imported only
then), else a plain line every few seconds, e.g. ``412/1000 succeeded=400 failed=8
retried=4 running=2 eta 3m`` (rows finished / to run), or nothing (``quiet``); failures
on lines of their own, and a closing line with the exit status and why (:func:`closing`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, Literal

import anyio

Mode = Literal["auto", "rich", "plain", "quiet"]


@dataclass
class Counts:
    """The batch's counters, shared by every display."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    running: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed

    def eta(self) -> str:
        left = self.total - self.finished
        if self.finished == 0 or left <= 0:
            return "-" if left > 0 else "0s"
        seconds = (time.monotonic() - self.started) / self.finished * left
        if seconds < 60:
            return f"{seconds:.0f}s"
        if seconds < 3600:
            return f"{seconds / 60:.0f}m"
        return f"{seconds / 3600:.1f}h"

    def tally(self) -> str:
        return (
            f"succeeded={self.succeeded} failed={self.failed} retried={self.retried} "
            f"running={self.running}"
        )

    def line(self) -> str:
        return f"{self.finished}/{self.total} {self.tally()} eta {self.eta()}"


@dataclass
class Progress:
    """Plain lines (also the base: counters and failure lines)."""

    counts: Counts
    stream: IO[str]
    every: float

    def failure(self, row_id: str, status: str, summary: str) -> None:
        self.note(f"{status.upper()} {row_id}: {summary}")

    def retry(self, row_id: str, attempt: int, summary: str) -> None:
        self.note(f"RETRY {row_id} (attempt {attempt + 1}): {summary}")

    async def show(self) -> None:
        """Print a line every ``every`` seconds until cancelled."""
        while True:
            await anyio.sleep(self.every)
            self.note(self.counts.line())

    def close(self) -> None:
        self.note(self.counts.line())

    def note(self, text: str) -> None:
        print(f"flow-runner batch: {text}", file=self.stream, flush=True)


class Quiet(Progress):
    def note(self, text: str) -> None:
        pass


class Live(Progress):
    """A rich live display on a terminal."""

    def __init__(self, counts: Counts, stream: IO[str], every: float) -> None:
        super().__init__(counts, stream, every)
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.console = Console(file=stream)
        self.bar = Progress(
            TextColumn("[bold]batch"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[counts]}"),
            TimeRemainingColumn(),
            console=self.console,
            refresh_per_second=4,
        )
        self.task: Any = self.bar.add_task("batch", total=counts.total, counts="")
        self.bar.start()

    def _update(self) -> None:
        c = self.counts
        self.bar.update(self.task, total=c.total, completed=c.finished, counts=c.tally())

    async def show(self) -> None:
        while True:
            self._update()
            await anyio.sleep(0.25)

    def close(self) -> None:
        self._update()
        self.bar.stop()

    def note(self, text: str) -> None:
        self.bar.console.print(text, markup=False, highlight=False)


def progress(
    mode: Mode, counts: Counts, every: float = 5.0, stream: IO[str] | None = None
) -> Progress:
    """The display for ``mode`` (``auto``: live on a terminal, else plain lines)."""
    out = stream or sys.stderr
    if mode == "quiet":
        return Quiet(counts, out, every)
    if mode == "rich" or (mode == "auto" and out.isatty()):
        return Live(counts, out, every)
    return Progress(counts, out, every)


def closing(
    statuses: dict[str, int],
    *,
    planned: int,
    queued: int,
    halted: bool,
    interrupted: bool,
    status: int,
) -> str:
    """The batch's last line: its rows' final statuses, its exit status and why.

    ``statuses`` counts every row looked at (``planned``), those kept from earlier runs
    included; ``queued`` of them ran now.
    """
    succeeded = statuses.get("succeeded", 0)
    failed, infra = statuses.get("failed", 0), statuses.get("infra-failed", 0)
    counts = f"succeeded={succeeded} failed={failed} infra-failed={infra}"
    kept = planned - queued
    rows = f"{planned} row(s), {queued} run now" + (
        f", {kept} kept from earlier runs" if kept else ""
    )
    if interrupted:
        why = "interrupted; the rows not finished run when the batch is run again"
    elif infra:
        why = f"{infra} row(s) failed on the engine's side; running the batch again retries them"
    elif halted:
        not_run = planned - succeeded - failed - infra
        why = f"halted by --halt-on-failure; {not_run} row(s) not run"
    elif failed:
        why = f"{failed} row(s) failed"
        if queued == 0:
            why += ", all in earlier runs (--rerun failed runs them again)"
    else:
        why = "every row succeeded"
    return f"finished: {rows}; {counts}; exit status {status}: {why}"
