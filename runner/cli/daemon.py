"""``flow-runner daemon start|stop|status``: the warm runner (:mod:`runner.warm`), by hand.

Opt-in: nothing starts a warm runner but ``daemon start``. It saves each later command
the interpreter's start and imports, and stops by itself once unused for ``--idle``. The
``daemon`` commands run in the process that typed them, never handed over.

With ``--pool N`` (1 unless told; 0: none) it also keeps, after a run, up to N containers
of that run's launch configuration started and waiting for a later run of the same one
(:mod:`runner.warm.pool`): such a run skips the engine's create and start (~0.25 s).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import typer

from runner.cli.app import _fail_usage, daemon_app

LAZY = ("anyio._backends._asyncio", "anyio._core._signals", "netrc")
"""Modules the commands import only when they run, beside the whole of ``runner``."""
SKIPPED = ("runner.component", "runner.warm")
"""Not preloaded: the SDK that component images carry, and the warm runner's own code."""
STOP_SECONDS = 10.0


def preload() -> Callable[[Callable[[int], object]], object]:
    """Import every module of flow-runner and what its commands import late, build the
    command tree, and have handlers sweep alongside runs; the CLI's main, which the warm
    runner's runs call."""
    import importlib
    import pkgutil

    import runner

    def walk(path: list[str], prefix: str) -> None:
        for found in pkgutil.iter_modules(path, prefix):
            if found.name.startswith(SKIPPED) or found.name.endswith(".__main__"):
                continue
            module = importlib.import_module(found.name)
            if found.ispkg:
                walk(list(module.__path__), found.name + ".")

    walk(list(runner.__path__), "runner.")
    for name in LAZY:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:  # another version of a dependency: imported when used
            continue
    _pool_backend()
    from runner.cli import exec as exec_command
    from runner.cli.app import main, root
    from runner.warm.handler import sweep_alongside

    exec_command.SWEEP_BEFORE_RUN = False
    sweep_alongside(exec_command.sweep_for)
    root()  # the command tree, built once for every run
    return main


def _pool_backend() -> None:
    """Give the warm runner's pool the Docker backend's prepare, remove and claim."""
    from runner.sandbox.docker import sandbox
    from runner.sandbox.labels import Process, record_claim
    from runner.warm import pool

    def prepare(config: Mapping[str, Any], owner: object) -> tuple[str, str, socket.socket]:
        assert isinstance(owner, Process)
        return sandbox.prepare_pooled(config, owner)

    backend = pool.Backend(
        Process.current, prepare, sandbox.remove_pooled, sandbox.use_pool, record_claim
    )
    pool.register(backend)


@daemon_app.command("start")
def start(
    idle: Annotated[
        str, typer.Option("--idle", help="Stop after this long with no command, e.g. 15m, 2h.")
    ] = "15m",
    pool: Annotated[
        int,
        typer.Option(
            "--pool",
            min=0,
            help="Containers kept started and waiting per launch configuration (an image, "
            "command, profile and mounts, every host path read-only), each used by one "
            "later run; 0: none.",
        ),
    ] = 1,
    pool_idle: Annotated[
        str,
        typer.Option("--pool-idle", help="Remove a waiting container unused this long."),
    ] = "60s",
    pool_max: Annotated[
        int, typer.Option("--pool-max", min=0, help="Containers waiting in all, at most.")
    ] = 4,
    foreground: Annotated[
        bool,
        typer.Option(
            "--foreground",
            help="Serve in this process until stopped (SIGTERM, Ctrl-C) or idle, instead of "
            "in the background: for a service manager or a script that stops it by pid.",
        ),
    ] = False,
) -> None:
    """Start a warm runner for this installation, unless one runs already."""
    import subprocess

    from runner.durations import parse_duration
    from runner.warm import rundir
    from runner.warm.server import READY

    try:
        seconds = parse_duration(idle)
    except ValueError as exc:
        _fail_usage(f"--idle {exc}")
    try:
        pool_seconds = parse_duration(pool_idle)
    except ValueError as exc:
        _fail_usage(f"--pool-idle {exc}")
    if pool_seconds <= 0:
        _fail_usage("--pool-idle must be more than 0 s, e.g. 60s")
    main_spec = getattr(sys.modules["__main__"], "__spec__", None)  # the console script's?
    if "runner.launch" not in sys.modules and getattr(main_spec, "name", None) != "runner.launch":
        _fail_usage(
            "only the flow-runner command (or python -m runner.launch) hands commands to a "
            "warm runner; start it with that"
        )
    try:
        rundir.ensure(rundir.directory(os.environ))
    except (rundir.UnsafeDirectory, OSError) as exc:
        _fail_usage(str(exc))
    command = [sys.executable, *_launch_prefix(), "daemon", "serve", repr(seconds)]
    command += ["--pool", str(pool), "--pool-idle", repr(pool_seconds), "--pool-max", str(pool_max)]
    sys.stdout.flush()
    sys.stderr.flush()
    if foreground:
        os.execv(sys.executable, command)
    server = subprocess.Popen(
        [*command, "--detach"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert server.stderr is not None
    said = server.stderr.read().decode(errors="replace")  # to its ready line, or its end
    sys.stderr.write(said)
    if not said.startswith(READY):
        raise typer.Exit(server.wait())


@daemon_app.command("stop")
def stop() -> None:
    """Stop this installation's warm runner (commands it is running finish first)."""
    import select

    from runner.warm.client import request

    answer = request("stop")
    if answer is None or answer[0].get("stopped") is None:
        typer.echo("flow-runner: no warm runner is running for this installation", err=True)
        return
    reply, fds = answer
    for pidfd in fds:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        ended = poller.poll(STOP_SECONDS * 1000)
        os.close(pidfd)
        if not ended:
            _fail_usage(f"the warm runner (pid {reply['stopped']}) has not stopped yet")
    typer.echo(f"flow-runner: stopped the warm runner (pid {reply['stopped']})", err=True)


@daemon_app.command("status")
def status() -> None:
    """Say whether a warm runner serves this installation, and whether commands from here
    go to it (exit 1 when none runs)."""
    from runner.warm.client import request

    answer = request("status")
    if answer is None or "pid" not in answer[0]:
        typer.echo("no warm runner is running for this installation")
        raise typer.Exit(1)
    reply = answer[0]
    up = time.time() - reply["started"]
    typer.echo(f"pid:        {reply['pid']}")
    typer.echo(f"socket:     {reply['socket']}")
    typer.echo(f"up:         {_duration(up)}")
    typer.echo(f"runs now:   {reply['busy']}")
    typer.echo(f"served:     {reply['connections']} connections before this one")
    typer.echo(f"stops:      after {_duration(reply['idle'])} unused (unused for "
               f"{_duration(reply['quiet'])})")  # fmt: skip
    if reply.get("pool") is not None:
        typer.echo(f"pool:       {reply['pool']} container(s) waiting")
    refusal = reply["refusal"]
    typer.echo("from here:  " + ("commands go to it" if refusal is None else f"refused: {refusal}"))


def _launch_prefix() -> list[str]:
    """How this process was started, up to its arguments: interpreter options and the
    console script, or ``-m runner.launch`` (the server's imports must be the clients')."""
    return sys.orig_argv[1 : len(sys.orig_argv) - len(sys.argv) + 1]


def _duration(seconds: float) -> str:
    """``45 s`` up to two minutes, ``12 min`` up to two hours, then ``3.5 h``."""
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
