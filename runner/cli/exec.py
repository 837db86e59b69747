"""``flow-runner exec``: run one component, a configured flow, or a local stand-in for one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli.app import UsageError, app
from runner.cli.inputs import (
    Attach,
    Quiet,
    check_outputs,
    command_of,
    load_config,
    parse_duration,
    read_input,
    read_settings,
)
from runner.cli.running import Starter, _run, _verdict, print_line, refusal, refuse

if TYPE_CHECKING:
    from runner.api import Execution
    from runner.config import HostConfig
    from runner.host.driver import RunControl
    from runner.json1 import JSONValue
    from runner.package.parse import Package
    from runner.sandbox.base import Attachment
    from runner.sandbox.errors import ImageMissing


@dataclass
class ExecRequest:
    """What ``exec`` was asked to run: its options, checked before anything starts."""

    target: Annotated[
        list[str] | None,
        typer.Argument(
            help="IMAGE[:TAG] [COMMAND ARGS...], a flow NAME from the configuration, or with "
            "--process: COMMAND [ARGS...]. Put `--` before a command whose arguments start "
            "with a dash.",
            show_default=False,
        ),
    ] = None
    process: Annotated[
        bool, typer.Option("--process", help="Run a local command instead of a container.")
    ] = False
    input_text: Annotated[
        str | None,
        typer.Option(
            "--input", "-i", help="Run input: JSON text, @FILE, or - for stdin (default null)."
        ),
    ] = None
    settings_text: Annotated[
        str, typer.Option("--settings", help="Settings object: JSON text or @FILE.")
    ] = "{}"
    attach: Attach = None
    scratch: Annotated[
        Path | None,
        typer.Option("--scratch", help="Host directory to use as scratch (kept after the run)."),
    ] = None
    deadline: Annotated[
        str, typer.Option("--deadline", "-d", help="Time allowed, e.g. 30s, 2m, 1h, 500ms.")
    ] = "5m"
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="Sandbox profile: a name or a TOML file.")
    ] = "default"
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="Run the container as UID[:GID] instead of the profile's user, e.g. "
            "--user $(id -u):$(id -g) to write a directory you own (uid 0 needs a profile "
            "with allow_root).",
        ),
    ] = None
    package: Annotated[
        Path | None,
        typer.Option(
            "--package",
            help="With --process: hold the run to the FLOW package in this directory "
            "(settings, attachments, input, result, ports), as an image's package holds it.",
        ),
    ] = None
    flow: Annotated[
        str | None,
        typer.Option(
            "--flow",
            help="With --process: the local command stands in for this configured flow, "
            "with its capabilities, children, attachments, settings and limits.",
        ),
    ] = None
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="Host configuration (default: ./flow-runner.toml if present)."
        ),
    ] = None
    allow_host_commands: Annotated[
        bool,
        typer.Option(
            "--allow-host-commands",
            help="Let ./flow-runner.toml (found, not named) define flows that run a host "
            "command with no sandbox; a file named with --config may anyway.",
        ),
    ] = False
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the run report as JSON to FILE.")
    ] = None
    quiet: Quiet = False

    @property
    def words(self) -> list[str]:
        """The target and its arguments (none given: empty)."""
        return self.target or []

    @property
    def configured_elsewhere(self) -> bool:
        """Whether settings, attachments or a profile were given, which a flow's
        configuration gives instead."""
        return bool(self.attach) or self.settings_text != "{}" or self.profile != "default"

    def starter(self) -> Starter:
        """Validate everything, then return the coroutine factory that runs it."""
        if not self.words:
            raise UsageError("name an image (flow-runner exec IMAGE) or a command with --process")
        if self.scratch is not None and not self.scratch.is_dir():
            raise UsageError(f"--scratch {self.scratch}: no such directory; create it first")
        self._check_process_options()
        seconds = parse_duration(self.deadline, self.words)
        value = read_input(self.input_text or "null")
        if self.flow is not None:
            return self._stand_in_starter(value, seconds)
        host_config = self._host_config()
        if host_config is not None and self.words[0] in host_config.flows:
            if len(self.words) > 1 or self.configured_elsewhere or self.user is not None:
                raise UsageError(
                    f"{self.words[0]!r} is a configured flow: its command, settings, "
                    "attachments and profile come from the configuration (its user from that "
                    "profile); drop the extra arguments"
                )
            return self._flow_starter(host_config, self.words[0], value, seconds)
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
        host_config = load_config(self.config, self.allow_host_commands)
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
        if self.configured_elsewhere:
            raise UsageError(
                f"--flow {self.flow}: its settings and attachments come from the "
                "configuration; drop --settings, --attach and --profile"
            )
        original = host_config.flows[self.flow]
        package = str(self.package.resolve()) if self.package is not None else None
        stand_in = original.model_copy(
            update={"image": None, "backend": "process", "command": list(self.words),
                    "package": package}
        )  # fmt: skip
        flows = {**host_config.flows, self.flow: stand_in}
        config = host_config.model_copy(update={"flows": flows})
        return self._flow_starter(config, self.flow, value, seconds)

    def _host_config(self) -> HostConfig | None:
        """The configuration, where the target may be one of its flows: an image reference
        (with `/` or `:`) is never a flow name, so no file is read for it."""
        from runner.protocol.names import is_local_name

        if self.process or (self.config is None and not is_local_name(self.words[0])):
            return None
        return load_config(self.config, self.allow_host_commands)

    def _flow_starter(
        self, host_config: HostConfig, name: str, value: JSONValue, seconds: float
    ) -> Starter:
        from runner.config import ConfigError
        from runner.flows import FlowHost

        if any(flow.sandbox_backend == "docker" for flow in host_config.flows.values()):
            _sweep()
        scratch = self._scratch_dir()

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            try:
                host = FlowHost(host_config, stderr_sink=sink, on_host_command=_warn_unsandboxed)
                try:
                    return await host.run(
                        name, value, deadline_seconds=seconds, control=control,
                        scratch_dir=scratch,
                    )  # fmt: skip
                finally:
                    await host.aclose()
            except ConfigError as exc:  # a refusal to _run, which knows no configuration
                raise UsageError(str(exc), "INVALID_CONFIG") from exc

        return start

    def _component_starter(self, value: JSONValue, seconds: float) -> Starter:
        from runner.api import REFUSED_BEFORE_LAUNCH, Invocation, execute
        from runner.package.errors import PackageError
        from runner.package.reader import directory_package, sandbox_package
        from runner.sandbox.base import LaunchRequest
        from runner.sandbox.errors import ImageMissing, SandboxError
        from runner.sandbox.registry import SandboxSpec, open_sandbox

        settings = read_settings(self.settings_text)
        if self.process:
            spec = SandboxSpec("process", command=tuple(self.words))
        else:
            command = tuple(self.words[1:]) or None
            spec = SandboxSpec(
                "docker", image=self.words[0], command=command, profile=self.profile, user=self.user
            )
        try:
            attachments = _attachments(self.attach)
            sandbox, graces = open_sandbox(spec)
            package = directory_package(self.package) if self.package is not None else None
        except (SandboxError, PackageError) as exc:
            raise refusal(exc) from exc
        if spec.backend == "docker":
            _sweep()
        invocation = Invocation.within(
            seconds,
            input=value,
            settings=settings,
            launch=LaunchRequest(attachments, self._scratch_dir()),
            package=package,
        )
        label = " ".join(self.words) if self.process else self.words[0]

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            try:
                execution = await execute(
                    sandbox, invocation, target=label, graces=graces, control=control,
                    stderr_sink=sink,
                )  # fmt: skip
            except ImageMissing as exc:
                raise self._not_an_image(exc) from exc
            verdict = execution.verdict
            error = verdict.error
            refused = verdict.reasons[:1] == (REFUSED_BEFORE_LAUNCH,)
            if self.input_text is None and refused and error and error.code == "INVALID_INPUT":
                package = invocation.package or await sandbox_package(sandbox)
                raise _input_missing(label, package, execution)
            return execution

        return start

    def _not_an_image(self, exc: ImageMissing) -> UsageError:
        """A missing image whose name could be a configured flow's says how to run that."""
        from runner.protocol.names import is_local_name

        message = str(exc)
        if not self.process and self.config is None and is_local_name(self.words[0]):
            name = self.words[0]
            message = (
                f"{name!r} names no flow and no image here: a configured flow of that name "
                f"needs its configuration, exec {name} --config FILE (no --config was given "
                f"and there is no ./flow-runner.toml); as an image, {message}"
            )
        return UsageError(message, "IMAGE_MISSING")

    def _scratch_dir(self) -> Path | None:
        if self.scratch is None:
            return None
        from runner.sandbox.attachments import UntrustedLink, resolve_links

        try:
            return resolve_links(self.scratch)
        except UntrustedLink as exc:
            raise UsageError(f"--scratch {self.scratch} is refused: {exc}") from None
        except OSError as exc:
            raise UsageError(f"--scratch {self.scratch}: {exc.strerror}; fix the path") from None


