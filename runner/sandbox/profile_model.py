"""The sandbox profile's pydantic model: what every profile file is validated by.

Strict: an unknown key or a misspelt value names the file and the key, since a typo in
a security policy must not fall back to a default. Loosening is spelt out
(``allow_network``, ``allow_root``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from runner.sandbox.errors import ProfileError
from runner.sandbox.profile_rules import check_not_root, parse_size, read_seccomp, resolve

Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
CapabilityName = Annotated[str, Field(pattern=r"^(?:CAP_)?[A-Z_]+$")]
HostPath = Annotated[Path, Field(strict=False)]
Values = dict[str, object]
"""A validated profile's fields by name, in the model's order."""


class ProfileModel(BaseModel):
    """Limits and privileges for one invocation; sizes are bytes, graces are seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, title="SandboxProfile")

    # pydantic's (Rust) regex: `$` is the end of the text, so "abc\n" does not match.
    name: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$", max_length=64)
    description: str = ""
    runtime: Literal["runc", "runsc"] = "runc"
    user: str = Field(default="65534:65534", pattern=r"^[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.-]+)?$")
    allow_root: bool = False
    read_only_root: bool = True
    network: str = Field(default="none", min_length=1)
    allow_network: bool = False
    memory: Size = 512 << 20
    cpus: float = Field(default=1.0, gt=0, le=1024)
    pids: int = Field(default=256, ge=8)
    nofile: int = Field(default=1024, ge=16)
    scratch_size: Size = 256 << 20
    tmp_size: Size = 64 << 20
    attachment_quota: Size | None = None
    disk_entries: int = Field(default=65536, ge=16)
    disk_poll: float = Field(default=0.2, ge=0.02, le=5.0)
    cap_drop: tuple[CapabilityName, ...] = Field(default=("ALL",), strict=False)
    cap_add: tuple[CapabilityName, ...] = Field(default=(), strict=False)
    no_new_privileges: bool = True
    seccomp: Literal["unconfined"] | HostPath | None = None
    init: bool = True
    cancel_grace: float = Field(default=2.0, ge=0)
    exit_grace: float = Field(default=2.0, ge=0)
    allowed_mounts: tuple[HostPath, ...] = Field(default=(), strict=False)

    _seccomp_json: str | None = PrivateAttr(default=None)

    @property
    def seccomp_json(self) -> str | None:
        """The seccomp profile's JSON text, read once at validation, or ``None``."""
        return self._seccomp_json

    @field_validator("seccomp", mode="after")
    @classmethod
    def _resolve_seccomp(cls, value: Path | str | None, info: ValidationInfo) -> Path | str | None:
        return resolve(value, _base(info)) if isinstance(value, Path) else value

    @field_validator("allowed_mounts", mode="after")
    @classmethod
    def _resolve_mounts(cls, value: tuple[Path, ...], info: ValidationInfo) -> tuple[Path, ...]:
        return tuple(resolve(path, _base(info)) for path in value)

    @model_validator(mode="after")
    def _check_network_and_load_seccomp(self) -> Self:
        if not self.allow_root:
            check_not_root(self.user)
        if self.network != "none" and not self.allow_network:
            raise ValueError(
                f"key 'network' = {self.network!r} is refused: components run with network "
                "'none'; set allow_network = true next to it to open the network on purpose"
            )
        if isinstance(self.seccomp, Path):
            self._seccomp_json = read_seccomp(self.seccomp)
        return self


def _base(info: ValidationInfo) -> Path | None:
    base: Path | None = (info.context or {}).get("base_dir")
    return base


def validate(data: Mapping[str, object]) -> tuple[Values, str | None]:
    """``data`` as a profile's values and its seccomp JSON, or pydantic's ValidationError."""
    return _values(ProfileModel.model_validate(data))


def validate_file(path: Path, data: Mapping[str, object]) -> tuple[Values, str | None]:
    """The profile file ``path`` holding ``data``, validated; else a ProfileError."""
    try:
        model = ProfileModel.model_validate(data, context={"base_dir": path.parent})
    except ValidationError as exc:
        problems = "; ".join(_explain(error) for error in exc.errors())
        raise ProfileError(f"sandbox profile {path}: {problems}") from None
    return _values(model)


def validate_user(values: Values, user: str, *, given: str) -> tuple[Values, str | None]:
    """A profile's ``values`` run as ``user`` (``UID:GID``, from ``--user given``),
    validated again; a ProfileError naming the option and the profile if it refuses it."""
    try:
        return _values(ProfileModel.model_validate({**values, "user": user}, strict=False))
    except ValidationError as exc:
        problems = "; ".join(
            str(error["msg"]).removeprefix("Value error, ") for error in exc.errors()
        )
        raise ProfileError(
            f"--user {given!r} with profile {values['name']!r}: {problems}"
        ) from None


def _values(model: ProfileModel) -> tuple[Values, str | None]:
    return {name: getattr(model, name) for name in ProfileModel.model_fields}, model.seccomp_json


def _explain(error: ErrorDetails) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "(profile)"
    if error["type"] == "extra_forbidden":
        known = ", ".join(ProfileModel.model_fields)
        return f"unknown key {key!r}; remove or rename it (known keys: {known})"
    message = str(error["msg"]).removeprefix("Value error, ")
    if key in {"memory", "scratch_size", "tmp_size", "attachment_quota"}:
        message += ' (write a size such as "512m" or "2g")'
    if key == "(profile)":
        return message
    return f"key {key!r} = {error['input']!r}: {message}; fix the value"
