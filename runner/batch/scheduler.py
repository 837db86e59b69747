"""The batch scheduler: plan against the store, admit runs into ``jobs`` slots, commit.

Planning keys every row of the checked manifest and queues, in one transaction, the
shard's rows without a final result for their key. A producer streams the queued rows to
the slots, preparing each image row's container ahead (:mod:`.prepare`), at most
``prepare`` beyond the runs in flight. A slot admits a row (its attempt recorded, its
deadline counting from then), runs it and commits the result before it takes the next;
a finished run's removal goes on in the background (at most ``jobs`` at once), and the
batch waits for every removal before it returns.

Stopping (Ctrl-C, SIGTERM, ``--halt now``) cancels the runs in flight with their grace,
committed as ``pending`` / ``interrupted`` to run again on resume; prepared containers not
admitted are discarded (no attempt counted). A second signal kills the runs at once;
every container is still removed (the sandbox's cleanup is shielded).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from anyio.abc import ObjectReceiveStream, TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from runner import json1
from runner.api import Execution, Invocation, execute, new_run_id
from runner.config import ConfigError, HostConfig
from runner.exits import EXIT_CANCELLED, EXIT_DONE, EXIT_FAILED, EXIT_INFRASTRUCTURE
from runner.host.driver import RunControl
from runner.package.errors import InvocationRefused, PackageError
from runner.sandbox.attachments import AttachmentError
from runner.sandbox.base import LaunchRequest
from runner.sandbox.errors import ImageMissing, SandboxError
from runner.sandbox.registry import SandboxEngine, sandbox_engine

from .keys import ImageIds, Keys, input_digest, shard_of
from .manifest import Defaults, Row, check, rows_on
from .prepare import Prepared, PreparedSandbox
from .progress import Counts, Mode, Progress, progress
from .retry import backoff, is_infrastructure_failure
from .sandboxes import Sandboxes
from .store import FAILED, INFRA_FAILED, INTERRUPTED, SUCCEEDED, RowResult, Store

if TYPE_CHECKING:
    from runner.flows import FlowHost

Rerun = Literal["none", "failed", "all"]
_Admission = tuple[Row, Prepared | None]
"""A row on its way to a slot, with its prepared launch if any."""
STDERR_TAIL = 4096
"""Characters of a run's stderr kept in its row (JUnit shows them); the report keeps more."""


@dataclass(frozen=True)
class Halt:
    """``--halt-on-failure``: ``count`` failures, or ``percent`` of the rows to run."""

    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, text: str) -> Halt:
        """``N`` or ``N%``; a ValueError names the form."""
        try:
            if text.endswith("%"):
                percent = float(text[:-1])
                if 0 < percent <= 100:
                    return cls(percent=percent)
            elif int(text) >= 1:
                return cls(count=int(text))
        except ValueError:
            pass
        raise ValueError(f"{text!r} is not a failure count or share; use e.g. 5 or 10%")

    def reached(self, failures: int, total: int) -> bool:
        if self.count is not None:
            return failures >= self.count
        assert self.percent is not None
        return failures >= max(1, math.ceil(total * self.percent / 100))


@dataclass
class BatchOptions:
    """Everything ``flow-runner batch`` takes, as the Python API takes it."""

    manifest: Path
    results: Path = Path("flow-runner-results.sqlite")
    defaults: Defaults = field(default_factory=Defaults)
    config: HostConfig | None = None
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    retries: int = 2
    rerun: Rerun = "none"
    halt: Halt | None = None
    halt_now: bool = False
    """With ``halt``: cancel the runs in flight too, not only stop admitting."""
    shard: tuple[int, int] | None = None
    """``(I, N)``: only the rows whose key falls in shard I of N."""
    progress: Mode = "auto"
    progress_every: float = 5.0
    backoff: float = 0.5
    """Seconds before the first retry; doubles with each further attempt."""
    engine: SandboxEngine | None = None
    """The engine the rows' images are looked up on and left containers swept from;
    ``None``: the Docker backend's (the process-wide engine)."""
    prepare: int | None = None
    """Containers prepared ahead of their runs (started, not yet sent ``flow/run``), at
    most this many beyond the runs in flight; ``None``: ``jobs``; 0: none."""


@dataclass
class BatchResult:
    """What the batch did; ``statuses`` counts the final statuses over the shard's rows."""

    planned: int = 0
    """Rows of the manifest (of the shard) this batch looked at."""
    queued: int = 0
    skipped: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    halted: bool = False

    @property
    def exit_status(self) -> int:
        """130 interrupted, else 5 any infra-failed, else 4 any failed (or not run after a
        halt), else 0."""
        if self.interrupted:
            return EXIT_CANCELLED
        if self.statuses.get(INFRA_FAILED):
            return EXIT_INFRASTRUCTURE
        if self.statuses.get(FAILED) or self.halted:
            return EXIT_FAILED
        return EXIT_DONE


