"""The ``flow-runner`` command line (typer): the app and its sub-apps.

The commands live in the modules beside this one, each registering on the app it imports.
A command's module is imported only when that command is run or listed (``--help``), and
heavy modules (docker-py, anyio, pydantic) inside the commands, so that ``--help`` and
``--version`` are instant and ``exec`` pays only for what it uses. Exit statuses:
:mod:`runner.exits`.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
import typer.core
import typer.main
import typer.models

from runner import __version__
from runner.exits import EXIT_CANCELLED, EXIT_USAGE

if TYPE_CHECKING:
    from collections.abc import Callable

    import click

    from runner.json1 import JSONValue


COMMANDS: dict[str, tuple[str, ...]] = {
    "exec": ("exec",),
    "inspect": ("admin",),
    "gc": ("admin",),
    "doctor": ("admin",),
    "job": ("job",),
    "profiles": ("admin",),
    "policy": ("policy",),
    "k8s": ("k8s",),
    "batch": ("batch", "k8s"),
    "daemon": ("daemon",),
}
"""Each command, in ``--help``'s order -> the modules of ``runner.cli`` that register it
and its sub-commands (``k8s`` adds ``batch import``)."""


class LazyCommands(typer.core.TyperGroup):
    """The root group: imports a command's modules and builds it (with typer's own
    builders) the first time it is asked for, instead of every command at start."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        # An unknown name builds them all: click's "Did you mean ...?" reads self.commands.
        for name in [cmd_name] if cmd_name in COMMANDS else COMMANDS:
            if name not in self.commands:
                for module in COMMANDS[name]:
                    importlib.import_module(f"runner.cli.{module}")
                self.commands[name] = _build(name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    cls=LazyCommands,
    help="Run FLOW Run/1 components, each in its own locked-down container.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
profiles_app = typer.Typer(help="Inspect sandbox profiles.", no_args_is_help=True)
policy_app = typer.Typer(
    help="Test what a sandbox profile enforces on this engine, runtime and kernel.",
    no_args_is_help=True,
)
k8s_app = typer.Typer(
    help="Render Kubernetes Jobs that run components with `flow-runner job` in their pods.",
    no_args_is_help=True,
)


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
daemon_app = typer.Typer(
    help="A warm runner that `flow-runner` commands hand their run to: no start-up cost.",
    no_args_is_help=True,
)
SUB_APPS = {
    "profiles": profiles_app,
    "policy": policy_app,
    "k8s": k8s_app,
    "batch": batch_app,
    "daemon": daemon_app,
}
"""The groups of :data:`COMMANDS`; their commands register on them."""


def _build(name: str) -> click.Command:
    """The click command typer builds for ``name`` (registered by now) under the app."""
    short, markup = app.pretty_exceptions_short, app.rich_markup_mode
    if name in SUB_APPS:
        info = typer.models.TyperInfo(SUB_APPS[name], name=name)
        return typer.main.get_group_from_info(
            info, pretty_exceptions_short=short, rich_markup_mode=markup
        )
    for command in app.registered_commands:
        assert command.callback is not None
        if (command.name or typer.main.get_command_name(command.callback.__name__)) == name:
            return typer.main.get_command_from_info(
                command, pretty_exceptions_short=short, rich_markup_mode=markup
            )
    raise LookupError(f"no module of runner.cli registers the command {name!r}")


class UsageError(Exception):
    """A refusal before anything ran: exit status 2, the message on stderr, and from
    ``exec`` the ``{"error": ...}`` line a failed run prints. ``code`` names the check
    that refused (:data:`runner.cli.running.REFUSAL_CODES`)."""

    def __init__(
        self, message: str, code: str = "INVALID_USAGE", details: JSONValue = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


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


def _fail_usage(message: str) -> NoReturn:
    typer.echo(f"flow-runner: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


@functools.cache
def root() -> click.Command:
    """The root command, built once (ahead, in a warm runner: its runs parse at once)."""
    return typer.main.get_command(app)


def main(exiting: Callable[[int], object] | None = None) -> NoReturn:
    """Console-script entry point. Ends with ``os._exit`` once the output is flushed: every
    container is removed and child reaped by then, and the interpreter's teardown is slow.
    ``exiting`` is told the exit status first (a warm run's handler passes it on at once:
    the process's own teardown takes milliseconds more)."""
    try:
        root()()
        code: object = 0
    except SystemExit as exit_:
        code = exit_.code
    except KeyboardInterrupt:  # before (or after) the run's own handlers: see runner.launch
        code = EXIT_CANCELLED
    if isinstance(code, str):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    status = (code if isinstance(code, int) else int(code is not None)) & 0xFF  # as a shell sees it
    if exiting is not None:
        exiting(status)
    os._exit(status)


def before_loop() -> None:
    """Called by every command just before its event loop starts. Turns on the cyclic
    collector the console script paused for start-up, with what exists so far (the imports,
    alive for the whole process) frozen out of its passes; a no-op when it is on. Gives
    SIGINT back to Python's handler, which the loop turns into a cancellation (the console
    script ended the process at once on a Ctrl-C until here: :mod:`runner.launch`)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
