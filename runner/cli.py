"""The ``flow-runner`` command line (typer).

Heavy modules (docker-py, anyio, pydantic) are imported inside the commands, so that
``--help`` and ``--version`` are instant and ``exec`` pays only for what it uses.

Exit status of ``exec``: 0 outcome ``done``; 3 a declared custom outcome; 124
``DEADLINE_EXCEEDED``; 130 ``CANCELLED`` by the user; 4 any other Run failure; 2 bad usage
or configuration.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from runner import __version__

if TYPE_CHECKING:
    from runner.api import Execution
    from runner.config import HostConfig
    from runner.host.driver import Graces, RunControl
    from runner.json1 import JSONValue
    from runner.sandbox.base import Attachment, Sandbox

EXIT_DONE = 0
EXIT_USAGE = 2
EXIT_CUSTOM_OUTCOME = 3
EXIT_FAILED = 4
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
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="Host configuration (default: ./flow-runner.toml if present)."
        ),
    ] = None,
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
        config, quiet,
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
    quiet: bool

    def starter(self) -> Starter:
        """Validate everything, then return the coroutine factory that runs it."""
        if not self.target:
            raise UsageError("name an image (flow-runner exec IMAGE) or a command with --process")
        if self.scratch is not None and not self.scratch.is_dir():
            raise UsageError(f"--scratch {self.scratch}: no such directory; create it first")
        seconds = parse_duration(self.deadline)
        value = _read_json("--input", self.input_text)
        host_config = None if self.process else _load_config(self.config)
        if host_config is not None and self.target[0] in host_config.flows:
            return self._flow_starter(host_config, value, seconds)
        return self._component_starter(value, seconds)

    def _flow_starter(self, host_config: HostConfig, value: JSONValue, seconds: float) -> Starter:
        from runner.flows import FlowHost

        extra = self.attach or self.settings_text != "{}" or self.profile != "default"
        if len(self.target) > 1 or extra:
            raise UsageError(
                f"{self.target[0]!r} is a configured flow: its command, settings, "
                "attachments and profile come from the configuration; drop the extra "
                "arguments"
            )
        _sweep()
        name, scratch = self.target[0], self._scratch_dir()

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            host = FlowHost(host_config, stderr_sink=sink)
            try:
                return await host.run(
                    name, value, deadline_seconds=seconds, control=control, scratch_dir=scratch
                )
            finally:
                await host.aclose()

        return start

    def _component_starter(self, value: JSONValue, seconds: float) -> Starter:
        from runner.api import Invocation, execute
        from runner.sandbox.base import LaunchRequest

        settings = _read_json("--settings", self.settings_text)
        if not isinstance(settings, dict):
            raise UsageError("--settings must be a JSON object, for example '{}'")
        graces, sandbox, attachments, label = _prepare(
            self.target, self.process, self.profile, self.attach
        )
        invocation = Invocation.within(
            seconds,
            input=value,
            settings=settings,
            launch=LaunchRequest(tuple(attachments), self._scratch_dir()),
        )
        backend = "process" if self.process else "docker"

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            return await execute(
                sandbox, invocation, target=label, backend=backend, graces=graces,
                control=control, stderr_sink=sink,
            )  # fmt: skip

        return start

    def _scratch_dir(self) -> Path | None:
        return self.scratch.resolve() if self.scratch else None


def _load_config(path: Path | None) -> HostConfig | None:
    from runner.config import ConfigError, find_config

    try:
        return find_config(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def _sweep() -> None:
    """Remove containers of runners that died (even by kill -9) before starting more."""
    from runner.sandbox.errors import DockerSandboxError
    from runner.sandbox.gc import sweep

    try:
        sweep()
    except DockerSandboxError as exc:
        raise UsageError(str(exc)) from exc


def _prepare(
    target: list[str], process: bool, profile_name: str, attach: list[str]
) -> tuple[Graces, Sandbox, list[Attachment], str]:
    from runner.host.driver import Graces
    from runner.sandbox.attachments import AttachmentError, check_attachments, parse_attachments

    try:
        attachments = list(parse_attachments(attach))
    except AttachmentError as exc:
        raise UsageError(str(exc)) from exc
    if process:
        from runner.sandbox.process import ProcessSandbox

        return Graces(), ProcessSandbox(target), attachments, " ".join(target)
    from runner.sandbox.docker import DockerSandbox
    from runner.sandbox.profiles import ProfileError, load_profile

    try:
        profile = load_profile(profile_name)
        check_attachments(attachments, profile.allowed_mounts)
    except (ProfileError, AttachmentError) as exc:
        raise UsageError(str(exc)) from exc
    _sweep()
    image, command = target[0], target[1:] or None
    graces = Graces(cancel=profile.cancel_grace, exit=profile.exit_grace)
    return graces, DockerSandbox(image, profile, command), attachments, image


def _run(start: Starter, quiet: bool) -> Execution:
    """Run under signal handling: first SIGINT/SIGTERM cancels, the second kills."""
    import signal

    import anyio

    from runner.config import ConfigError
    from runner.host.driver import RunControl
    from runner.package.errors import InvocationRefused, PackageError
    from runner.sandbox.attachments import AttachmentError
    from runner.sandbox.errors import SandboxError

    refusals = (SandboxError, ConfigError, InvocationRefused, PackageError, AttachmentError)
    control = RunControl()

    def echo(chunk: bytes) -> None:
        sys.stderr.buffer.write(chunk)
        sys.stderr.buffer.flush()

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
                outcome = await start(control, None if quiet else echo)
            except refusals as exc:  # not into an ExceptionGroup
                outcome = exc
            tg.cancel_scope.cancel()
        return outcome

    outcome = anyio.run(main)
    if isinstance(outcome, Exception):
        # Preparation failed before anything ran (engine down, image missing, runtime
        # missing, a provider that cannot start, a broken package, settings or
        # attachments the package refuses): the message names the fix.
        raise UsageError(str(outcome))
    return outcome


def _print_verdict(execution: Execution) -> int:
    from runner import json1

    verdict = execution.verdict
    if verdict.result is not None:
        sys.stdout.buffer.write(json1.dumps(verdict.result) + b"\n")
        sys.stdout.flush()
        return EXIT_DONE if verdict.result["outcome"] == "done" else EXIT_CUSTOM_OUTCOME
    error = verdict.error
    assert error is not None
    body: dict[str, JSONValue] = {"code": error.code, "message": error.message}
    if error.details is not None:
        body["details"] = error.details
    sys.stdout.buffer.write(json1.dumps({"error": body}) + b"\n")
    sys.stdout.flush()
    reasons = "; ".join(verdict.reasons)
    typer.echo(f"flow-runner: run failed: {error.code}: {error.message} ({reasons})", err=True)
    if error.code == "DEADLINE_EXCEEDED":
        return EXIT_DEADLINE
    if error.code == "CANCELLED":
        return EXIT_CANCELLED
    return EXIT_FAILED


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


@app.command("inspect")
def inspect_(
    image: Annotated[str, typer.Argument(help="IMAGE[:TAG] carrying a FLOW package.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Read an image's FLOW package without running it and summarise what it declares."""
    import docker.errors

    from runner import json1
    from runner.package.errors import PackageError
    from runner.package.reader import read_image_package, summary
    from runner.sandbox.docker import default_client
    from runner.sandbox.errors import DockerSandboxError

    try:
        package = read_image_package(default_client(), image)
    except (PackageError, DockerSandboxError) as exc:
        _fail_usage(str(exc))
    except docker.errors.ImageNotFound:
        _fail_usage(f"image {image!r} is not on this Docker engine; build it (`make images`)")
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
    """Print a profile's effective settings as JSON."""
    from runner.sandbox.profiles import ProfileError, load_profile

    try:
        profile = load_profile(name)
    except ProfileError as exc:
        _fail_usage(str(exc))
    typer.echo(profile.model_dump_json(indent=2))


def _fail_usage(message: str) -> NoReturn:
    typer.echo(f"flow-runner: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def main() -> NoReturn:
    """Console-script entry point.

    Ends with ``os._exit`` once the output is flushed: by then every container is removed
    and every child process reaped, and skipping the interpreter's teardown of docker-py,
    pydantic and anyio saves about 80 ms per run.
    """
    import os

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