class BatchControl:
    """Stops a batch from outside (signals): ``stop()`` gracefully, ``kill()`` at once."""

    def __init__(self) -> None:
        self.stopping = False
        self.killing = False
        self._runs: set[RunControl] = set()

    def stop(self) -> None:
        """Admit nothing more and cancel the runs in flight (grace, then kill)."""
        self.stopping = True
        for run in self._runs:
            run.cancel()

    def kill(self) -> None:
        """Kill the runs in flight now."""
        self.stopping = self.killing = True
        for run in self._runs:
            run.kill()

    def _add(self, run: RunControl) -> None:
        self._runs.add(run)
        if self.killing:
            run.kill()
        elif self.stopping:
            run.cancel()


def manifest_name(path: Path) -> str:
    """The manifest's name in the store and in JUnit: its file name without suffix."""
    return path.name.removesuffix(".jsonl").removesuffix(".json") or path.name


async def run_batch(options: BatchOptions, control: BatchControl | None = None) -> BatchResult:
    """Run a manifest (in an anyio event loop; ``control`` stops it); raises
    ManifestError / StoreError / SandboxError before any run."""
    rows = check(options.manifest, options.defaults, options.config)
    store = Store(options.results)
    try:
        store.claim()
        batch = _Batch(options, store, control or BatchControl())
        lines = await anyio.to_thread.run_sync(batch.plan, rows)
        await batch.run(lines)
        return batch.result
    finally:
        store.close()


