"""``flow-runner job``: the wrapper that runs one component as a Kubernetes pod's entrypoint."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runner.cli.app import UsageError, app
from runner.cli.inputs import Deadline, Quiet, command_of, parse_duration, read_input, read_settings
from runner.cli.running import Starter, _run, _verdict
from runner.exits import EXIT_USAGE, EXIT_WRAPPER

if TYPE_CHECKING:
    from runner.api import Execution
    from runner.host.driver import RunControl
    from runner.json1 import JSONValue


@dataclass(frozen=True)
class JobRequest:
    """What ``job`` was asked to run (the wrapper's side: runner/k8s/wrapper.py)."""

    command: Annotated[
        list[str] | None,
        typer.Argument(help="The component's command: -- COMMAND [ARGS...].", show_default=False),
    ] = None
    input_text: Annotated[
        str,
        typer.Option("--input", "-i", help="Run input: JSON text, @FILE, -, or env:VARIABLE."),
    ] = "null"
    settings_text: Annotated[
        str, typer.Option("--settings", help="Settings object: JSON text, @FILE or env:VARIABLE.")
    ] = "{}"
    deadline: Deadline = "5m"
    package: Annotated[
        Path | None,
        typer.Option(
            "--package", help="The component's FLOW package directory: hold the run to it."
        ),
    ] = None
    attach: Annotated[
        list[str] | None,
        typer.Option("--attach", "-a", help="NAME=PATH[:ro|rw], a path in the pod; repeatable."),
    ] = None
    scratch: Annotated[
        Path | None, typer.Option("--scratch", help="Directory to use as scratch (an emptyDir).")
    ] = None
    results: Annotated[
        Path | None,
        typer.Option("--results", help="Directory to write the run report to (a volume)."),
    ] = None
    termination_log: Annotated[
        Path, typer.Option("--termination-log", help="Where the termination message goes.")
    ] = Path("/dev/termination-log")
    manifest: Annotated[
        Path | None,
        typer.Option("--manifest", help="A `k8s batch` manifest: run the row of --index."),
    ] = None
    index: Annotated[
        str | None,
        typer.Option("--index", help="The manifest row (default: $JOB_COMPLETION_INDEX)."),
    ] = None
    grace: Annotated[
        float, typer.Option("--grace", min=0, help="Seconds from request/cancel to the kill.")
    ] = 2.0
    exit_grace: Annotated[
        float, typer.Option("--exit-grace", min=0, help="Seconds from the result to the kill.")
    ] = 2.0
    quiet: Quiet = False

    def run(self) -> int:
        """Run the job; any error of the wrapper's own is exit 75, never a traceback."""
        from runner.k8s import wrapper

        wrapper.make_undumpable()
        try:
            return self._run(wrapper.Seal())
        except Exception as exc:  # the wrapper's own failure: the pod may be retried
            text = f"{type(exc).__name__}: {exc}"
            typer.echo(
                f"flow-runner job: the wrapper failed: {text}; a retry may succeed", err=True
            )
            return self._finish(EXIT_WRAPPER, text=text)

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
        sys.stderr.buffer.write(wrapper.header_line(seal, row, self.command or []))
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
        data = execution.report_json().encode() + b"\n"
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
        from runner.k8s import wrapper
        from runner.package.errors import PackageError
        from runner.package.reader import directory_package
        from runner.sandbox.attachments import parse_attachments
        from runner.sandbox.base import LaunchRequest
        from runner.sandbox.errors import SandboxError
        from runner.sandbox.registry import SandboxSpec, StopGraces, open_sandbox

        if not self.command:
            raise UsageError("name the component's command: flow-runner job -- COMMAND [ARGS]")
        for option, path in (("--results", self.results), ("--scratch", self.scratch)):
            if path is not None and not path.is_dir():
                raise UsageError(f"{option} {path}: no such directory; mount a volume there")
        row = None
        settings: dict[str, JSONValue]
        if self.manifest is not None:
            if self.input_text != "null" or self.settings_text != "{}":
                raise UsageError("--manifest gives each row its input and settings; drop them")
            index = wrapper.completion_index(self.index)
            name = self.manifest.name.removesuffix(".jsonl").removesuffix(".json")
            row = wrapper.read_row(self.manifest, index, name or self.manifest.name)
            value, settings = row.input, row.settings
        else:
            value = read_input(wrapper.from_env("--input", self.input_text))
            settings = read_settings(wrapper.from_env("--settings", self.settings_text))
        seconds = row.deadline if row is not None and row.deadline else None
        seconds = seconds or parse_duration(self.deadline)
        run_id = new_run_id()
        try:  # the pod is the sandbox: the component is the wrapper's child process
            attachments = parse_attachments(self.attach or [])
            sandbox, _ = open_sandbox(SandboxSpec("process", command=tuple(self.command)))
            package = directory_package(self.package) if self.package is not None else None
        except (SandboxError, PackageError) as exc:
            raise UsageError(str(exc)) from exc
        invocation = Invocation.within(
            seconds, input=value, settings=settings,
            launch=LaunchRequest(attachments, self.scratch, run_id), package=package,
        )  # fmt: skip
        graces = StopGraces(cancel=self.grace, exit=self.exit_grace)
        label = " ".join(self.command)

        async def start(control: RunControl, sink: Callable[[bytes], None] | None) -> Execution:
            return await execute(
                sandbox, invocation, target=label,
                broker=wrapper.PodBroker(), graces=graces, control=control, stderr_sink=sink,
            )  # fmt: skip

        return start, row, run_id


@app.command("job", context_settings={"allow_interspersed_args": False})
@command_of(JobRequest)
def job(request: JobRequest) -> None:
    """Run one component as the entrypoint of a Kubernetes Job's pod (see docs/kubernetes.md).

    The first SIGTERM (the kubelet's) cancels, a second kills. Exit statuses as exec's,
    and 75 when the wrapper itself failed (retrying the pod may succeed).
    """
    raise typer.Exit(request.run())
