"""Running a Starter under signal handling, echoing its stderr, and printing its verdict."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer

from runner import exits
from runner.cli.app import UsageError, before_loop

if TYPE_CHECKING:
    from runner.api import Execution
    from runner.host.driver import RunControl
    from runner.json1 import JSONValue

T = TypeVar("T")

Starter = Callable[["RunControl", "Callable[[bytes], None] | None"], Awaitable["Execution"]]


def _run(start: Starter, quiet: bool) -> Execution:
    """Run under signal handling: the first SIGINT, SIGTERM or SIGHUP cancels, the second
    kills."""
    import anyio

    from runner.api import REFUSED_BEFORE_LAUNCH
    from runner.cli import head_start
    from runner.host.driver import RunControl
    from runner.package.errors import InvocationRefused, PackageError
    from runner.sandbox.errors import SandboxError

    # A flow's starter turns a ConfigError into a UsageError: runner.config stays unimported.
    refusals = (SandboxError, InvocationRefused, PackageError, UsageError)
    control = RunControl()
    echo = None if quiet else StderrEcho(sys.stderr.fileno())

    def escalate() -> None:
        if control.cancel_requested.is_set():
            control.kill()
        else:
            notice("flow-runner: cancelling (again to kill now)")
            control.cancel()

    async def work() -> Execution:
        return await start(control, None if echo is None else echo.write)

    before_loop()
    try:
        outcome = anyio.run(under_signals, work, escalate, refusals)
    finally:
        head_start.end()  # a container started ahead and not taken: gone before any output
        if echo is not None:
            echo.close()
    if isinstance(outcome, Exception):  # refused before anything ran
        raise refusal(outcome)
    if outcome.verdict.reasons[:1] == (REFUSED_BEFORE_LAUNCH,):  # reported as a refusal
        error = outcome.verdict.error
        assert error is not None
        raise UsageError(error.message, error.code, error.details)
    return outcome


REFUSAL_CODES: tuple[tuple[str, str], ...] = (
    ("ImageMissing", "IMAGE_MISSING"),
    ("RuntimeMissing", "RUNTIME_MISSING"),
    ("EngineUnavailable", "ENGINE_UNAVAILABLE"),
    ("ProfileError", "INVALID_PROFILE"),
    ("AttachmentError", "INVALID_ATTACHMENTS"),
    ("CommandNotFound", "COMMAND_NOT_FOUND"),
    ("PackageError", "INVALID_PACKAGE"),
    ("SandboxError", "SANDBOX_FAILED"),
)
"""A refusal's code by the first class in the error's MRO named here; a package's own
checks carry theirs, the command line ``INVALID_USAGE``."""


def refusal(exc: Exception) -> UsageError:
    """``exc``, raised before any container existed, as the refusal the CLI reports."""
    from runner.package.errors import InvocationRefused

    if isinstance(exc, UsageError):
        return exc
    if isinstance(exc, InvocationRefused):
        return UsageError(exc.message, exc.code)
    names = {kind.__name__ for kind in type(exc).__mro__}
    code = next((code for name, code in REFUSAL_CODES if name in names), "INVALID_USAGE")
    return UsageError(str(exc), code)


def refuse(exc: UsageError) -> NoReturn:
    """End ``exec`` refused: the error line on stdout (the shape a failed run's has), the
    message on stderr, exit status 2 (nothing ran)."""
    print_line(_error_line(exc.code, str(exc), exc.details))
    label = "" if exc.code == "INVALID_USAGE" else f"{exc.code}: "
    typer.echo(f"flow-runner: {label}{exc}", err=True)
    raise typer.Exit(exits.EXIT_USAGE)


async def under_signals(
    work: Callable[[], Awaitable[T]],
    escalate: Callable[[], None],
    refusals: tuple[type[Exception], ...],
) -> T | Exception:
    """``work()``'s result while each stop signal calls ``escalate`` (stop, then kill).
    An exception of ``refusals`` is returned, not raised, so that it does not reach the
    caller wrapped in an ``ExceptionGroup``."""
    import signal

    import anyio

    outcome: T | Exception
    # SIGHUP's default would end the process with the container still running; ignored,
    # as `nohup` asks, it lets the run go on.
    stops = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        stops.append(signal.SIGHUP)
    async with anyio.create_task_group() as tg:

        async def signals() -> None:
            with anyio.open_signal_receiver(*stops) as received:
                async for signum in received:
                    if signum == signal.SIGHUP:
                        hung_up()
                    escalate()

        tg.start_soon(signals)
        try:
            outcome = await work()
        except refusals as exc:
            outcome = exc
        tg.cancel_scope.cancel()
    return outcome


def notice(text: str) -> None:
    """A line on stderr if it can be written: the stop it announces goes on either way."""
    with suppress(OSError):
        typer.echo(text, err=True)


def hung_up() -> None:
    """Send what would go to the gone terminal to /dev/null, so that its ``EIO`` cannot
    fail the stop that follows."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            if os.isatty(fd):
                os.dup2(null, fd)
    finally:
        os.close(null)


ECHO_BUFFER = 1 << 20
"""Bytes of component stderr waiting to be echoed; what comes on top is dropped."""
PIPE_RESERVE = 16 << 10
"""Room the echo leaves free in a stderr pipe: flow-runner's own last lines (the drop
marker, the verdict) still fit when nobody reads the pipe, so they never block."""
ECHO_STALL = 0.5
"""Seconds without progress after which the echo of a finished run gives up."""


class StderrEcho:
    """The component's stderr echoed to ours without ever blocking the event loop.

    A blocking write to a stderr nobody reads would stop the whole run, its deadline
    included. So :meth:`write` only appends to a bounded buffer, and a daemon thread
    writes it to ``fd`` (on a pipe, leaving :data:`PIPE_RESERVE` free). Chunks that find
    the buffer full are dropped until it drains; then a marker line counts them.
    """

    def __init__(self, fd: int) -> None:
        import threading

        self.fd = fd
        self.pipe_size = _pipe_size(fd)
        self.pending = bytearray()
        self.dropped = 0  # bytes of the current gap: nothing is buffered until its marker
        self.midline = False  # the last byte written was not a newline
        self.closing = False
        self.progress = 0.0  # time.monotonic() of the last write that made progress
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._drain, name="stderr-echo", daemon=True)
        self.thread.start()

    def write(self, chunk: bytes) -> None:
        with self.changed:
            if self.dropped or len(self.pending) + len(chunk) > ECHO_BUFFER:
                self.dropped += len(chunk)
            else:
                self.pending += chunk
                self.changed.notify()

    def close(self) -> None:
        """Let the thread write the rest while it makes progress, then the marker."""
        import time

        with self.changed:
            self.closing = True
            self.progress = time.monotonic()
            self.changed.notify()
        while self.thread.is_alive() and time.monotonic() - self.progress < ECHO_STALL * 2:
            self.thread.join(0.05)

    def _drain(self) -> None:
        import time

        while True:
            with self.changed:
                while not (self.pending or self.dropped or self.closing):
                    self.changed.wait()
                stalled = self.closing and time.monotonic() - self.progress > ECHO_STALL
                if stalled:  # what is still buffered will not get out: part of the gap
                    self.dropped += len(self.pending)
                    self.pending.clear()
                data = bytes(self.pending[: self._room(PIPE_RESERVE)])
                gap = self.dropped if not self.pending else 0
                if not (self.pending or self.dropped):
                    return  # closing, all written
            if gap:
                data = (b"\n" if self.midline else b"") + (
                    f"[flow-runner: {gap} bytes of the component's stderr dropped here: "
                    "this stderr was not read fast enough]\n"
                ).encode()
                if self._room(0) < len(data):
                    if stalled:
                        return  # not even the reserve is left
                    time.sleep(0.02)
                    continue
            elif not data:
                time.sleep(0.02)  # the pipe is full up to the reserve
                continue
            try:
                written = os.write(self.fd, data)
            except OSError:
                return  # stderr is gone: nothing more can be said there
            self.midline = data[written - 1 : written] != b"\n"
            with self.changed:
                self.progress = time.monotonic()
                if gap:
                    self.dropped -= gap
                else:
                    del self.pending[:written]

    def _room(self, reserve: int) -> int:
        """Bytes a write may take now without blocking (on a pipe: minus ``reserve``)."""
        if self.pipe_size is None:
            return ECHO_BUFFER
        import fcntl
        import termios

        try:
            unread = int.from_bytes(fcntl.ioctl(self.fd, termios.FIONREAD, bytes(4)), "little")
        except OSError:
            return ECHO_BUFFER
        return max(self.pipe_size - unread - reserve, 0)