@app.command("exec")
@command_of(ExecRequest)
def exec_(request: ExecRequest) -> None:
    """Run one component and print its Run result (or its error) as one JSON line."""
    try:
        check_outputs(("--report", request.report))
        execution = _run(request.starter(), request.quiet)
    except UsageError as exc:
        refuse(exc)
    body, status, note = _verdict(execution)
    print_line(body)
    if note:
        typer.echo(note, err=True)
    if request.report is not None:  # a failure now (a full disk) leaves the run's status
        from runner.outputs import write_output

        try:
            write_output(request.report, (execution.report_json() + "\n").encode())
        except OSError as exc:
            typer.echo(
                f"flow-runner: --report {request.report}: the run report could not be written "
                f"({exc.strerror or exc}); the result line above is the run's",
                err=True,
            )
    raise typer.Exit(status)


def _input_missing(label: str, package: Package | None, execution: Execution) -> UsageError:
    """The refusal of a run given no ``--input``: what input its package takes."""
    error = execution.verdict.error
    assert error is not None
    schema = package.schema_documents.get("input") if package is not None else None
    takes = describe_input(schema) if isinstance(schema, dict) else ""
    return UsageError(
        f"no --input given, and {label} does not take null for its input{takes}; give it "
        f"with --input JSON, @FILE or - (flow-runner inspect {label} shows the schema)",
        "INVALID_INPUT",
        error.details,
    )


