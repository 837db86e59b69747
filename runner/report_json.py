"""The run report's JSON text (``exec --report FILE``) written without pydantic.

Building :class:`~runner.report.RunReport` imports pydantic and builds its models' schemas:
about 80 ms of a cold ``flow-runner exec``, for a file of twenty members. A run records
its report's fields (``runner.api.Execution``); :func:`report_json` writes what
``RunReport(**fields).model_dump_json(indent=2)`` would, byte for byte, for the plain
shapes a run's fields have. For anything else (children, a float that is not finite, a
string that is not UTF-8, a value of another type, a member the model does not know)
it answers ``None`` and the caller builds the model: the output is pydantic's either way.
A test holds the two equal over real runs and generated fields.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Final


class _Other(Exception):
    """A value outside the shapes written here: pydantic's to write."""


def _text(value: object) -> str:
    if type(value) is not str:
        raise _Other
    try:
        value.encode()
    except UnicodeEncodeError:
        raise _Other from None
    return json.dumps(value, ensure_ascii=False)


def _float(value: object) -> str:
    """pydantic's float: the shortest repr, in decimals down to 1e-5, then ``1.5e-6``."""
    if type(value) is int:
        value = float(value)
    if type(value) is not float or not math.isfinite(value):
        raise _Other
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    power = int(exponent)
    if power == -5:
        sign = "-" if mantissa.startswith("-") else ""
        return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e{'-' if power < 0 else '+'}{abs(power)}"


def _int(value: object) -> str:
    if type(value) is not int:
        raise _Other
    return str(value)


def _bool(value: object) -> str:
    if type(value) is not bool:
        raise _Other
    return "true" if value else "false"


def _any(value: object, pad: str) -> str:
    """A JSON value of any shape (an error's ``details``)."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is bool:
        return _bool(value)
    if kind is int:
        return _int(value)
    if kind is float:
        return _float(value)
    if kind is str:
        return _text(value)
    if kind is list:
        assert isinstance(value, list)
        return _array([_any(item, pad + "  ") for item in value], pad)
    if kind is dict:
        assert isinstance(value, dict)
        return _object([(_text(k), _any(v, pad + "  ")) for k, v in value.items()], pad)
    raise _Other


def _array(items: list[str], pad: str) -> str:
    if not items:
        return "[]"
    inner = pad + "  "
    return "[\n" + ",\n".join(inner + item for item in items) + "\n" + pad + "]"


def _object(members: list[tuple[str, str]], pad: str) -> str:
    if not members:
        return "{}"
    inner = pad + "  "
    return "{\n" + ",\n".join(f"{inner}{k}: {v}" for k, v in members) + "\n" + pad + "}"


Writer = Callable[[object, str], str]


def _optional(write: Callable[[object], str]) -> Writer:
    return lambda value, _pad: "null" if value is None else write(value)


def _plain(write: Callable[[object], str]) -> Writer:
    return lambda value, _pad: write(value)


def _model(members: tuple[tuple[str, Writer, object], ...], *, optional: bool) -> Writer:
    """A sub-model given as a dict of its fields (a missing one takes its default)."""
    known = {name for name, _, _ in members}

    def write(value: object, pad: str) -> str:
        if value is None and optional:
            return "null"
        if type(value) is not dict or not set(value) <= known:
            raise _Other
        fields = [(name, value.get(name, default), writer) for name, writer, default in members]
        if any(field is _REQUIRED for _, field, _ in fields):
            raise _Other
        inner = pad + "  "
        return _object([(f'"{name}"', writer(field, inner)) for name, field, writer in fields], pad)

    return write


def _literal(*allowed: str) -> Writer:
    def write(value: object, _pad: str) -> str:
        if value not in allowed or type(value) is not str:
            raise _Other
        return _text(value)

    return write


def _strings(value: object, pad: str) -> str:
    if type(value) is not list:
        raise _Other
    assert isinstance(value, list)
    return _array([_text(item) for item in value], pad)


def _timings(value: object, pad: str) -> str:
    if type(value) is not dict:
        raise _Other
    assert isinstance(value, dict)
    return _object([(_text(k), _float(v)) for k, v in value.items()], pad)


def _no_children(value: object, _pad: str) -> str:
    if value != [] or type(value) is not list:
        raise _Other  # a child's report: pydantic's
    return "[]"


_REQUIRED: Final = object()
_OPTIONAL_TEXT: Final = _optional(_text)
_ERROR: Final = (
    ("code", _plain(_text), _REQUIRED),
    ("message", _plain(_text), _REQUIRED),
    ("details", _any, None),
)
_LOSS: Final = (
    ("what", _literal("container", "engine"), _REQUIRED),
    ("step", _plain(_text), _REQUIRED),
    ("seconds", _plain(_float), _REQUIRED),
    ("container_id", _plain(_text), _REQUIRED),
    ("container_left", _plain(_bool), _REQUIRED),
)
_PACKAGE: Final = (
    ("name", _plain(_text), _REQUIRED),
    ("digest", _plain(_text), _REQUIRED),
    ("source", _plain(_text), _REQUIRED),
)
FIELDS: Final[tuple[tuple[str, Writer, object], ...]] = (
    ("run_id", _plain(_text), _REQUIRED),
    ("target", _plain(_text), _REQUIRED),
    ("backend", _plain(_text), _REQUIRED),
    ("package", _model(_PACKAGE, optional=True), None),
    ("status", _literal("succeeded", "failed"), _REQUIRED),
    ("outcome", _OPTIONAL_TEXT, None),
    ("error", _model(_ERROR, optional=True), None),
    ("reasons", _strings, []),
    ("exit_code", _optional(_int), None),
    ("oom_killed", _plain(_bool), False),
    ("host_kill", _OPTIONAL_TEXT, None),
    ("condition", _OPTIONAL_TEXT, None),
    ("lost", _model(_LOSS, optional=True), None),
    ("timings", _timings, {}),
    ("bytes_from_component", _plain(_int), 0),
    ("bytes_to_component", _plain(_int), 0),
    ("component_requests", _plain(_int), 0),
    ("dispatches", _plain(_int), 0),
    ("stderr_bytes", _plain(_int), 0),
    ("stderr_truncated", _plain(_bool), False),
    ("stderr", _plain(_text), ""),
    ("children", _no_children, []),
    ("children_omitted", _plain(_int), 0),
)
"""RunReport's fields in its order, each with its writer and default (a test holds this
to the model); the computed ``unsandboxed`` follows them."""


def report_json(fields: Mapping[str, Any]) -> str | None:
    """``RunReport(**fields).model_dump_json(indent=2)``, or ``None``: build the model."""
    report = _model(FIELDS, optional=False)
    try:
        text = report(dict(fields), "")
        unsandboxed = _bool(fields["backend"] == "process")
    except _Other:
        return None
    return f'{text[:-2]},\n  "unsandboxed": {unsandboxed}\n}}'