def _pipe_size(fd: int) -> int | None:
    """The capacity of ``fd`` if it is a pipe (Linux), else None."""
    import fcntl
    import stat

    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except (OSError, AttributeError):
        pass
    return None


def print_line(body: dict[str, JSONValue]) -> None:
    from runner import json1

    sys.stdout.buffer.write(json1.dumps(body) + b"\n")
    sys.stdout.flush()


def _error_line(code: str, message: str, details: JSONValue) -> dict[str, JSONValue]:
    body: dict[str, JSONValue] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return {"error": body}


def _verdict(execution: Execution) -> tuple[dict[str, JSONValue], int, str | None]:
    """The result line's object, the exit status, and what to say on stderr."""
    verdict = execution.verdict
    if verdict.result is not None:
        done = verdict.result["outcome"] == "done"
        return dict(verdict.result), exits.EXIT_DONE if done else exits.EXIT_CUSTOM_OUTCOME, None
    error = verdict.error
    assert error is not None
    line = _error_line(error.code, error.message, error.details)
    reasons = "; ".join(verdict.reasons)
    if execution.lost == "engine":
        note = f"flow-runner: infrastructure failure: {error.message} ({reasons})"
        return line, exits.EXIT_INFRASTRUCTURE, note
    note = f"flow-runner: run failed: {error.code}: {error.message} ({reasons})"
    return line, FAILURE_EXITS.get(error.code, exits.EXIT_FAILED), note


FAILURE_EXITS = {"DEADLINE_EXCEEDED": exits.EXIT_DEADLINE, "CANCELLED": exits.EXIT_CANCELLED}
"""The exit status of a failed run by its error's code; any other code is ``EXIT_FAILED``."""
