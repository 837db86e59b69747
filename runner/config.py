"""Host configuration: named flows, their child slots and capability bindings, limits.

A TOML file (``--config FILE``; ``flow-runner.toml`` in the working directory when present;
docs/configuration.md) validated by pydantic. A flow may run only the children under its
``children`` table and call only the capabilities under its ``capabilities`` table.
Errors name the file, the key and the problem.

A file found in the working directory may be anyone's (a cloned repository), so it cannot
change what a command line means: a flow name is never an image reference (``exec IMAGE``
always runs that image), and a host-command flow (``command``, no ``image``: no sandbox)
is refused in it unless ``--allow-host-commands``. A file named with ``--config`` is
trusted as named.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    ValidationError,
    model_validator,
)

from runner import json1
from runner.durations import parse_duration
from runner.host.channels import ChannelLimits
from runner.host.operations import ENTRY_BYTES, RETAINED_BYTES
from runner.protocol.names import is_local_name


def _local_name(text: str) -> str:
    if not is_local_name(text):
        raise ValueError(
            f"{text!r} is not a name (1-64 of a-z, 0-9 and single inner dashes); rename it"
        )
    return text


def _flow_name(text: str) -> str:
    """A flow name is a name, so that no flow can stand in for an image reference."""
    if not is_local_name(text):
        raise ValueError(
            "a flow name is a name (1-64 of a-z, 0-9 and single inner dashes), never an "
            "image reference, so that `exec IMAGE` always runs the image; rename the flow "
            "and give the image as its `image` key"
        )
    return text


LocalName = Annotated[str, AfterValidator(_local_name)]
FlowName = Annotated[str, AfterValidator(_flow_name)]
DEFAULT_FILE = "flow-runner.toml"


class ConfigError(ValueError):
    """The host configuration cannot be used; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CapabilityConfig(_Strict):
    """One capability slot: a provider (entry point name), its options, its contract."""

    provider: str
    options: dict[str, Any] = Field(default_factory=dict)
    contract: Path | None = None
    """A Capability Contract/1 descriptor the provider's answers are held to."""


