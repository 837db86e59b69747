"""Reading what the user gives: JSON text, @FILE or -, durations, the host configuration."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runner.cli.app import UsageError

if TYPE_CHECKING:
    from runner.config import HostConfig
    from runner.json1 import JSONValue


def _load_config(path: Path | None, allow_host_commands: bool) -> HostConfig | None:
    from runner.config import ConfigError, find_config

    try:
        return find_config(path, allow_host_commands=allow_host_commands)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


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


def parse_duration(text: str) -> float:
    """``--deadline`` as seconds, or a usage error naming the option."""
    from runner.durations import parse_duration as parse

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
