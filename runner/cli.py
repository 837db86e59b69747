"""The ``flow-runner`` command line (typer).

Heavy modules (docker-py, anyio, pydantic) are imported inside the commands, so that
``--help`` and ``--version`` are instant and ``exec`` pays only for what it uses.

Exit status of ``exec``: 0 outcome ``done``; 3 a declared custom outcome; 124
``DEADLINE_EXCEEDED``; 130 ``CANCELLED`` by the user; 4 any other Run failure (a container
removed by someone else included); 5 infrastructure failure: the engine failed or went
away during the run, retrying may succeed; 2 bad usage or configuration (nothing was run).
Of ``batch``: 0 every run succeeded (``done`` or a declared outcome), 4 some run failed, 5
some run infra-failed, 130 interrupted, 2 bad usage (nothing ran).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
import typer.core

from runner import __version__

if TYPE_CHECKING:
    import click

    from runner.api import Execution
    from runner.batch import Halt
    from runner.config import HostConfig
    from runner.host.driver import RunControl
    from runner.json1 import JSONValue
    from runner.sandbox.registry import SandboxSpec

EXIT_DONE = 0
EXIT_USAGE = 2
EXIT_CUSTOM_OUTCOME = 3
EXIT_FAILED = 4
EXIT_INFRASTRUCTURE = 5
EXIT_DEADLINE = 124
EXIT_CANCELLED = 130

app = typer.Typer(
    help="Run FLOW Run/1 components, each in its own locked-down container.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
profiles_app = typer.Typer(help="Inspect sandbox profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")
policy_app = typer.Typer(
    help="Test what a sandbox profile enforces on this engine, runtime and kernel.",
    no_args_is_help=True,
)
app.add_typer(policy_app, name="policy")
k8s_app = typer.Typer(
    help="Render Kubernetes Jobs that run components with `flow-runner job` in their pods.",
    no_args_is_help=True,
)
app.add_typer(k8s_app, name="k8s")


class _BatchGroup(typer.core.TyperGroup):
    """``batch MANIFEST`` runs a manifest; ``batch report|merge|diff`` read stores."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


batch_app = typer.Typer(
    cls=_BatchGroup,
    help="Run many invocations from a JSON Lines manifest, with a result store.",
    no_args_is_help=True,
)
app.add_typer(batch_app, name="batch")


class UsageError(Exception):
    """Bad input from the user: reported with exit status 2 and no run."""