class FlowConfig(_Strict):
    """A flow the host may run: where its code is and what it may reach."""

    image: str | None = None
    command: list[str] | None = None
    """Replaces the image's command; without an image, a host process (no sandbox at all)."""
    backend: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    """The sandbox backend; by default ``docker`` with an image, else ``process``."""
    profile: str = "default"
    package: str | None = None
    """The FLOW package directory a flow with no image is held to (relative: to the file)."""
    settings: dict[str, Any] = Field(default_factory=dict)
    attachments: dict[LocalName, str] = Field(default_factory=dict)
    """Attachment name -> ``HOSTPATH[:ro|rw]`` (relative paths: from the config file)."""
    deadline: str | None = None
    """The longest this flow may run, e.g. ``2m``; a child also never outlives its parent."""
    children: dict[LocalName, str] = Field(default_factory=dict)
    """Child-flow slot -> flow name."""
    capabilities: dict[LocalName, CapabilityConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _runnable(self) -> FlowConfig:
        if self.image is None and not self.command:
            raise ValueError("a flow needs an image (or, for a local process, a command)")
        if self.backend == "process" and (self.image is not None or not self.command):
            raise ValueError(
                "backend 'process' runs `command` on the host and no image; drop `image` "
                "(and give `command`), or choose another backend"
            )
        if self.backend == "docker" and self.image is None:
            raise ValueError("backend 'docker' runs an image; give `image`")
        if self.package is not None and self.image is not None:
            raise ValueError(
                "`package` is for a flow that runs no image; an image carries its own package"
            )
        if self.deadline is not None:
            parse_duration(self.deadline)
        try:
            json1.dumps(self.settings)
        except json1.JSON1Error as exc:
            raise ValueError(f"settings must be FLOW JSON/1 values (no dates): {exc}") from exc
        return self

    @property
    def sandbox_backend(self) -> str:
        """The backend this flow runs under, named or implied."""
        return self.backend or ("docker" if self.image is not None else "process")

    @property
    def host_command(self) -> bool:
        """Whether this flow runs as a process on the host, with no sandbox."""
        return self.sandbox_backend == "process"

    @property
    def deadline_seconds(self) -> float | None:
        return parse_duration(self.deadline) if self.deadline is not None else None


class ChannelBounds(RootModel[ChannelLimits]):
    """``[limits.channels]``: the hub's own :class:`ChannelLimits`, so that a bound added
    to the hub is a key of the file."""

    root: ChannelLimits = Field(default_factory=ChannelLimits)

    def limits(self) -> ChannelLimits:
        return self.root


class Limits(_Strict):
    """Host budgets that answer RESOURCE_EXHAUSTED when exceeded."""

    max_depth: int = Field(default=8, ge=1, le=64)
    max_children: int = Field(default=16, ge=1, le=1024)
    """Children running at once under one root run (the whole tree)."""
    retained_result_bytes: int = Field(default=RETAINED_BYTES, ge=ENTRY_BYTES, le=1 << 40)
    """Bytes one run keeps for replaying its operations; once spent, a new operationId is
    RESOURCE_EXHAUSTED."""
    channels: ChannelBounds = Field(default_factory=ChannelBounds)

    @model_validator(mode="before")
    @classmethod
    def _no_count(cls, data: Any) -> Any:
        if isinstance(data, dict) and "retained_results" in data:
            raise ValueError(
                "retained_results (a count of operations) is now retained_result_bytes, "
                "a byte budget; replace it (the default, 67108864, holds 65,535 small "
                "operations)"
            )
        return data


class HostConfig(_Strict):
    """The whole host configuration."""

    limits: Limits = Field(default_factory=Limits)
    flows: dict[FlowName, FlowConfig] = Field(default_factory=dict)
    base_dir: Path = Path(".")
    """Directory relative paths in the file are resolved from (the file's own)."""

    @model_validator(mode="after")
    def _children_exist(self) -> HostConfig:
        for name, flow in self.flows.items():
            for slot, target in flow.children.items():
                if target not in self.flows:
                    raise ValueError(
                        f"flows.{name}.children.{slot} names flow {target!r}, which is not "
                        f"defined; add a [flows.{target}] table or fix the name"
                    )
        return self

    def flow(self, name: str) -> FlowConfig:
        """The flow called ``name``, or a ConfigError listing the ones there are."""
        try:
            return self.flows[name]
        except KeyError:
            known = ", ".join(sorted(self.flows)) or "none"
            raise ConfigError(
                f"no flow named {name!r} in the configuration (flows: {known})"
            ) from None

    def resolve(self, path: str | Path) -> Path:
        """A path from the file, relative to the file's directory."""
        return (self.base_dir / Path(path)).resolve()


def load_config(path: Path) -> HostConfig:
    """Read and validate a configuration file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    data["base_dir"] = str(path.resolve().parent)
    try:
        return HostConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(path, exc)) from exc


def find_config(explicit: Path | None, *, allow_host_commands: bool = False) -> HostConfig | None:
    """``--config FILE``, else ``flow-runner.toml`` here when present, else None.

    The file found here was not asked for: it may not define host-command flows unless
    ``allow_host_commands`` (the user's own opt-in) says so.
    """
    if explicit is not None:
        return load_config(explicit)
    default = Path(DEFAULT_FILE)
    if not default.is_file():
        return None
    config = load_config(default)
    hosted = sorted(name for name, flow in config.flows.items() if flow.host_command)
    if hosted and not allow_host_commands:
        keys = ", ".join(f"flows.{name}" for name in hosted)
        raise ConfigError(
            f"{default.resolve()}: found in the working directory, not named, and {keys} "
            "would run a host command with no sandbox (`command` without `image`); name the "
            f"file (--config {DEFAULT_FILE}) or pass --allow-host-commands to run it"
        )
    return config


def _key(part: str | int) -> str:
    """One part of a key as the file would spell it: a name bare, anything else quoted."""
    text = str(part)
    return text if is_local_name(text) or text.isidentifier() else json.dumps(text)


def _explain(path: Path, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(_key(part) for part in error["loc"] if part != "[key]") or "(top level)"
        problem: str = error["msg"]
        kind = error["type"]
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):  # a model's, a dataclass's
            problem = "unknown key; check its spelling against the documented keys"
        elif kind == "value_error":
            problem = str(error["ctx"]["error"])  # our own message, without "Value error, "
        problems.append(f"{key}: {problem}")
    return f"{path}: invalid configuration: " + "; ".join(problems)
