"""``flow-runner batch``: run a JSON Lines manifest into a result store, and read stores."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

import typer

from runner.cli.app import UsageError, _fail_usage, batch_app, before_loop
from runner.cli.inputs import (
    DefaultDeadline,
    ResultStore,
    check_outputs,
    load_config,
    parse_duration,
    read_input,
    read_settings,
)
from runner.cli.running import notice, under_signals

if TYPE_CHECKING:
    from runner.batch import Halt


@batch_app.command("run")
def batch_run(
    manifest: Annotated[Path, typer.Argument(help="JSON Lines: one invocation per line.")],
    results: ResultStore = Path("flow-runner-results.sqlite"),
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
    deadline: DefaultDeadline = "5m",
    profile: Annotated[str, typer.Option("--profile", "-p", help="Default profile.")] = "default",
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="Run every image row's container as UID[:GID] instead of its profile's "
            "user, as exec --user does (uid 0 needs a profile with allow_root).",
        ),
    ] = None,
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
        check_outputs(("--results", results), ("--junit", junit), ("--jsonl", jsonl))
        parse_duration(deadline, [str(manifest)])
        value = read_input(input_)
        settings_value = read_settings(settings)
        defaults = Defaults(
            image, flow, value, settings_value, tuple(attach or ()), deadline, profile,
            tuple(shlex.split(command)) if command else None, user,
        )  # fmt: skip
        if user is not None and not all(part.isdigit() for part in user.split(":", 1)):
            raise UsageError(f"--user {user!r}: give numbers, UID or UID:GID (e.g. 1000:1000)")
        if rerun not in (None, "failed", "all"):
            raise UsageError(f"--rerun {rerun!r}: use failed or all")
        again = cast(Literal["none", "failed", "all"], rerun or "none")
        if halt not in ("soon", "now"):
            raise UsageError(f"--halt {halt!r}: use soon or now")
        options = BatchOptions(
            manifest, results, defaults, load_config(config, False), jobs or os.cpu_count() or 1,
            retries, again, _halt(halt_on_failure), halt == "now",
            _shard(shard), "quiet" if quiet else "auto", progress_every, prepare=prepare,
        )  # fmt: skip
    except UsageError as exc:
        _fail_usage(str(exc))
    raise typer.Exit(_run_batch(options, junit, jsonl))


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
    import anyio

    from runner.batch import (
        BatchControl,
        BatchOptions,
        BatchResult,
        ManifestError,
        Store,
        StoreError,
        manifest_name,
        run_batch,
        write_jsonl,
        write_junit,
    )
    from runner.batch.progress import closing
    from runner.sandbox.errors import SandboxError

    assert isinstance(options, BatchOptions)
    control = BatchControl()

    def escalate() -> None:
        if control.stopping and not control.killing:
            notice("flow-runner batch: killing the runs in flight")
            control.kill()
        elif not control.stopping:
            notice("flow-runner batch: stopping (again to kill)")
            control.stop()

    async def work() -> BatchResult:
        return await run_batch(options, control)

    before_loop()
    refusals = (ManifestError, StoreError, SandboxError)
    result = anyio.run(under_signals, work, escalate, refusals)
    if isinstance(result, Exception):
        _fail_usage(str(result))
    status = result.exit_status
    if options.progress != "quiet":
        said = closing(
            result.statuses, planned=result.planned, queued=result.queued,
            halted=result.halted, interrupted=result.interrupted, status=status,
        )  # fmt: skip
        notice(f"flow-runner batch: {said}")
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
    results: Annotated[
        Path | None,
        typer.Argument(help="A batch result store (default: flow-runner-results.sqlite)."),
    ] = None,
    results_option: Annotated[
        Path | None,
        typer.Option("--results", help="The store, named as `batch run --results` names it."),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Print the summary of a result store: counts by status, rows not succeeded."""
    import json

    from runner.batch import Store, StoreError, print_summary, summary

    if results is not None and results_option is not None and results != results_option:
        _fail_usage(f"two stores given ({results} and --results {results_option}); give one")
    results = results or results_option or Path("flow-runner-results.sqlite")
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
        check_outputs(("--output", output))
        written = merge(stores, output)
    except (StoreError, UsageError) as exc:
        _fail_usage(str(exc))
    typer.echo(f"merged {written} row(s) into {output}")


@batch_app.command("diff")
def batch_diff(
    old: Annotated[Path, typer.Argument(help="The earlier result store.")],
    new: Annotated[Path, typer.Argument(help="The later result store.")],
    json_: Annotated[bool, typer.Option("--json", help="One JSON object a changed row.")] = False,
) -> None:
    """List finished rows whose status, outcome, error code or output changed, and rows
    added, removed or given another input (matched by id).

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
            kind = "" if entry["kind"] == "changed" else f"{entry['kind']}: "
            typer.echo(f"{entry['manifest']}/{entry['id']}: {kind}{parts}")
    except StoreError as exc:
        _fail_usage(str(exc))
    raise typer.Exit(1 if changed else 0)