def _version(value: bool) -> None:
    if value:
        typer.echo(f"flow-runner {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """flow-runner: a FLOW Run/1 host."""


@app.command("exec")
def exec_(
    target: Annotated[
        list[str] | None,
        typer.Argument(
            help="IMAGE[:TAG] [COMMAND ARGS...], a flow NAME from the configuration, or with "
            "--process: COMMAND [ARGS...]. Put `--` before a command whose arguments start "
            "with a dash.",
            show_default=False,
        ),
    ] = None,
    process: Annotated[
        bool, typer.Option("--process", help="Run a local command instead of a container.")
    ] = False,
    input_: Annotated[
        str, typer.Option("--input", "-i", help="Run input: JSON text, @FILE, or - for stdin.")
    ] = "null",
    settings: Annotated[
        str, typer.Option("--settings", help="Settings object: JSON text or @FILE.")
    ] = "{}",
    attach: Annotated[
        list[str] | None,
        typer.Option("--attach", "-a", help="NAME=HOSTPATH[:ro|rw] (default ro); repeatable."),
    ] = None,
    scratch: Annotated[
        Path | None,
        typer.Option("--scratch", help="Host directory to use as scratch (kept after the run)."),
    ] = None,
    deadline: Annotated[
        str, typer.Option("--deadline", "-d", help="Time allowed, e.g. 30s, 2m, 1h, 500ms.")
    ] = "5m",
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="Sandbox profile: a name or a TOML file.")
    ] = "default",
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="Run the container as UID[:GID] instead of the profile's user, e.g. "
            "--user $(id -u):$(id -g) to write a directory you own (uid 0 needs a profile "
            "with allow_root).",
        ),
    ] = None,
    package: Annotated[
        Path | None,
        typer.Option(
            "--package",
            help="With --process: hold the run to the FLOW package in this directory "
            "(settings, attachments, input, result, ports), as an image's package holds it.",
        ),
    ] = None,
    flow: Annotated[
        str | None,
        typer.Option(
            "--flow",
            help="With --process: the local command stands in for this configured flow, "
            "with its capabilities, children, attachments, settings and limits.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="Host configuration (default: ./flow-runner.toml if present)."
        ),
    ] = None,
    allow_host_commands: Annotated[
        bool,
        typer.Option(
            "--allow-host-commands",
            help="Let ./flow-runner.toml (found, not named) define flows that run a host "
            "command with no sandbox; a file named with --config may anyway.",
        ),
    ] = False,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the run report as JSON to FILE.")
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Do not echo the component's stderr.")
    ] = False,
) -> None:
    """Run one component and print its Run result (or its error) as one JSON line."""
    request = ExecRequest(
        target or [], process, input_, settings, attach or [], scratch, deadline, profile,
        config, allow_host_commands, quiet, user, package, flow,
    )  # fmt: skip
    try:
        execution = _run(request.starter(), quiet)
    except UsageError as exc:
        _fail_usage(str(exc))
    if report is not None:
        report.write_text(execution.report.model_dump_json(indent=2) + "\n")
    raise typer.Exit(_print_verdict(execution))


Starter = Callable[["RunControl", "Callable[[bytes], None] | None"], Awaitable["Execution"]]


@dataclass(frozen=True)
class ExecRequest:
    """What ``exec`` was asked to run, checked before anything starts."""

    target: list[str]
    process: bool
    input_text: str
    settings_text: str
    attach: list[str]
    scratch: Path | None
    deadline: str
    profile: str
    config: Path | None
    allow_host_commands: bool
    quiet: bool
    user: str | None = None
    package: Path | None = None
    flow: str | None = None

    def starter(self) -> Starter:
        """Validate everything, then return the coroutine factory that runs it."""
        if not self.target:
            raise UsageError("name an image (flow-runner exec IMAGE) or a command with --process")
        if self.scratch is not None and not self.scratch.is_dir():
            raise UsageError(f"--scratch {self.scratch}: no such directory; create it first")
        self._check_process_options()
        seconds = parse_duration(self.deadline)
        value = _read_json("--input", self.input_text)
        if self.flow is not None:
            return self._stand_in_starter(value, seconds)
        host_config = self._host_config()
        if host_config is not None and self.target[0] in host_config.flows:
            return self._flow_starter(host_config, value, seconds)
        return self._component_starter(value, seconds)

    def _check_process_options(self) -> None:
        """Options that mean something for one backend only are refused for the other."""
        if not self.process:
            for name, given in (("--package", self.package), ("--flow", self.flow)):
                if given is not None:
                    raise UsageError(
                        f"{name} is for a local run (--process); an image carries its own "
                        "package, and a configured flow is run by naming it: exec NAME"
                    )
            return
        if self.user is not None:
            raise UsageError(
                "--user is for a container; a local run (--process) runs as you, unsandboxed"
            )
        if self.config is not None and self.flow is None:
            raise UsageError(
                f"--config {self.config} with --process needs --flow NAME: the local command "
                "then stands in for that flow, with its capabilities, children, attachments, "
                "settings and limits (or drop --config: a bare --process run has no slots)"
            )
        if self.package is not None and not self.package.is_dir():
            raise UsageError(f"--package {self.package}: no such directory; give the package's")

    def _stand_in_starter(self, value: JSONValue, seconds: float) -> Starter:
        """``exec --process --flow NAME [--config FILE] -- COMMAND``: the configuration's
        flow NAME, with COMMAND (a host process) in place of its image or command."""
        host_config = _load_config(self.config, self.allow_host_commands)
        assert self.flow is not None
        if host_config is None:
            raise UsageError(
                f"--flow {self.flow}: no configuration; name one with --config FILE "
                "(./flow-runner.toml is read when present)"
            )
        if self.flow not in host_config.flows:
            known = ", ".join(sorted(host_config.flows)) or "none"
            raise UsageError(
                f"--flow {self.flow}: {host_config.base_dir} defines no such flow (known: {known})"
            )
        if self.attach or self.settings_text != "{}" or self.profile != "default":
            raise UsageError(
                f"--flow {self.flow}: its settings and attachments come from the "
                "configuration; drop --settings, --attach and --profile"
            )
        original = host_config.flows[self.flow]
        package = str(self.package.resolve()) if self.package is not None else None
        stand_in = original.model_copy(
            update={"image": None, "backend": "process", "command": list(self.target),
                    "package": package}
        )  # fmt: skip
        flows = {**host_config.flows, self.flow: stand_in}
        config = host_config.model_copy(update={"flows": flows})
        return self._flow_starter(config, value, seconds, name=self.flow, check=False)

    def _host_config(self) -> HostConfig | None:
        """The configuration, where the target may be one of its flows.

        Flow names are names (the configuration refuses any other), so an image reference
        (anything with `/` or `:`) is never a flow: the file found here is then not even
        read. A name the configuration does not define is an image too.
        """
        from runner.protocol.names import is_local_name

        if self.process or (self.config is None and not is_local_name(self.target[0])):
            return None
        return _load_config(self.config, self.allow_host_commands)

    def _flow_starter(
        self,
        host_config: HostConfig,
        value: JSONValue,
        seconds: float,
        *,
        name: str | None = None,
        check: bool = True,
    ) -> Starter:
        from runner.flows import FlowHost

        extra = self.attach or self.settings_text != "{}" or self.profile != "default"
        if check and (len(self.target) > 1 or extra or self.user is not None):
            raise UsageError(
                f"{self.target[0]!r} is a configured flow: its command, settings, "
                "attachments and profile come from the configuration (its user from that "
                "profile); drop the extra arguments"
            )
        if any(flow.sandbox_backend == "docker" for flow in host_config.flows.values()):
            _sweep()
        name, scratch = name or self.target[0], self._scratch_dir()

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            host = FlowHost(host_config, stderr_sink=sink, on_host_command=_warn_unsandboxed)
            try:
                return await host.run(
                    name, value, deadline_seconds=seconds, control=control, scratch_dir=scratch
                )
            finally:
                await host.aclose()

        return start

    def _component_starter(self, value: JSONValue, seconds: float) -> Starter:
        from runner.api import Invocation, execute
        from runner.package.errors import PackageError
        from runner.package.reader import directory_package
        from runner.sandbox.attachments import parse_attachments
        from runner.sandbox.base import LaunchRequest
        from runner.sandbox.errors import SandboxError
        from runner.sandbox.registry import open_sandbox

        settings = _read_json("--settings", self.settings_text)
        if not isinstance(settings, dict):
            raise UsageError("--settings must be a JSON object, for example '{}'")
        spec = self._spec()
        try:
            attachments = parse_attachments(self.attach)
            sandbox, graces = open_sandbox(spec)
            package = directory_package(self.package) if self.package is not None else None
        except (SandboxError, PackageError) as exc:
            raise UsageError(str(exc)) from exc
        if spec.backend == "docker":
            _sweep()
        invocation = Invocation.within(
            seconds,
            input=value,
            settings=settings,
            launch=LaunchRequest(attachments, self._scratch_dir()),
            package=package,
        )
        label = " ".join(self.target) if self.process else self.target[0]

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            return await execute(
                sandbox, invocation, target=label, graces=graces, control=control,
                stderr_sink=sink,
            )  # fmt: skip

        return start

    def _spec(self) -> SandboxSpec:
        from runner.sandbox.registry import SandboxSpec

        if self.process:
            return SandboxSpec("process", command=tuple(self.target))
        command = tuple(self.target[1:]) or None
        return SandboxSpec(
            "docker", image=self.target[0], command=command, profile=self.profile, user=self.user
        )

    def _scratch_dir(self) -> Path | None:
        return self.scratch.resolve() if self.scratch else None


def _load_config(path: Path | None, allow_host_commands: bool) -> HostConfig | None:
    from runner.config import ConfigError, find_config

    try:
        return find_config(path, allow_host_commands=allow_host_commands)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def _warn_unsandboxed(flow: str, command: list[str]) -> None:
    """Said even with --quiet: the user must know a flow escaped the sandbox by design."""
    typer.echo(
        f"flow-runner: flow {flow!r} runs on the host with no sandbox: {' '.join(command)}",
        err=True,
    )


def _sweep() -> None:
    """Remove containers of runners that died (even by kill -9) before starting more."""
    from runner.sandbox.errors import DockerSandboxError
    from runner.sandbox.gc import sweep

    try:
        sweep()
    except DockerSandboxError as exc:
        raise UsageError(str(exc)) from exc


def _run(start: Starter, quiet: bool) -> Execution:
    """Run under signal handling: first SIGINT/SIGTERM cancels, the second kills."""
    import signal

    import anyio

    from runner.config import ConfigError
    from runner.host.driver import RunControl
    from runner.package.errors import InvocationRefused, PackageError
    from runner.sandbox.errors import SandboxError

    refusals = (SandboxError, ConfigError, InvocationRefused, PackageError)
    control = RunControl()
    echo = None if quiet else StderrEcho(sys.stderr.fileno())

    async def main() -> Execution | Exception:
        outcome: Execution | Exception
        async with anyio.create_task_group() as tg:

            async def signals() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                    async for _ in received:
                        if control.cancel_requested.is_set():
                            control.kill()
                        else:
                            typer.echo("flow-runner: cancelling (again to kill now)", err=True)
                            control.cancel()

            tg.start_soon(signals)
            try:
                outcome = await start(control, None if echo is None else echo.write)
            except refusals as exc:  # not into an ExceptionGroup
                outcome = exc
            tg.cancel_scope.cancel()
        return outcome

    try:
        outcome = anyio.run(main)
    finally:
        if echo is not None:
            echo.close()
    if isinstance(outcome, Exception):
        # Preparation failed before anything ran (engine down, image missing, runtime
        # missing, a provider that cannot start, a broken package, settings or
        # attachments the package refuses): the message names the fix.
        raise UsageError(str(outcome))
    return outcome


ECHO_BUFFER = 1 << 20
"""Bytes of component stderr waiting to be echoed; what comes on top is dropped."""
PIPE_RESERVE = 16 << 10
"""Room the echo leaves free in a stderr pipe: flow-runner's own last lines (the drop
marker, the verdict) still fit when nobody reads the pipe, so they never block."""
ECHO_STALL = 0.5
"""Seconds without progress after which the echo of a finished run gives up."""


class StderrEcho:
    """The component's stderr echoed to ours without ever blocking the event loop.

    A blocking write from the loop to a stderr nobody reads would stop the whole run,
    its deadline included. So :meth:`write` (on the loop) only appends to a bounded
    buffer, and a daemon thread writes it to ``fd``; on a pipe, only as much as leaves
    :data:`PIPE_RESERVE` free. When the buffer is full, the chunks that follow are
    dropped and counted until it has drained, and then a marker line says how many
    bytes are missing there (the run report's own stderr capture is separate).
    """

    def __init__(self, fd: int) -> None:
        import threading

        self.fd = fd
        self.pipe_size = _pipe_size(fd)
        self.pending = bytearray()
        self.dropped = 0
        """Bytes of the current gap: nothing is buffered until its marker is written."""
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


def _print_verdict(execution: Execution) -> int:
    from runner import json1

    body, status, note = _verdict(execution)
    sys.stdout.buffer.write(json1.dumps(body) + b"\n")
    sys.stdout.flush()
    if note:
        typer.echo(note, err=True)
    return status


def _verdict(execution: Execution) -> tuple[dict[str, JSONValue], int, str | None]:
    """The result line's object, the exit status, and what to say on stderr."""
    verdict = execution.verdict
    if verdict.result is not None:
        status = EXIT_DONE if verdict.result["outcome"] == "done" else EXIT_CUSTOM_OUTCOME
        return dict(verdict.result), status, None
    error = verdict.error
    assert error is not None
    body: dict[str, JSONValue] = {"code": error.code, "message": error.message}
    if error.details is not None:
        body["details"] = error.details
    reasons = "; ".join(verdict.reasons)
    lost = execution.report.lost
    if lost is not None and lost.what == "engine":
        note = f"flow-runner: infrastructure failure: {error.message} ({reasons})"
        return {"error": body}, EXIT_INFRASTRUCTURE, note
    note = f"flow-runner: run failed: {error.code}: {error.message} ({reasons})"
    if error.code == "DEADLINE_EXCEEDED":
        return {"error": body}, EXIT_DEADLINE, note
    if error.code == "CANCELLED":
        return {"error": body}, EXIT_CANCELLED, note
    return {"error": body}, EXIT_FAILED, note


def _read_json(option: str, text: str) -> JSONValue:
    from runner import json1

    if text == "-":
        data = sys.stdin.buffer.read()
        source = f"{option} - (standard input)"
    elif text.startswith("@"):
        path = Path(text[1:])
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{option} {text}: cannot read {path}: {exc.strerror}") from exc
        source = f"{option} {text}"
    else:
        data = text.encode()
        source = option
    try:
        return json1.loads(data.strip())
    except json1.JSON1Error as exc:
        raise UsageError(
            f"{source} is not valid FLOW JSON/1: {exc}; give JSON text, @FILE or -"
        ) from exc


def parse_duration(text: str) -> float:
    """``--deadline`` as seconds, or a usage error naming the option."""
    from runner.config import parse_duration as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"--deadline {exc}") from exc


