"""The ``flow-runner`` command line (typer).

Heavy modules (docker-py, anyio, pydantic) are imported inside the commands, so that
``--help`` and ``--version`` are instant and ``exec`` pays only for what it uses.

Exit status of ``exec``: 0 outcome ``done``; 3 a declared custom outcome; 124
``DEADLINE_EXCEEDED``; 130 ``CANCELLED`` by the user; 4 any other Run failure; 2 bad usage
or configuration.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from runner import __version__

if TYPE_CHECKING:
    from runner.api import Execution, Invocation
    from runner.host.driver import Graces
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
            help="IMAGE[:TAG] [COMMAND ARGS...]; with --process: COMMAND [ARGS...]. "
            "Put `--` before a command whose arguments start with a dash.",
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
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the run report as JSON to FILE.")
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Do not echo the component's stderr.")
    ] = False,
) -> None:
    """Run one component and print its Run result (or its error) as one JSON line."""
    try:
        code = _exec(
            target or [], process, input_, settings, attach or [], scratch, deadline,
            profile, report, quiet,
        )  # fmt: skip
    except UsageError as exc:
        _fail_usage(str(exc))
    raise typer.Exit(code)


def _exec(
    target: list[str],
    process: bool,
    input_text: str,
    settings_text: str,
    attach: list[str],
    scratch: Path | None,
    deadline: str,
    profile_name: str,
    report_path: Path | None,
    quiet: bool,
) -> int:
    from runner.api import Invocation
    from runner.sandbox.base import LaunchRequest

    seconds = parse_duration(deadline)
    value = _read_json("--input", input_text)
    settings = _read_json("--settings", settings_text)
    if not isinstance(settings, dict):
        raise UsageError("--settings must be a JSON object, for example '{}'")
    if scratch is not None and not scratch.is_dir():
        raise UsageError(f"--scratch {scratch}: no such directory; create it first")
    if not target:
        raise UsageError("name an image (flow-runner exec IMAGE) or a command with --process")
    graces, sandbox, attachments, label = _prepare(target, process, profile_name, attach)
    invocation = Invocation.within(
        seconds,
        input=value,
        settings=settings,
        launch=LaunchRequest(tuple(attachments), scratch.resolve() if scratch else None),
    )
    backend = "process" if process else "docker"
    execution = _run(sandbox, invocation, label, backend, graces, quiet)
    if report_path is not None:
        report_path.write_text(execution.report.model_dump_json(indent=2) + "\n")
    return _print_verdict(execution)


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
    from runner.sandbox.errors import DockerSandboxError
    from runner.sandbox.gc import sweep

    try:
        sweep()  # containers of runners that died (even by kill -9) go before a new one comes
    except DockerSandboxError as exc:
        raise UsageError(str(exc)) from exc
    image, command = target[0], target[1:] or None
    graces = Graces(cancel=profile.cancel_grace, exit=profile.exit_grace)
    return graces, DockerSandbox(image, profile, command), attachments, image


def _run(
    sandbox: Sandbox,
    invocation: Invocation,
    label: str,
    backend: str,
    graces: Graces,
    quiet: bool,
) -> Execution:
    import signal

    import anyio

    from runner.api import execute
    from runner.host.driver import RunControl
    from runner.sandbox.errors import DockerSandboxError

    control = RunControl()

    def echo(chunk: bytes) -> None:
        sys.stderr.buffer.write(chunk)
        sys.stderr.buffer.flush()

    async def main() -> Execution | DockerSandboxError:
        outcome: Execution | DockerSandboxError
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
                outcome = await execute(
                    sandbox,
                    invocation,
                    target=label,
                    backend=backend,
                    graces=graces,
                    control=control,
                    stderr_sink=None if quiet else echo,
                )
            except DockerSandboxError as exc:  # kept out of the task group's ExceptionGroup
                outcome = exc
            tg.cancel_scope.cancel()
        return outcome

    outcome = anyio.run(main)
    if isinstance(outcome, DockerSandboxError):
        # Preparation failed before anything ran (engine down, image missing, runtime
        # missing): the message names the fix.
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


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


def parse_duration(text: str) -> float:
    """``30s``, ``2m``, ``1h``, ``500ms`` or plain seconds, as seconds."""
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise UsageError(f"--deadline {text!r} is not a duration; use e.g. 30s, 2m, 1h or 500ms")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    return float(match.group(1)) * scale


@app.command()
def gc() -> None:
    """Remove containers left behind by flow-runner processes that no longer exist."""
    from runner.sandbox.gc import sweep

    removed = sweep()
    typer.echo(f"removed {len(removed)} container(s)" + "".join(f"\n  {c}" for c in removed))


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


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
