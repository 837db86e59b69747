"""What the user gives: the options several commands share (one definition each), and
reading values (JSON text, @FILE or -, durations, the host configuration)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from runner.cli.app import UsageError

if TYPE_CHECKING:
    from runner.config import HostConfig
    from runner.json1 import JSONValue

Attach = Annotated[
    list[str] | None,
    typer.Option("--attach", "-a", help="NAME=HOSTPATH[:ro|rw] (default ro); repeatable."),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Do not echo the component's stderr.")]
Deadline = Annotated[str, typer.Option("--deadline", "-d", help="Time allowed.")]
DefaultDeadline = Annotated[str, typer.Option("--deadline", "-d", help="Default deadline.")]
ResultStore = Annotated[
    Path, typer.Option("--results", help="The SQLite result store (created if missing).")
]

Request = TypeVar("Request")


def command_of(record: type[Request]) -> Callable[[Callable[[Request], None]], Callable[..., None]]:
    """Make ``run(request)`` a typer command whose options are the fields of the dataclass
    ``record``: each option is declared once, on the record the command then works with."""

    def wrap(run: Callable[[Request], None]) -> Callable[..., None]:
        def command(**given: Any) -> None:
            run(record(**given))

        command.__signature__ = inspect.signature(record, eval_str=True)  # type: ignore[attr-defined]
        command.__name__, command.__doc__ = run.__name__, run.__doc__
        return command

    return wrap


def load_config(path: Path | None, allow_host_commands: bool) -> HostConfig | None:
    from runner.config import ConfigError, find_config

    try:
        return find_config(path, allow_host_commands=allow_host_commands)
    except ConfigError as exc:
        raise UsageError(str(exc), "INVALID_CONFIG") from exc


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


def read_input(text: str) -> JSONValue:
    """``--input``: JSON text, @FILE or - (standard input)."""
    return _read_json("--input", text)


def read_settings(text: str) -> dict[str, JSONValue]:
    """``--settings``: a JSON object given as JSON text, @FILE or -; anything else is a
    usage error naming the fix."""
    settings = _read_json("--settings", text)
    if not isinstance(settings, dict):
        raise UsageError("--settings must be a JSON object, for example '{}'")
    return settings


UNIT_WORDS = frozenset(
    {"ms", "s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute", "minutes"}
    | {"h", "hr", "hrs", "hour", "hours"}
)
"""Words a user may put after a number as its unit, apart from it (``--deadline 2 minutes``)."""


def parse_duration(text: str, words: list[str] | None = None) -> float:
    """``--deadline`` as seconds, or a usage error naming the option.

    A number needs its unit (``10s``, ``2m``): a bare ``10`` could mean seconds or
    minutes, so it is refused. ``words`` are the command's other arguments: a unit among
    them (``--deadline 2 minutes IMAGE`` gives ``minutes`` as the image) is named.
    """
    from runner.durations import parse_duration as parse

    stripped = text.strip()
    if stripped.replace(".", "", 1).isdigit():
        stray = next((word for word in words or () if word.lower() in UNIT_WORDS), None)
        if stray is not None:
            raise UsageError(
                f"--deadline {text} {stray}: write the duration as one word, "
                f"say --deadline {stripped}{'ms' if stray == 'ms' else stray[0].lower()} "
                f"({stray!r} was read as the next argument)"
            )
        raise UsageError(
            f"--deadline {text}: give the unit, say {stripped}s (or {stripped}m, "
            f"{stripped}h, {stripped}ms)"
        )
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"--deadline {exc}") from exc


def check_outputs(*outputs: tuple[str, Path | None]) -> None:
    """Each ``(option, path)`` given can be written, or a usage error naming it and the
    fix: checked before anything runs."""
    from runner.outputs import OutputPathError, check_output

    for option, path in outputs:
        if path is not None:
            try:
                check_output(path, option)
            except OutputPathError as exc:
                raise UsageError(str(exc)) from None