@batch_app.command("run")
def batch_run(
    manifest: Annotated[Path, typer.Argument(help="JSON Lines: one invocation per line.")],
    results: Annotated[
        Path, typer.Option("--results", help="The SQLite result store (created if missing).")
    ] = Path("flow-runner-results.sqlite"),
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Runs at once (default: the number of cores)."),
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="Default image.")] = None,
    flow: Annotated[
        str | None, typer.Option("--flow", help="Default configured flow (with --config).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Host configuration (default ./flow-runner.toml)."),
    ] = None,
    input_: Annotated[str, typer.Option("--input", "-i", help="Default input: JSON or @FILE.")] = (
        "null"
    ),
    settings: Annotated[str, typer.Option("--settings", help="Default settings (JSON).")] = "{}",
    attach: Annotated[
        list[str] | None, typer.Option("--attach", "-a", help="Default NAME=PATH[:ro|rw].")
    ] = None,
    deadline: Annotated[str, typer.Option("--deadline", "-d", help="Default deadline.")] = "5m",
    profile: Annotated[str, typer.Option("--profile", "-p", help="Default profile.")] = "default",
    command: Annotated[
        str | None, typer.Option("--command", help="Default command (shell words).")
    ] = None,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="Retries of infrastructure failures.")
    ] = 2,
    rerun: Annotated[
        str | None, typer.Option("--rerun", help="failed | all: run final rows again too.")
    ] = None,
    halt_on_failure: Annotated[
        str | None,
        typer.Option("--halt-on-failure", help="N or N%: admit no new runs after that."),
    ] = None,
    halt: Annotated[
        str, typer.Option("--halt", help="soon: runs in flight finish; now: cancel them.")
    ] = "soon",
    shard: Annotated[
        str | None, typer.Option("--shard", help="I/N: only rows whose key is in shard I.")
    ] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML.")] = None,
    jsonl: Annotated[Path | None, typer.Option("--jsonl", help="Write one result a line.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
    progress_every: Annotated[
        float, typer.Option("--progress-every", min=0.05, help="Seconds between plain lines.")
    ] = 5.0,
    prepare: Annotated[
        int | None,
        typer.Option(
            "--prepare",
            min=0,
            help="Containers started ahead of their runs (default: --jobs; 0: none).",
        ),
    ] = None,
) -> None:
    """Run every invocation of MANIFEST that has no committed result for its key."""
    import shlex

    from runner.batch import BatchOptions, Defaults

    try:
        value = _read_json("--input", input_)
        settings_value = _read_json("--settings", settings)
        if not isinstance(settings_value, dict):
            raise UsageError("--settings must be a JSON object, for example '{}'")
        defaults = Defaults(
            image, flow, value, settings_value, tuple(attach or ()), deadline, profile,
            tuple(shlex.split(command)) if command else None,
        )  # fmt: skip
        if rerun not in (None, "failed", "all"):
            raise UsageError(f"--rerun {rerun!r}: use failed or all")
        again: Literal["none", "failed", "all"] = "all" if rerun == "all" else "none"
        if rerun == "failed":
            again = "failed"
        if halt not in ("soon", "now"):
            raise UsageError(f"--halt {halt!r}: use soon or now")
        options = BatchOptions(
            manifest, results, defaults, _load_config(config, False), jobs or _cores(),
            retries, again, _halt(halt_on_failure), halt == "now",
            _shard(shard), "quiet" if quiet else "auto", progress_every, prepare=prepare,
        )  # fmt: skip
    except UsageError as exc:
        _fail_usage(str(exc))
    raise typer.Exit(_run_batch(options, junit, jsonl))


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def _halt(text: str | None) -> Halt | None:
    from runner.batch import Halt

    if text is None:
        return None
    try:
        return Halt.parse(text)
    except ValueError as exc:
        raise UsageError(f"--halt-on-failure {exc}") from exc


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    index, sep, count = text.partition("/")
    if sep and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count):
        return int(index), int(count)
    raise UsageError(f"--shard {text!r}: use I/N with 1 <= I <= N, e.g. --shard 2/4")


