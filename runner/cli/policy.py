"""``flow-runner policy``: prove what a sandbox profile enforces, and compare two."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from runner.cli.app import UsageError, _fail_usage, before_loop, policy_app
from runner.cli.inputs import Attach, check_outputs
from runner.outputs import write_output


@policy_app.command("verify")
def policy_verify(
    profile: Annotated[str, typer.Argument(help="A profile name or a TOML file.")],
    attach: Attach = None,
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
    try:
        check_outputs(("--junit", junit), ("--snapshot", snapshot))
    except UsageError as exc:
        _fail_usage(str(exc))
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
        write_output(junit, render.junit(suite, rows, verification.timings.get("total", 0.0)))
    raise typer.Exit(1 if failed(rows) else 0)


@policy_app.command("diff")
def policy_diff(
    a: Annotated[str, typer.Argument(help="The profile now (a name or a TOML file).")],
    b: Annotated[str, typer.Argument(help="The profile proposed.")],
    attach: Attach = None,
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

    before_loop()
    try:
        return anyio.run(main)
    except* SandboxError as group:  # engine down, probe image missing: nothing ran
        _fail_usage(str(group.exceptions[0]))
