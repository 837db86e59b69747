"""Commands that run no component: ``inspect``, ``gc``, ``doctor`` and ``profiles``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import _fail_usage, app, before_loop, profiles_app


@app.command("inspect")
def inspect_(
    image: Annotated[str, typer.Argument(help="IMAGE[:TAG] carrying a FLOW package.")],
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Read an image's FLOW package without running it and summarise what it declares."""
    import anyio

    from runner import json1
    from runner.package.errors import PackageError
    from runner.package.parse import summary
    from runner.package.reader import sandbox_package
    from runner.sandbox.errors import SandboxError
    from runner.sandbox.registry import SandboxSpec, open_sandbox

    try:
        sandbox, _ = open_sandbox(SandboxSpec("docker", image=image))
        before_loop()
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
    shown: dict[str, object] = {
        **profile.as_json(),
        "enforcement": {"seccomp": seccomp_summary(profile), "disk": disk_summary(profile)},
    }
    typer.echo(json.dumps(shown, indent=2))