class _Batch:
    def __init__(self, options: BatchOptions, store: Store, control: BatchControl) -> None:
        self.options = options
        self.store = store
        self.control = control
        self.result = BatchResult()
        self.counts = Counts()
        self.name = manifest_name(options.manifest)
        self._engine = options.engine or sandbox_engine("docker")
        self._flows: FlowHost | None = None
        jobs = self._jobs = max(1, options.jobs)
        ahead = self._ahead = jobs if options.prepare is None else max(0, options.prepare)
        self._lookahead = anyio.Semaphore(ahead) if ahead > 0 else None
        """Tokens for containers prepared and not yet admitted; ``None``: none prepared."""
        self._removals = anyio.Semaphore(jobs)
        """Tokens for cleanups of finished runs that nobody waits for."""
        self._prepared: set[Prepared] = set()
        self._suspects: set[str] = set()
        """Run ids whose containers may be left: looked for at the end (:meth:`_remove_left`)."""
        self._shown: Progress  # set by run, before any row
        self._image_ids = ImageIds(self._engine)
        self._sandbox = Sandboxes(self._image_ids)
        """Each row's sandbox, running the image id its key was planned with."""

    def plan(self, rows: Any) -> set[int]:
        """Key every row; queue the shard's rows without a final result for their key and
        return their line numbers (the final ones count into the result now)."""
        image_ids = self._image_ids
        key_of = Keys(image_ids, self.options.config)
        rerun, shard = self.options.rerun, self.options.shard
        lines: set[int] = set()
        with self.store.transaction():
            for row in rows:
                key = key_of(row)
                if shard is not None and shard_of(key, shard[1]) != shard[0]:
                    continue
                self.result.planned += 1
                known = self.store.known(self.name, row.id)
                if (
                    known is not None
                    and known["key"] == key
                    and known["state"] == "done"
                    and known["status"] is not None
                    and (rerun == "none" or (rerun == "failed" and known["status"] == SUCCEEDED))
                ):
                    self.result.skipped += 1
                    self._count(known["status"])
                    continue
                image_id = image_ids(row.image) if row.image is not None else None
                self.store.queue({
                    "id": row.id, "manifest": self.name, "line": row.line, "key": key,
                    "input_digest": input_digest(row), "target": row.image or f"flow {row.flow}",
                    "image_id": image_id,
                })  # fmt: skip
                lines.add(row.line)
        self.result.queued = len(lines)
        return lines

    async def run(self, lines: set[int]) -> None:
        self.counts.total = len(lines)
        if not lines:
            shown = progress(self.options.progress, self.counts)
            shown.note(
                f"nothing to run: all {self.result.skipped} row(s) have a final result "
                "for their key (--rerun failed|all runs them again)"
            )
            shown.close()
            return
        await anyio.to_thread.run_sync(self._engine.sweep)  # what dead batches or execs left
        shown = self._shown = progress(
            self.options.progress, self.counts, self.options.progress_every
        )
        # Room for every prepared row not yet admitted: the look-ahead is the semaphore's.
        send, receive = anyio.create_memory_object_stream[_Admission](max(self._jobs, self._ahead))
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(shown.show)
                async with anyio.create_task_group() as holders:
                    try:
                        async with anyio.create_task_group() as feeding:
                            feeding.start_soon(self._produce, send, lines, holders)
                            async with anyio.create_task_group() as slots:
                                for _ in range(self._jobs):
                                    slots.start_soon(self._slot, receive.clone())
                                receive.close()
                            feeding.cancel_scope.cancel()  # stopped: nothing more to prepare
                    finally:
                        for prepared in self._prepared:
                            if not prepared.taken:
                                prepared.discard()
                tg.cancel_scope.cancel()  # every container removed: the holders are done
        finally:
            try:
                if self._flows is not None:
                    await self._flows.aclose()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._remove_left()
                shown.close()
        self.result.interrupted = self.control.stopping and not self.result.halted

    async def _remove_left(self) -> None:
        """Remove, by run id, the containers of runs with an infrastructure failure and of
        flow rows' trees, now that none is in flight: a failed removal is not tried
        again, an unanswered create may have made one, and no sweep takes a live batch's
        containers."""
        if not self._suspects:
            return
        try:
            removed = await anyio.to_thread.run_sync(self._engine.sweep, self._suspects)
        except SandboxError as exc:
            self._shown.note(
                f"could not look for containers this batch left ({_first_line(str(exc))}); "
                "`flow-runner gc` removes any once the engine answers"
            )
            return
        if removed:
            self._shown.note(f"removed {len(removed)} container(s) left by runs the engine failed")

    async def _produce(
        self, send: MemoryObjectSendStream[_Admission], lines: set[int], holders: TaskGroup
    ) -> None:
        """Stream the rows to the slots, each image row's container prepared ahead, at
        most ``prepare`` not yet admitted (a token each, which the slot returns)."""
        options = self.options
        rows = rows_on(options.manifest, options.defaults, options.config, lines)
        async with send:
            for row in rows:
                if self.control.stopping:
                    return
                prepared = None
                if row.image is not None and self._lookahead is not None:
                    await self._lookahead.acquire()
                    if self.control.stopping:
                        self._lookahead.release()
                        return
                    prepared = self._prepare(row, holders)
                try:
                    await send.send((row, prepared))
                except anyio.BrokenResourceError:  # every slot has stopped
                    if prepared is not None:
                        prepared.discard()
                    return

    def _prepare(self, row: Row, holders: TaskGroup) -> Prepared:
        """Start entering the row's first launch, in a holder task of its own."""
        request = LaunchRequest(row.attachments, None, f"{new_run_id()[:8]}-{row.id}")
        # The backend's last disk measurement of read-write attachments is made on
        # leaving the launch, and belongs to the run's result: such runs wait for it.
        background = not any(att.access == "read-write" for att in row.attachments)
        prepared = Prepared(
            self._sandbox(row)[0], request, background=background, removals=self._removals,
            on_left=self._left,
        )  # fmt: skip
        self._prepared.add(prepared)

        async def hold() -> None:
            try:
                await prepared.hold()
            finally:
                self._prepared.discard(prepared)

        holders.start_soon(hold)
        return prepared

    def _left(self, request: LaunchRequest, exc: BaseException) -> None:
        """A container whose removal failed after its run's result was committed."""
        self._suspects.add(request.run_id)
        why = _first_line(str(exc))
        self._shown.note(
            f"the container of run {request.run_id} could not be removed ({why}); "
            "the batch tries again at its end, and `flow-runner gc` once the engine answers"
        )

    async def _slot(self, receive: ObjectReceiveStream[_Admission]) -> None:
        async with receive:
            async for row, prepared in receive:
                if prepared is not None:
                    assert self._lookahead is not None
                    self._lookahead.release()
                if self.control.stopping:
                    if prepared is not None:
                        prepared.discard()
                    return
                self.counts.running += 1
                try:
                    final, seconds = await self._run_row(row, prepared)
                finally:
                    self.counts.running -= 1
                self.store.finish(self.name, row.id, final, seconds=seconds)
                self._count(final.status)
                if final.status == SUCCEEDED:
                    self.counts.succeeded += 1
                elif final.status != INTERRUPTED:
                    self.counts.failed += 1
                    why = f"{final.error_code}: {_first_line(final.error_message or '')}"
                    self._shown.failure(row.id, final.status, why)
                    statuses, halt = self.result.statuses, self.options.halt
                    failures = statuses.get(FAILED, 0) + statuses.get(INFRA_FAILED, 0)
                    if halt is None or self.result.halted:
                        continue
                    if halt.reached(failures, self.counts.total):
                        self.result.halted = True
                        if self.options.halt_now:
                            self.control.stop()
                        else:
                            self.control.stopping = True

    async def _run_row(self, row: Row, prepared: Prepared | None) -> tuple[RowResult, float]:
        """Run a row's attempts, retrying infrastructure failures only, with backoff; the
        first takes the prepared launch, a retry launches afresh under a new run id."""
        started = time.monotonic()
        attempt = 0
        while True:
            run_id = prepared.request.run_id if prepared else f"{new_run_id()[:8]}-{row.id}"
            self.store.start(self.name, row.id, run_id)
            attempt += 1
            outcome = await self._attempt(row, run_id, prepared)
            infrastructure = is_infrastructure_failure(outcome, self._engine)
            if infrastructure or row.flow is not None:  # may be left: _remove_left
                self._suspects.add(run_id)  # with the runs below it that its report keeps
                reports = list(outcome.report.children) if isinstance(outcome, Execution) else []
                while reports:
                    report = reports.pop()
                    self._suspects.add(report.run_id)
                    reports += report.children
            prepared = None
            took = time.monotonic() - started
            if self.control.stopping and _cancelled(outcome):
                stopped = "the batch was stopped before the run finished"
                return RowResult(INTERRUPTED, error_code="CANCELLED", error_message=stopped), took
            if not infrastructure:
                return _final(outcome), took
            if attempt > self.options.retries or self.control.stopping:
                message = _final(outcome).error_message
                return RowResult(
                    INFRA_FAILED, error_code="INFRASTRUCTURE", error_message=message
                ), took
            self.counts.retried += 1
            self._shown.retry(row.id, attempt, _first_line(str(outcome)))
            await anyio.sleep(backoff(attempt, self.options.backoff))

    async def _attempt(
        self, row: Row, run_id: str, prepared: Prepared | None
    ) -> Execution | Exception:
        """One attempt, its deadline counting from now (not from its container's
        preparation); a prepared launch the run did not take (refused before launch) is
        discarded."""
        run = RunControl()
        self.control._add(run)
        try:
            if row.flow is not None:
                if self._flows is None:
                    from runner.flows import FlowHost

                    assert self.options.config is not None
                    self._flows = FlowHost(self.options.config)
                return await self._flows.run(
                    row.flow, row.input, deadline_seconds=row.deadline, control=run, run_id=run_id
                )
            assert row.image is not None and row.profile is not None
            sandbox, graces = self._sandbox(row)
            if prepared is not None:
                sandbox = PreparedSandbox(prepared)
            invocation = Invocation.within(
                row.deadline,
                input=row.input,
                settings=row.settings,
                launch=LaunchRequest(row.attachments, None, run_id),
            )
            return await execute(sandbox, invocation, target=row.image, graces=graces, control=run)
        except Exception as exc:  # judged below: final, retried, or infra-failed
            return exc
        finally:
            self.control._runs.discard(run)
            if prepared is not None and not prepared.taken:
                prepared.discard()

    def _count(self, status: str) -> None:
        self.result.statuses[status] = self.result.statuses.get(status, 0) + 1