def describe_input(schema: dict[str, JSONValue]) -> str:
    """``: it takes an object with members ...``, from the schema's top level."""
    from runner import json1

    kind = schema.get("type")
    properties = schema.get("properties")
    required = schema.get("required")
    needed = (
        [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    )
    if not isinstance(properties, dict):
        article = "an" if str(kind)[:1] in "aeiou" else "a"
        return f": it takes {article} {kind}" if isinstance(kind, str) else ""
    members = []
    for name, member in properties.items():
        member_type = member.get("type") if isinstance(member, dict) else None
        shown = f"{name} ({member_type})" if isinstance(member_type, str) else name
        members.append(shown)
    said = f": it takes an object with members {', '.join(members) or 'none'}"
    said += f"; required: {', '.join(needed)}" if needed else "; none required"
    example = {name: _placeholder(properties[name]) for name in needed or list(properties)[:1]}
    return f"{said}, e.g. --input '{json1.dumps(example).decode()}'"


def _placeholder(member: JSONValue) -> JSONValue:
    """A value of the member's declared type, to show in an example."""
    kind = member.get("type") if isinstance(member, dict) else None
    values: dict[str, JSONValue] = {
        "string": "...", "number": 1, "integer": 1, "boolean": True, "object": {}, "array": [],
    }  # fmt: skip
    return values.get(kind, "...") if isinstance(kind, str) else "..."


def _attachments(specs: list[str] | None) -> tuple[Attachment, ...]:
    """The ``--attach`` options parsed; the parser is imported only when there are any."""
    if not specs:
        return ()
    from runner.sandbox.attachments import parse_attachments

    return parse_attachments(specs)


def _warn_unsandboxed(flow: str, command: list[str]) -> None:
    """Said even with --quiet: the user must know a flow escaped the sandbox by design."""
    typer.echo(
        f"flow-runner: flow {flow!r} runs on the host with no sandbox: {' '.join(command)}",
        err=True,
    )


SWEEP_BEFORE_RUN = True
"""Whether ``exec`` sweeps before its run. A warm runner's handler sweeps alongside each
run it serves instead (:func:`sweep_for`), off the run's path: set by
:func:`runner.cli.daemon.preload`."""


def _sweep() -> None:
    """Remove containers of runners that died (even by kill -9) before starting more, and
    have the launch claim the container started ahead (:mod:`runner.cli.head_start`). In a
    warm run, whose handler sweeps after it, only find the engine: here, before the event
    loop, rather than in a worker thread the run would start for it (~1 ms)."""
    from runner.cli import head_start
    from runner.sandbox.docker.engine import default_engine
    from runner.sandbox.docker.sandbox import use_pool
    from runner.sandbox.errors import DockerSandboxError
    from runner.sandbox.gc import sweep

    try:
        if SWEEP_BEFORE_RUN:
            sweep()
            if head_start.current is not None:  # a cold run's pool: its own container
                use_pool(head_start.current)
        else:
            default_engine()
    except DockerSandboxError as exc:
        raise refusal(exc) from exc


def sweep_for(argv: list[str]) -> None:
    """The sweep that the command ``argv`` would have made before its run: ``exec``'s."""
    from runner.sandbox.gc import sweep

    if argv[1:2] == ["exec"]:
        sweep()
