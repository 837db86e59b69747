"""The batch manifest: JSON Lines, one invocation per line (the fields of :data:`FIELDS`,
:class:`Defaults` standing in for those a line leaves out).

Every line is checked before anything runs, bad lines all listed (:func:`check`); rows are
then read again one at a time, so only the ids are held across a file of 100,000 lines.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runner import json1
from runner.durations import parse_duration
from runner.json1 import JSONValue
from runner.protocol.names import is_local_name
from runner.sandbox.attachments import AttachmentError, check_attachments, parse_attachments
from runner.sandbox.base import Attachment
from runner.sandbox.profiles import ProfileError, SandboxProfile, load_profile, with_user

if TYPE_CHECKING:
    from runner.config import FlowConfig, HostConfig

FIELDS = ("id", "image", "flow", "input", "settings", "attach", "deadline", "profile", "command")
MAX_LINE = 16 << 20
"""Bytes in one manifest line; a longer line is refused (a run's input cannot be larger)."""
_Bad = Callable[[str, str], None]
_Refuse = Callable[[dict[str, JSONValue]], Iterable[tuple[str, str]]]


@dataclass(frozen=True)
class Defaults:
    """What the CLI's options give every line that leaves a field out."""

    image: str | None = None
    flow: str | None = None
    input: JSONValue = None
    settings: dict[str, JSONValue] = field(default_factory=dict)
    attach: tuple[str, ...] = ()
    deadline: str = "5m"
    profile: str | SandboxProfile = "default"
    """A profile's name or path, or the profile itself (which a row may name)."""
    command: tuple[str, ...] | None = None
    user: str | None = None
    """``UID[:GID]`` every image row runs as instead of its profile's user."""


@dataclass(frozen=True)
class Row:
    """One invocation of the manifest, checked."""

    line: int
    id: str
    image: str | None
    flow: str | None
    input: JSONValue
    settings: dict[str, JSONValue]
    attachments: tuple[Attachment, ...]
    deadline: float
    profile: SandboxProfile | None
    """The loaded profile of an image row; a flow row's profile comes from its config."""
    command: tuple[str, ...] | None


class ManifestError(ValueError):
    """The manifest cannot be run; :attr:`problems` lists every bad line."""

    def __init__(self, path: Path, problems: list[str], more: int = 0) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        tail = f"\n  ... and {more} more" if more else ""
        super().__init__(
            f"{path}: {len(problems) + more} problem(s), nothing was run; fix these lines:\n"
            f"{lines}{tail}"
        )


class _Reader:
    """Turns raw lines into rows, loading each profile once."""

    def __init__(
        self, defaults: Defaults, config: HostConfig | None, refuse: _Refuse | None = None
    ) -> None:
        self.defaults = defaults
        self.config = config
        self.refuse = refuse
        self._profiles: dict[str, SandboxProfile | str] = {}
        if isinstance(defaults.profile, SandboxProfile):
            self._profiles[defaults.profile.name] = defaults.profile

    def profile(self, name: str) -> SandboxProfile:
        cached = self._profiles.get(name)
        if cached is None:
            try:
                cached = load_profile(name)
                if self.defaults.user is not None:
                    cached = with_user(cached, self.defaults.user)
            except ProfileError as exc:
                cached = str(exc)
            self._profiles[name] = cached
        if isinstance(cached, str):
            raise ValueError(cached)
        return cached

    def row(self, line: int, raw: bytes, problems: list[str]) -> Row | None:
        """The row on ``line``, or ``None`` with its problems added to ``problems``."""

        def bad(name: str, message: str) -> None:
            problems.append(_problem(line, name, message))

        if len(raw) > MAX_LINE:
            bad("(line)", f"longer than {MAX_LINE} bytes; put large inputs in an attachment")
            return None
        try:
            value = json1.loads(raw)
        except json1.JSON1Error as exc:
            bad("(line)", f"{exc}; each line must be one JSON object")
            return None
        if not isinstance(value, dict):
            bad("(line)", 'not a JSON object; write {"id": ..., ...}')
            return None
        if self.refuse is not None:
            refused = dict(self.refuse(value))
            for name, message in refused.items():
                bad(name, message)
            value = {name: v for name, v in value.items() if name not in refused}
        before = len(problems)
        for name in value:
            if name not in FIELDS:
                bad(name, f"unknown field; the fields are {', '.join(FIELDS)}")
        d = self.defaults
        row_id = value.get("id")
        if not is_local_name(row_id):
            bad("id", f"{row_id!r} is not a LocalName (lowercase letters, digits, single dashes)")
        has_image, has_flow = "image" in value, "flow" in value
        image = value.get("image") if has_image else (None if has_flow else d.image)
        flow = value.get("flow") if has_flow else (None if has_image else d.flow)
        if has_image and has_flow:
            bad("image", "a line names an image or a flow, not both")
        elif image is None and flow is None:
            bad("image", "no image and no flow; give one on the line or with --image/--flow")
        if image is not None and (not isinstance(image, str) or not image):
            bad("image", "must be an image name such as flow-runner/fake-component:latest")
        flow_config = self._flow(flow, bad) if flow is not None else None
        settings = value.get("settings", d.settings)
        if not isinstance(settings, dict):
            bad("settings", "must be a JSON object")
        command = self._command(value, d, bad)
        try:
            deadline = parse_duration(_text(value.get("deadline", d.deadline), "deadline"))
        except ValueError as exc:
            bad("deadline", str(exc))
            deadline = 0.0
        profile = None
        if flow is None:
            try:
                given = d.profile if isinstance(d.profile, str) else d.profile.name
                profile = self.profile(_text(value.get("profile", given), "profile"))
            except ValueError as exc:
                bad("profile", str(exc))
        elif flow_config is not None:
            for name in ("settings", "attach", "profile", "command"):
                if name in value:
                    bad(name, f"flow {flow!r} takes its {name} from the configuration; drop it")
        attachments = self._attachments(value, d, profile, bad) if flow is None else ()
        if len(problems) > before:
            return None
        assert isinstance(row_id, str) and isinstance(settings, dict)
        return Row(
            line, row_id, image if isinstance(image, str) else None,
            flow if isinstance(flow, str) else None, value.get("input", d.input), settings,
            attachments, deadline, profile, command,
        )  # fmt: skip

    def _flow(self, flow: object, bad: _Bad) -> FlowConfig | None:
        from runner.config import ConfigError  # a flow row: the configuration is loaded

        if self.config is None:
            bad("flow", "a flow row needs a host configuration: pass --config FILE")
            return None
        if not isinstance(flow, str):
            bad("flow", "must be the name of a configured flow")
            return None
        try:
            return self.config.flow(flow)
        except ConfigError as exc:
            bad("flow", str(exc))
            return None

    @staticmethod
    def _command(value: dict[str, JSONValue], d: Defaults, bad: _Bad) -> tuple[str, ...] | None:
        if "command" not in value:
            return d.command
        command = value["command"]
        if command is None:
            return None
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(part, str) for part in command)
        ):
            bad("command", 'must be a non-empty list of strings, e.g. ["python3", "main.py"]')
            return None
        return tuple(str(part) for part in command)

    @staticmethod
    def _attachments(
        value: dict[str, JSONValue], d: Defaults, profile: SandboxProfile | None, bad: _Bad
    ) -> tuple[Attachment, ...]:
        specs = value.get("attach", list(d.attach))
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            bad("attach", 'must be a list of "NAME=PATH[:ro|rw]" strings')
            return ()
        try:
            attachments = parse_attachments(str(s) for s in specs)
            if profile is not None:
                check_attachments(attachments, profile.allowed_mounts)
        except AttachmentError as exc:
            bad("attach", str(exc))
            return ()
        return attachments