def _cancelled(outcome: Execution | Exception) -> bool:
    if isinstance(outcome, Execution):
        error = outcome.verdict.error
        return error is not None and error.code == "CANCELLED"
    return True  # anything that broke while the batch stopped it: run it again on resume


def _final(outcome: Execution | Exception) -> RowResult:
    """A run's result as the store keeps it."""
    if isinstance(outcome, Execution):
        report, verdict = outcome.report, outcome.verdict
        tail = report.stderr[-STDERR_TAIL:]
        ran = RowResult(
            FAILED, exit_code=report.exit_code, stderr_tail=tail, report=report.dumps(indent=None)
        )
        if verdict.result is not None:
            output = json1.dumps(verdict.result.get("output")).decode()
            return replace(ran, status=SUCCEEDED, outcome=report.outcome, output=output)
        assert report.error is not None
        return replace(ran, error_code=report.error.code, error_message=report.error.message)
    if isinstance(outcome, InvocationRefused):
        code = outcome.code
    else:
        code = next((code for kind, code in _CODES if isinstance(outcome, kind)), "RUNNER_ERROR")
    return RowResult(FAILED, error_code=code, error_message=str(outcome))


_CODES = (
    (ImageMissing, "IMAGE_MISSING"),
    (AttachmentError, "ATTACHMENT_REFUSED"),
    (PackageError, "PACKAGE_ERROR"),
    (ConfigError, "CONFIG_ERROR"),
    (SandboxError, "SANDBOX_ERROR"),
)
"""The error codes of runs broken before they had a verdict (a refusal names its own)."""


def _first_line(text: str) -> str:
    return text.strip().partition("\n")[0][:300]