def _run_batch(options: object, junit: Path | None, jsonl: Path | None) -> int:
    """Run the batch under signal handling: the first SIGINT/SIGTERM stops it (runs in
    flight are cancelled with their grace), the second kills them."""
    import signal

    import anyio

    from runner.batch import (
        BatchControl,
        BatchOptions,
        ManifestError,
        Store,
        StoreError,
        manifest_name,
        run_batch,
        write_jsonl,
        write_junit,
    )
    from runner.sandbox.errors import SandboxError

    assert isinstance(options, BatchOptions)
    control = BatchControl()

    async def main() -> int | Exception:
        outcome: int | Exception
        async with anyio.create_task_group() as tg:

            async def signals() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                    async for _ in received:
                        if control.stopping and not control.killing:
                            typer.echo("flow-runner batch: killing the runs in flight", err=True)
                            control.kill()
                        elif not control.stopping:
                            typer.echo("flow-runner batch: stopping (again to kill)", err=True)
                            control.stop()

            tg.start_soon(signals)
            try:
                outcome = (await run_batch(options, control)).exit_status
            except (ManifestError, StoreError, SandboxError) as exc:  # not into a group
                outcome = exc
            tg.cancel_scope.cancel()
        return outcome

    status = anyio.run(main)
    if isinstance(status, Exception):
        _fail_usage(str(status))
    name = manifest_name(options.manifest)
    store = Store(options.results)
    try:
        if junit is not None:
            write_junit(store, junit, name)
        if jsonl is not None:
            write_jsonl(store, jsonl, name)
    finally:
        store.close()
    return status