def _problem(line: int, name: str, message: str) -> str:
    """A bad line: where, which field, and what to change."""
    return f"line {line}: {name}: {message}"


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    return value


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Numbered non-blank lines, read one at a time."""
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            stripped = raw.strip()
            if stripped:
                yield number, stripped


def check(
    path: Path, defaults: Defaults, config: HostConfig | None, *, refuse: _Refuse | None = None
) -> Iterator[Row]:
    """Check every line, then hand out the rows one at a time (reading the file again).

    Raises :class:`ManifestError` (100 problems listed, the rest counted) before the
    first row. ``refuse`` names the fields of a line the caller cannot run, as (field,
    what to change) pairs; the rest of the line is still checked.
    """
    reader = _Reader(defaults, config, refuse)
    problems: list[str] = []
    seen: dict[str, int] = {}
    count = 0
    try:
        for number, raw in _lines(path):
            row = reader.row(number, raw, problems)
            if row is None:
                continue
            count += 1
            first = seen.setdefault(row.id, number)
            if first != number:
                problems.append(_problem(number, "id", f"{row.id!r} is already on line {first}"))
    except OSError as exc:
        raise ManifestError(path, [_problem(0, "(file)", f"cannot read: {exc.strerror}")]) from exc
    if problems:
        raise ManifestError(path, problems[:100], max(0, len(problems) - 100))
    if count == 0:
        raise ManifestError(path, [_problem(0, "(file)", "no invocations; one JSON object a line")])
    return _rows(path, reader)


def rows_on(
    path: Path, defaults: Defaults, config: HostConfig | None, lines: Collection[int]
) -> Iterator[Row]:
    """The rows on ``lines`` of a manifest :func:`check` passed; other lines unparsed."""
    return _rows(path, _Reader(defaults, config), lines)


def _rows(path: Path, reader: _Reader, lines: Collection[int] | None = None) -> Iterator[Row]:
    for number, raw in _lines(path):
        if lines is not None and number not in lines:
            continue
        row = reader.row(number, raw, [])
        assert row is not None, f"{path} changed while the batch read it (line {number})"
        yield row
