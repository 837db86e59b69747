"""``flow-runner k8s``: render Jobs that run ``flow-runner job``; ``batch import`` of their logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runner.cli.app import UsageError, _fail_usage, batch_app, k8s_app
from runner.cli.inputs import (
    Deadline,
    DefaultDeadline,
    ResultStore,
    command_of,
    parse_duration,
    read_input,
    read_settings,
)

if TYPE_CHECKING:
    from runner.json1 import JSONValue

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
ProfileOption = Annotated[str, typer.Option("--profile", "-p", help="Sandbox profile.")]
PackageOption = Annotated[
    str | None, typer.Option("--package", help="The package directory in the image.")
]
NameOption = Annotated[str | None, typer.Option("--name", help="The Job's name.")]
NamespaceOption = Annotated[str | None, typer.Option("--namespace", "-n", help="Its namespace.")]
TtlOption = Annotated[
    int, typer.Option("--ttl", min=0, help="ttlSecondsAfterFinished: seconds the Job is kept.")
]
RunnerImageOption = Annotated[
    str | None,
    typer.Option(
        "--runner-image",
        help="The runner image the init container copies the wrapper from "
        "(default: flow-runner:VERSION, this version's).",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class K8sJob:
    """What ``k8s job`` renders."""

    target: Annotated[
        list[str], typer.Argument(help="IMAGE [COMMAND ARGS...] (the command: the image's CMD).")
    ]
    input_text: Annotated[str, typer.Option("--input", "-i", help="JSON text, @FILE or -.")] = (
        "null"
    )
    settings_text: Annotated[str, typer.Option("--settings", help="JSON object or @FILE.")] = "{}"
    attach: K8sAttachOption = None
    deadline: Deadline = "5m"
    profile: ProfileOption = "default"
    results: ResultsOption = None
    package: PackageOption = None
    name: NameOption = None
    namespace: NamespaceOption = None
    backoff_limit: Annotated[
        int, typer.Option("--backoff-limit", min=0, help="Retries of the wrapper's failures.")
    ] = 2
    ttl: TtlOption = 86400
    runner_image: RunnerImageOption = None
    output: OutputOption = "yaml"


@k8s_app.command("job")
@command_of(K8sJob)
def k8s_job(request: K8sJob) -> None:
    """Print a Job (and its ConfigMap and NetworkPolicy) running IMAGE as `exec` would."""
    from runner.k8s import manifests

    try:
        value = read_input(request.input_text)
        settings = read_settings(request.settings_text)
        spec = _job_spec(request, request.target, value, settings, request.backoff_limit)
        rendered = manifests.render_job(spec)
    except (UsageError, manifests.RenderError) as exc:
        _fail_usage(str(exc))
    _print_rendered(rendered, request.output)


@dataclass(frozen=True)
class K8sBatch:
    """What ``k8s batch`` renders."""

    manifest: Annotated[Path, typer.Argument(help="A `flow-runner batch` JSON Lines manifest.")]
    image: Annotated[str, typer.Option("--image", help="The image every row runs.")]
    command: Annotated[
        str | None, typer.Option("--command", help="The component's command (shell words).")
    ] = None
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Pods at once.")] = 4
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="backoffLimitPerIndex: retries per row.")
    ] = 1
    max_failed: Annotated[
        int | None,
        typer.Option("--max-failed-indexes", min=0, help="Fail the Job past this many rows."),
    ] = None
    attach: K8sAttachOption = None
    deadline: DefaultDeadline = "5m"
    profile: ProfileOption = "default"
    results: ResultsOption = None
    package: PackageOption = None
    name: NameOption = None
    namespace: NamespaceOption = None
    ttl: TtlOption = 86400
    runner_image: RunnerImageOption = None
    output: OutputOption = "yaml"


@k8s_app.command("batch")
@command_of(K8sBatch)
def k8s_batch(request: K8sBatch) -> None:
    """Print an Indexed Job running each row of MANIFEST in its own pod, and the ConfigMap
    holding the rows; import the pods' logs with `flow-runner batch import`."""
    import shlex

    from runner.k8s import manifests

    try:
        words = shlex.split(request.command) if request.command else []
        spec = _job_spec(request, [request.image, *words], None, {}, 0)
        rows = manifests.batch_rows(request.manifest, spec)
        rendered = manifests.render_batch(
            spec, rows, jobs=request.jobs, retries=request.retries, max_failed=request.max_failed
        )
    except (UsageError, manifests.RenderError) as exc:
        _fail_usage(str(exc))
    _print_rendered(rendered, request.output)


def _job_spec(
    pod: K8sJob | K8sBatch,
    target: list[str],
    value: JSONValue,
    settings: dict[str, JSONValue],
    backoff_limit: int,
) -> Any:
    """The Job's spec from the options both commands share and what each adds."""
    from runner.k8s import manifests
    from runner.sandbox.profiles import ProfileError, load_profile

    try:
        profile = load_profile(pod.profile)
    except ProfileError as exc:
        raise UsageError(str(exc)) from exc
    image, command = target[0], tuple(target[1:])
    runner_image = pod.runner_image or manifests.RUNNER_IMAGE
    command, label = _checked_command(image, command, runner_image)
    mounts = tuple(manifests.parse_mount(spec, profile) for spec in pod.attach or [])
    result_mount = None
    if pod.results is not None:
        result_mount = manifests.parse_mount(f"results={pod.results}:rw", profile, "--results")
    return manifests.JobSpec(
        image, command, profile, parse_duration(pod.deadline), value, settings, mounts,
        result_mount, pod.package or label, pod.name, pod.namespace, backoff_limit, pod.ttl,
        runner_image,
    )  # fmt: skip


def _checked_command(
    image: str, command: tuple[str, ...], runner_image: str
) -> tuple[tuple[str, ...], str | None]:
    """The component's command and package label, with the image checked against the
    wrapper (runner/k8s/images.py) where a local engine has both images; what could not
    be checked is said on stderr."""
    from runner.k8s import images

    facts, why_not = _inspected(image)
    command, label = images.component_command(image, command, facts, why_not)
    if facts is None:
        assert why_not is not None
        typer.echo(f"flow-runner k8s: {images.unchecked(image, why_not)}", err=True)
        return command, label
    wrapper, why_not = _inspected(runner_image)
    if wrapper is None:
        typer.echo(
            f"flow-runner k8s: runner image {runner_image!r} was not inspected ({why_not}): "
            f"not checked that its wrapper is built for {facts.platform}",
            err=True,
        )
    else:
        problem = images.platform_problem(image, facts, runner_image, wrapper)
        if problem is not None:
            raise UsageError(problem)
    return command, label


def _inspected(image: str) -> tuple[Any, str | None]:
    """The image's facts from the local engine, or ``None`` and why they are not known."""
    from runner.k8s.images import ImageFacts

    try:
        from runner.sandbox.docker.engine import default_client

        info = default_client().api.inspect_image(image)  # type: ignore[no-untyped-call]
    except Exception as exc:  # no engine, no such image: said, and rendered without
        kind = type(exc).__name__
        return None, "not on the local engine" if kind == "ImageNotFound" else f"no engine: {kind}"
    return ImageFacts.of(info), None


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
    results: ResultStore = Path("flow-runner-results.sqlite"),
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