@batch_app.command("report")
def batch_report(
    results: Annotated[Path, typer.Argument(help="A batch result store.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Print the summary of a result store: counts by status, rows not succeeded."""
    import json

    from runner.batch import Store, StoreError, print_summary, summary

    try:
        store = Store(results, create=False)
    except StoreError as exc:
        _fail_usage(str(exc))
    try:
        info = summary(store)
    finally:
        store.close()
    if json_:
        typer.echo(json.dumps(info))
    else:
        print_summary(info, sys.stdout)


@batch_app.command("merge")
def batch_merge(
    stores: Annotated[list[Path], typer.Argument(help="Shard result stores.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The merged store.")],
) -> None:
    """Join shard stores into one."""
    from runner.batch import StoreError, merge

    try:
        written = merge(stores, output)
    except StoreError as exc:
        _fail_usage(str(exc))
    typer.echo(f"merged {written} row(s) into {output}")


@batch_app.command("diff")
def batch_diff(
    old: Annotated[Path, typer.Argument(help="The earlier result store.")],
    new: Annotated[Path, typer.Argument(help="The later result store.")],
    json_: Annotated[bool, typer.Option("--json", help="One JSON object a changed row.")] = False,
) -> None:
    """List rows (same id and input) whose status, outcome, error code or output changed.

    Exit status 0 when nothing changed, 1 when some row did (like diff(1)).
    """
    import json

    from runner.batch import StoreError, diff

    changed = 0
    try:
        for entry in diff(old, new):
            changed += 1
            if json_:
                typer.echo(json.dumps(entry))
                continue
            parts = ", ".join(
                f"{name} {c['old']!r} -> {c['new']!r}" for name, c in entry["changed"].items()
            )
            typer.echo(f"{entry['manifest']}/{entry['id']}: {parts}")
    except StoreError as exc:
        _fail_usage(str(exc))
    raise typer.Exit(1 if changed else 0)


@app.command("inspect")
def inspect_(
    image: Annotated[str, typer.Argument(help="IMAGE[:TAG] carrying a FLOW package.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Read an image's FLOW package without running it and summarise what it declares."""
    import anyio

    from runner import json1
    from runner.package.errors import PackageError
    from runner.package.reader import sandbox_package, summary
    from runner.sandbox.errors import SandboxError
    from runner.sandbox.registry import SandboxSpec, open_sandbox

    try:
        sandbox, _ = open_sandbox(SandboxSpec("docker", image=image))
        package = anyio.run(sandbox_package, sandbox)
    except (PackageError, SandboxError) as exc:
        _fail_usage(str(exc))
    if package is None:
        _fail_usage(f"image {image!r} carries no FLOW package (no FLOW.md in its package dir)")
    info = summary(package)
    if json_:
        typer.echo(json1.dumps(info).decode())
        return
    for key, value in info.items():
        text = value if isinstance(value, str) else json1.dumps(value).decode()
        typer.echo(f"{key + ':':13} {text}")


@app.command()
def gc() -> None:
    """Remove containers left behind by flow-runner processes that no longer exist."""
    from runner.sandbox.errors import DockerSandboxError
    from runner.sandbox.gc import sweep

    try:
        removed = sweep()
    except DockerSandboxError as exc:
        _fail_usage(str(exc))
    typer.echo(f"removed {len(removed)} container(s)" + "".join(f"\n  {c}" for c in removed))


@app.command()
def doctor(
    directories: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Directories to prove the path map for: a nonce written to each is read "
            "back by a sibling container.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Check the engine, runtimes, socket and path map; prove the map for DIRECTORIES."""
    from runner.doctor import diagnose

    failed = False
    for finding in diagnose(directories or []):
        typer.echo(finding.render())
        failed = failed or not finding.ok
    raise typer.Exit(1 if failed else 0)


@profiles_app.command("list")
def profiles_list() -> None:
    """List the shipped sandbox profiles."""
    from runner.sandbox.profiles import list_profiles, load_profile

    for name in list_profiles():
        typer.echo(f"{name:10} {load_profile(name).description}")


@profiles_app.command("show")
def profiles_show(
    name: Annotated[str, typer.Argument(help="A profile name or a TOML file.")],
) -> None:
    """Print a profile's effective settings as JSON, with how its bounds are enforced."""
    import json

    from runner.sandbox.profiles import ProfileError, disk_summary, load_profile, seccomp_summary

    try:
        profile = load_profile(name)
    except ProfileError as exc:
        _fail_usage(str(exc))
    shown = {
        **profile.model_dump(mode="json"),
        "enforcement": {"seccomp": seccomp_summary(profile), "disk": disk_summary(profile)},
    }
    typer.echo(json.dumps(shown, indent=2))


AttachOption = Annotated[
    list[str] | None,
    typer.Option("--attach", "-a", help="NAME=HOSTPATH[:ro|rw] (default ro); repeatable."),
]


@policy_app.command("verify")
def policy_verify(
    profile: Annotated[str, typer.Argument(help="A profile name or a TOML file.")],
    attach: AttachOption = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the rows as JUnit XML to FILE.")
    ] = None,
    stress: Annotated[
        bool, typer.Option("--stress", help="Also prove the limits (fork, allocate, burn).")
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline", help="Map the rows to a standard: `restricted` (Kubernetes PSS)."
        ),
    ] = None,
    snapshot: Annotated[
        Path | None, typer.Option("--snapshot", help="Record the observed rows to FILE.")
    ] = None,
    against: Annotated[
        Path | None,
        typer.Option("--against", help="Fail where what is in effect differs from FILE."),
    ] = None,
) -> None:
    """Start a probe exactly as a run under PROFILE would start and report, row by row,
    what is enforced. Exit 0 when no row fails, 1 when any fails or errs, 2 for usage."""
    from runner.policy import baseline as pss
    from runner.policy import render
    from runner.policy import snapshot as snapshots
    from runner.policy.battery import failed
    from runner.policy.verify import environment

    if baseline not in (None, "restricted"):
        _fail_usage(f"--baseline {baseline!r}: the one baseline known is `restricted`")
    previous = None
    if against is not None:
        try:
            previous = snapshots.load(against)
        except snapshots.SnapshotError as exc:
            _fail_usage(str(exc))
    loaded, verification = _verify_all([profile], attach or [], stress)[0]
    rows = verification.rows
    if baseline is not None:
        rows = rows + pss.restricted(rows)
    if snapshot is not None or previous is not None:
        env = environment(loaded)
        if previous is not None:
            rows = rows + snapshots.compare(previous, env, verification.rows)
        if snapshot is not None:
            snapshots.record(snapshot, loaded.name, env, verification.rows)
    if json_:
        typer.echo(render.as_json(rows), nl=False)
    else:
        render.table(f"policy verify {loaded.name} ({loaded.runtime})", rows)
    if junit is not None:
        suite = f"policy verify {loaded.name}"
        junit.write_bytes(render.junit(suite, rows, verification.timings.get("total", 0.0)))
    raise typer.Exit(1 if failed(rows) else 0)


@policy_app.command("diff")
def policy_diff(
    a: Annotated[str, typer.Argument(help="The profile now (a name or a TOML file).")],
    b: Annotated[str, typer.Argument(help="The profile proposed.")],
    attach: AttachOption = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the differences as JSON.")] = False,
) -> None:
    """Run the battery under A and B and show the rows that differ. Exit 1 when B is more
    permissive than A in any row (a gate for policy changes), 0 otherwise, 2 for usage."""
    import json

    from runner.policy.diff import b_is_weaker, differences, static

    (pa, va), (pb, vb) = _verify_all([a, b], attach or [], False)
    found = differences(va.rows, vb.rows)
    settings = static(pa, pb)
    if json_:
        document = {
            "a": pa.name,
            "b": pb.name,
            "settings": [{"key": k, "a": x, "b": y} for k, x, y in settings],
            "rows": [
                {
                    "id": d.id,
                    "guarantee": d.guarantee,
                    "more_permissive": d.looser,
                    "a": d.a.as_json(),
                    "b": d.b.as_json(),
                }
                for d in found
            ],
        }
        typer.echo(json.dumps(document, indent=1))
    else:
        typer.echo(f"settings that differ ({pa.name} -> {pb.name}):")
        for key, x, y in settings:
            typer.echo(f"  {key}: {json.dumps(x)} -> {json.dumps(y)}")
        typer.echo(f"rows that differ: {len(found)}")
        for d in found:
            side = {"A": f"{pa.name} more permissive", "B": f"{pb.name} more permissive"}
            typer.echo(
                f"  {d.id:26} {d.a.verdict} {d.a.observed!r} -> {d.b.verdict} "
                f"{d.b.observed!r}  [{side.get(d.looser, 'differs')}]"
            )
    raise typer.Exit(1 if b_is_weaker(found) else 0)


def _verify_all(names: list[str], attach: list[str], stress: bool) -> list[Any]:
    """Load each profile and probe them all at once; bad input is a usage error."""
    import anyio

    from runner.policy.verify import verify
    from runner.sandbox.attachments import AttachmentError, check_attachments, parse_attachments
    from runner.sandbox.errors import SandboxError
    from runner.sandbox.profiles import ProfileError, load_profile

    try:
        attachments = parse_attachments(attach)
        profiles = [load_profile(name) for name in names]
        for loaded in profiles:
            check_attachments(attachments, loaded.allowed_mounts)
    except (ProfileError, AttachmentError) as exc:
        _fail_usage(str(exc))

    async def main() -> list[Any]:
        results: list[Any] = [None] * len(profiles)

        async def one(index: int) -> None:
            results[index] = (
                profiles[index],
                await verify(profiles[index], attachments, stress=stress),
            )

        async with anyio.create_task_group() as tg:
            for index in range(len(profiles)):
                tg.start_soon(one, index)
        return results

    try:
        return anyio.run(main)
    except* SandboxError as group:  # engine down, probe image missing: nothing ran
        _fail_usage(str(group.exceptions[0]))


@app.command("job", context_settings={"allow_interspersed_args": False})
def job(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The component's command: -- COMMAND [ARGS...].", show_default=False),
    ] = None,
    input_: Annotated[
        str,
        typer.Option("--input", "-i", help="Run input: JSON text, @FILE, -, or env:VARIABLE."),
    ] = "null",
    settings: Annotated[
        str, typer.Option("--settings", help="Settings object: JSON text, @FILE or env:VARIABLE.")
    ] = "{}",
    deadline: Annotated[str, typer.Option("--deadline", "-d", help="Time allowed.")] = "5m",
    package: Annotated[
        Path | None,
        typer.Option(
            "--package", help="The component's FLOW package directory: hold the run to it."
        ),
    ] = None,
    attach: Annotated[
        list[str] | None,
        typer.Option("--attach", "-a", help="NAME=PATH[:ro|rw], a path in the pod; repeatable."),
    ] = None,
    scratch: Annotated[
        Path | None, typer.Option("--scratch", help="Directory to use as scratch (an emptyDir).")
    ] = None,
    results: Annotated[
        Path | None,
        typer.Option("--results", help="Directory to write the run report to (a volume)."),
    ] = None,
    termination_log: Annotated[
        Path, typer.Option("--termination-log", help="Where the termination message goes.")
    ] = Path("/dev/termination-log"),
    manifest: Annotated[
        Path | None,
        typer.Option("--manifest", help="A `k8s batch` manifest: run the row of --index."),
    ] = None,
    index: Annotated[
        str | None,
        typer.Option("--index", help="The manifest row (default: $JOB_COMPLETION_INDEX)."),
    ] = None,
    grace: Annotated[
        float, typer.Option("--grace", min=0, help="Seconds from request/cancel to the kill.")
    ] = 2.0,
    exit_grace: Annotated[
        float, typer.Option("--exit-grace", min=0, help="Seconds from the result to the kill.")
    ] = 2.0,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Do not echo the component's stderr.")
    ] = False,
) -> None:
    """Run one component as the entrypoint of a Kubernetes Job's pod (see docs/kubernetes.md).

    The first SIGTERM (the kubelet's) cancels, a second kills. Exit statuses as exec's,
    and 75 when the wrapper itself failed (retrying the pod may succeed).
    """
    request = JobRequest(
        command or [], input_, settings, deadline, package, attach or [], scratch, results,
        termination_log, manifest, index, grace, exit_grace, quiet,
    )  # fmt: skip
    raise typer.Exit(request.run())


@dataclass(frozen=True)
class JobRequest:
    """What ``job`` was asked to run (the wrapper's side: runner/k8s/wrapper.py)."""

    command: list[str]
    input_text: str
    settings_text: str
    deadline: str
    package: Path | None
    attach: list[str]
    scratch: Path | None
    results: Path | None
    termination_log: Path
    manifest: Path | None
    index: str | None
    grace: float
    exit_grace: float
    quiet: bool

    def run(self) -> int:
        """Run the job; any error of the wrapper's own is exit 75, never a traceback."""
        from runner.k8s import termination, wrapper

        wrapper.make_undumpable()
        try:
            return self._run(wrapper.Seal.new())
        except Exception as exc:  # the wrapper's own failure: the pod may be retried
            text = f"{type(exc).__name__}: {exc}"
            typer.echo(
                f"flow-runner job: the wrapper failed: {text}; a retry may succeed", err=True
            )
            return self._finish(termination.EXIT_WRAPPER, text=text)

    def _finish(self, status: int, **fields: Any) -> int:
        from runner.k8s import termination

        problem = termination.write(self.termination_log, termination.message(status, **fields))
        if problem is not None:
            typer.echo(f"flow-runner job: {problem}", err=True)
        return status

    def _run(self, seal: Any) -> int:
        from runner.k8s import termination, wrapper

        try:
            start, row, run_id = self._starter()
        except (UsageError, wrapper.JobUsageError) as exc:
            typer.echo(f"flow-runner job: {exc}", err=True)
            return self._finish(EXIT_USAGE, text=str(exc))
        sys.stderr.buffer.write(wrapper.header_line(seal, row, self.command))
        sys.stderr.flush()
        try:
            execution = _run(start, self.quiet)
        except UsageError as exc:  # refused before it ran: said in a sealed line too
            error: dict[str, JSONValue] = {"code": "USAGE", "message": str(exc)}
            refused = {"seal": seal.token, "exit": EXIT_USAGE, "class": "usage", "run": run_id}
            sys.stdout.buffer.write(wrapper.result_line({"error": error}, refused))
            sys.stdout.flush()
            typer.echo(f"flow-runner job: {exc}", err=True)
            return self._finish(EXIT_USAGE, run_id=run_id, code="USAGE", text=str(exc))
        body, status, note = _verdict(execution)
        report = execution.report
        data = report.model_dump_json(indent=2).encode() + b"\n"
        digest = wrapper.report_digest(data)
        if self.results is not None:
            wrapper.write_report(self.results, row.id if row else run_id, data)
        job: dict[str, JSONValue] = {
            "seal": seal.token, "exit": status, "class": termination.exit_class(status),
            "run": run_id, "reportDigest": digest, "componentExit": report.exit_code,
            "seconds": round(sum(report.timings.values()), 3),
        }  # fmt: skip
        sys.stdout.buffer.write(wrapper.result_line(body, job))
        sys.stdout.flush()
        if note:
            typer.echo(note, err=True)
        failure = execution.verdict.error
        return self._finish(
            status, run_id=run_id, outcome=report.outcome, report_digest=digest,
            code=failure.code if failure else None, text=failure.message if failure else "",
        )  # fmt: skip

    def _starter(self) -> tuple[Starter, Any, str]:
        from runner.api import Invocation, execute, new_run_id
        from runner.host.driver import Graces
        from runner.k8s import wrapper
        from runner.package.errors import PackageError
        from runner.package.reader import directory_package
        from runner.sandbox.attachments import AttachmentError, parse_attachments
        from runner.sandbox.base import LaunchRequest
        from runner.sandbox.errors import SandboxError
        from runner.sandbox.registry import SandboxSpec, open_sandbox

        if not self.command:
            raise UsageError("name the component's command: flow-runner job -- COMMAND [ARGS]")
        for option, path in (("--results", self.results), ("--scratch", self.scratch)):
            if path is not None and not path.is_dir():
                raise UsageError(f"{option} {path}: no such directory; mount a volume there")
        row = None
        settings: JSONValue
        if self.manifest is not None:
            if self.input_text != "null" or self.settings_text != "{}":
                raise UsageError("--manifest gives each row its input and settings; drop them")
            index = wrapper.completion_index(self.index)
            name = self.manifest.name.removesuffix(".jsonl").removesuffix(".json")
            row = wrapper.read_row(self.manifest, index, name or self.manifest.name)
            value, settings = row.input, row.settings
        else:
            value = _read_json("--input", wrapper.from_env("--input", self.input_text))
            settings = _read_json("--settings", wrapper.from_env("--settings", self.settings_text))
        if not isinstance(settings, dict):
            raise UsageError("--settings must be a JSON object, for example '{}'")
        seconds = row.deadline if row is not None and row.deadline else None
        seconds = seconds or parse_duration(self.deadline)
        try:
            attachments = parse_attachments(self.attach)
        except AttachmentError as exc:
            raise UsageError(str(exc)) from exc
        run_id = new_run_id()
        try:  # the pod is the sandbox: the component is the wrapper's child process
            sandbox, _ = open_sandbox(SandboxSpec("process", command=tuple(self.command)))
            package = directory_package(self.package) if self.package is not None else None
        except (SandboxError, PackageError) as exc:
            raise UsageError(str(exc)) from exc
        invocation = Invocation.within(
            seconds, input=value, settings=settings,
            launch=LaunchRequest(attachments, self.scratch, run_id), package=package,
        )  # fmt: skip
        graces = Graces(cancel=self.grace, exit=self.exit_grace)

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            return await execute(
                sandbox, invocation, target=" ".join(self.command),
                broker=wrapper.PodBroker(), graces=graces, control=control, stderr_sink=sink,
            )  # fmt: skip

        return start, row, run_id


OutputOption = Annotated[str, typer.Option("--output", "-o", help="yaml or json.")]
K8sAttachOption = Annotated[
    list[str] | None,
    typer.Option(
        "--attach",
        "-a",
        help="NAME=pvc:CLAIM[/SUBPATH][:ro|rw] or NAME=configmap:NAME; repeatable.",
    ),
]
ResultsOption = Annotated[
    str | None,
    typer.Option("--results", help="pvc:CLAIM[/SUBPATH]: a volume the reports are written to."),
]
NameOption = Annotated[str | None, typer.Option("--name", help="The Job's name.")]
NamespaceOption = Annotated[str | None, typer.Option("--namespace", "-n", help="Its namespace.")]
TtlOption = Annotated[
    int, typer.Option("--ttl", min=0, help="ttlSecondsAfterFinished: seconds the Job is kept.")
]


@k8s_app.command("job")
def k8s_job(
    target: Annotated[
        list[str], typer.Argument(help="IMAGE [COMMAND ARGS...] (the command: the image's CMD).")
    ],
    input_: Annotated[str, typer.Option("--input", "-i", help="JSON text, @FILE or -.")] = "null",
    settings: Annotated[str, typer.Option("--settings", help="JSON object or @FILE.")] = "{}",
    attach: K8sAttachOption = None,
    deadline: Annotated[str, typer.Option("--deadline", "-d", help="Time allowed.")] = "5m",
    profile: Annotated[str, typer.Option("--profile", "-p", help="Sandbox profile.")] = "default",
    results: ResultsOption = None,
    package: Annotated[
        str | None, typer.Option("--package", help="The package directory in the image.")
    ] = None,
    name: NameOption = None,
    namespace: NamespaceOption = None,
    backoff_limit: Annotated[
        int, typer.Option("--backoff-limit", min=0, help="Retries of the wrapper's failures.")
    ] = 2,
    ttl: TtlOption = 86400,
    output: OutputOption = "yaml",
) -> None:
    """Print a Job (and its ConfigMap and NetworkPolicy) running IMAGE as `exec` would."""
    from runner.k8s import manifests

    try:
        value = _read_json("--input", input_)
        settings_value = _read_json("--settings", settings)
        if not isinstance(settings_value, dict):
            raise UsageError("--settings must be a JSON object, for example '{}'")
        spec = _job_spec(
            target, attach or [], deadline, profile, results, package, name, namespace,
            backoff_limit, ttl, value, settings_value,
        )  # fmt: skip
        rendered = manifests.render_job(spec)
    except (UsageError, manifests.RenderError) as exc:
        _fail_usage(str(exc))
    _print_rendered(rendered, output)


@k8s_app.command("batch")
def k8s_batch(
    manifest: Annotated[Path, typer.Argument(help="A `flow-runner batch` JSON Lines manifest.")],
    image: Annotated[str, typer.Option("--image", help="The image every row runs.")],
    command: Annotated[
        str | None, typer.Option("--command", help="The component's command (shell words).")
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Pods at once.")] = 4,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="backoffLimitPerIndex: retries per row.")
    ] = 1,
    max_failed: Annotated[
        int | None,
        typer.Option("--max-failed-indexes", min=0, help="Fail the Job past this many rows."),
    ] = None,
    attach: K8sAttachOption = None,
    deadline: Annotated[str, typer.Option("--deadline", "-d", help="Default deadline.")] = "5m",
    profile: Annotated[str, typer.Option("--profile", "-p", help="Sandbox profile.")] = "default",
    results: ResultsOption = None,
    package: Annotated[
        str | None, typer.Option("--package", help="The package directory in the image.")
    ] = None,
    name: NameOption = None,
    namespace: NamespaceOption = None,
    ttl: TtlOption = 86400,
    output: OutputOption = "yaml",
) -> None:
    """Print an Indexed Job running each row of MANIFEST in its own pod, and the ConfigMap
    holding the rows; import the pods' logs with `flow-runner batch import`."""
    import shlex

    from runner.k8s import manifests

    try:
        words = shlex.split(command) if command else []
        spec = _job_spec(
            [image, *words], attach or [], deadline, profile, results, package, name,
            namespace, 0, ttl, None, {},
        )  # fmt: skip
        rows = manifests.batch_rows(manifest, spec)
        rendered = manifests.render_batch(
            spec, rows, jobs=jobs, retries=retries, max_failed=max_failed
        )
    except (UsageError, manifests.RenderError) as exc:
        _fail_usage(str(exc))
    _print_rendered(rendered, output)


def _job_spec(
    target: list[str],
    attach: list[str],
    deadline: str,
    profile_name: str,
    results: str | None,
    package: str | None,
    name: str | None,
    namespace: str | None,
    backoff_limit: int,
    ttl: int,
    value: JSONValue,
    settings: dict[str, JSONValue],
) -> Any:
    from runner.k8s import manifests
    from runner.sandbox.profiles import ProfileError, load_profile

    try:
        profile = load_profile(profile_name)
    except ProfileError as exc:
        raise UsageError(str(exc)) from exc
    image, command = target[0], tuple(target[1:])
    if not command:
        command, label = _image_command(image)
        package = package or label
    mounts = tuple(manifests.parse_mount(spec, profile) for spec in attach)
    result_mount = None
    if results is not None:
        result_mount = manifests.parse_mount(f"results={results}:rw", profile, "--results")
    return manifests.JobSpec(
        image, command, profile, parse_duration(deadline), value, settings, mounts,
        result_mount, package, name, namespace, backoff_limit, ttl,
    )  # fmt: skip


def _image_command(image: str) -> tuple[tuple[str, ...], str | None]:
    """The image's CMD and package label, from the local engine: the pod's command
    replaces the image's entrypoint with the wrapper, so the component's is named."""
    try:
        from runner.sandbox.docker.engine import default_client

        config = default_client().api.inspect_image(image)["Config"]  # type: ignore[no-untyped-call]
    except Exception as exc:  # no engine, no such image: say what to do instead
        raise UsageError(
            f"{image!r}: name the component's command after the image (k8s job IMAGE -- "
            f"COMMAND ...); it could not be read from a local engine ({type(exc).__name__})"
        ) from exc
    command = tuple((config.get("Entrypoint") or []) + (config.get("Cmd") or []))
    if not command:
        raise UsageError(f"{image!r} has no CMD; name the component's command after the image")
    return command, (config.get("Labels") or {}).get("flow.package")


def _print_rendered(rendered: Any, output: str) -> None:
    from runner.k8s import manifests

    if output not in ("yaml", "json"):
        _fail_usage(f"--output {output!r}: use yaml or json")
    for note in rendered.notes:
        typer.echo(f"flow-runner k8s: profile vs pod: {note}", err=True)
    text = manifests.to_yaml(rendered) if output == "yaml" else manifests.to_json(rendered) + "\n"
    typer.echo(text, nl=False)


@batch_app.command("import")
def batch_import(
    logs: Annotated[list[Path], typer.Argument(help="Pod logs of a `k8s batch` Job, one a file.")],
    results: Annotated[
        Path, typer.Option("--results", help="The SQLite result store (created if missing).")
    ] = Path("flow-runner-results.sqlite"),
) -> None:
    """Read the wrappers' sealed result lines from pod logs into a batch result store."""
    from runner.k8s import logs as pod_logs

    try:
        runs = pod_logs.read_logs(logs)
        counts = pod_logs.import_runs(runs, results)
    except pod_logs.LogError as exc:
        _fail_usage(str(exc))
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    typer.echo(f"imported {len(runs)} row(s) into {results}: {summary}")


def _fail_usage(message: str) -> NoReturn:
    typer.echo(f"flow-runner: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def main() -> NoReturn:
    """Console-script entry point.

    Ends with ``os._exit`` once the output is flushed: by then every container is removed
    and every child process reaped, and skipping the interpreter's teardown of docker-py,
    pydantic and anyio saves about 80 ms per run.
    """
    try:
        app()
        code: object = 0
    except SystemExit as exit_:
        code = exit_.code
    if isinstance(code, str):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else int(code is not None))


if __name__ == "__main__":
    main()
