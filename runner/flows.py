"""Running configured flows: a root run and its tree of child flows.

A :class:`FlowHost` holds what one run tree shares: the configuration, the capability
bindings (each provider built once) and the budget of children running at once. Each
flow gets its own sandbox, profile, scratch and attachments; a child inherits only the
remaining deadline, and its report nests in its parent's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from runner.api import Execution, Invocation, execute, new_run_id
from runner.config import CapabilityConfig, ConfigError, FlowConfig, HostConfig
from runner.host.broker import CallContext, CapabilitySlot, ChildBudget, FlowBroker, child_failure
from runner.host.channels import ChannelHub, ChannelOffer, ChannelParty
from runner.host.driver import RunControl
from runner.json1 import JSONValue
from runner.package.errors import InvocationRefused, PackageError
from runner.package.reader import directory_package, sandbox_package
from runner.protocol.codes import OperationError
from runner.report import RunReport
from runner.sandbox.base import Attachment, LaunchRequest, Sandbox
from runner.sandbox.registry import SandboxSpec, open_sandbox

if TYPE_CHECKING:
    from runner.host.capabilities import CapabilityBinding, ContractIdentity
    from runner.package.parse import Package

PATH_OPTIONS = frozenset({"root", "path"})
"""Provider options that name host paths; relative ones start at the config file."""
CHILD_REPORTS = 256
"""Child reports a run tree keeps over all its levels; later ones are only counted
(``children_omitted``): children may come by the thousand, kept until the root ends."""
CHILD_STDERR = 1 << 16
"""Characters of a child's stderr (the last ones) its parent's report keeps."""
BUILTIN_PROVIDERS = frozenset({"artifacts", "kv"})


class FlowHost:
    """Runs named flows from a host configuration."""

    def __init__(
        self,
        config: HostConfig,
        *,
        stderr_sink: Callable[[bytes], None] | None = None,
        on_host_command: Callable[[str, list[str]], None] | None = None,
    ) -> None:
        self.config = config
        self.stderr_sink = stderr_sink
        self.on_host_command = on_host_command
        """Told (flow name, command) before a flow starts as a host process, unsandboxed."""
        self._bindings: dict[tuple[str, str], CapabilityBinding] = {}
        """Each (flow, slot)'s provider, built once for the whole tree."""

    async def run(
        self,
        name: str,
        input: JSONValue,
        *,
        deadline_seconds: float,
        control: RunControl | None = None,
        scratch_dir: Path | None = None,
        run_id: str | None = None,
    ) -> Execution:
        """Run flow ``name`` as a root run (under ``run_id``, else a new one)."""
        flow = self.config.flow(name)
        cap = flow.deadline_seconds
        seconds = min(deadline_seconds, cap) if cap is not None else deadline_seconds
        deadline = int((time.time() + seconds) * 1000)
        limits = self.config.limits
        tree = _Tree(ChildBudget(limits.max_children), ChannelHub(limits.channels.limits()))
        return await self._run(
            name, input, deadline, tree, depth=0, parent=None, control=control,
            scratch_dir=scratch_dir, run_id=run_id, from_launch=seconds,
        )  # fmt: skip

    async def _run(
        self,
        name: str,
        input: JSONValue,
        deadline_unix_ms: int,
        tree: _Tree,
        *,
        depth: int,
        parent: str | None,
        control: RunControl | None = None,
        scratch_dir: Path | None = None,
        on_stopped: Callable[[Execution], None] | None = None,
        stop_grace: float | None = None,
        giver: ChannelParty | None = None,
        mapping: Mapping[str, str] | None = None,
        run_id: str | None = None,
        from_launch: float | None = None,
    ) -> Execution:
        """Run flow ``name``, stopped through ``control`` (:func:`_stopped_as_one`) and
        killed ``stop_grace`` seconds (``None``: its own cancel grace) after its task is
        cancelled. A root's deadline is ``from_launch`` seconds from its launch."""
        flow = self.config.flow(name)
        children = _Children(tree)
        run_id = run_id or new_run_id()
        party = tree.hub.party(run_id)
        control = control or RunControl()
        running: set[RunControl] = set()
        """The controls of this run's children while they run: its kill kills them."""

        async def run_child(
            child: str, child_input: JSONValue, call: CallContext, channels: Mapping[str, str]
        ) -> dict[str, JSONValue]:
            child_flow = self.config.flow(child)
            deadline = call.deadline_unix_ms
            if child_flow.deadline_seconds is not None:
                deadline = min(deadline, int((time.time() + child_flow.deadline_seconds) * 1000))
            own = RunControl()
            if control.kill_requested.is_set():
                own.kill()
            running.add(own)
            try:
                execution = await self._run(
                    child, child_input, deadline, tree, depth=call.depth + 1,
                    parent=call.run_id, control=own, stop_grace=graces.cancel,
                    on_stopped=lambda stopped: children.add(stopped.report),
                    giver=party, mapping=channels,
                )  # fmt: skip
            except (InvocationRefused, PackageError) as exc:  # the parent cannot fix this
                raise OperationError(
                    "EXECUTION_FAILED", f"child flow {child!r} was not started: {exc}"
                ) from exc
            finally:
                running.discard(own)
            children.add(execution.report)
            if execution.verdict.result is not None:
                return execution.verdict.result
            assert execution.verdict.error is not None
            raise child_failure(execution.verdict.error, execution.report.dispatches)

        sandbox, graces = open_sandbox(self._spec(flow))
        package = await self._package(flow, sandbox)
        self._check_package(name, flow, package)
        if flow.host_command and self.on_host_command is not None:
            assert flow.command is not None
            self.on_host_command(name, flow.command)
        broker = FlowBroker(
            children=flow.children,
            capabilities=self._capabilities(name, flow),
            run_child=run_child,
            budget=tree.budget,
            max_depth=self.config.limits.max_depth,
            channels=party,
        )
        invocation = Invocation(
            input=input,
            settings=dict(flow.settings),
            deadline_unix_ms=deadline_unix_ms,
            deadline_seconds=from_launch,
            launch=LaunchRequest(
                self._attachments(flow), scratch_dir, run_id, parent_run_id=parent
            ),
            channels=ChannelOffer(party, giver, mapping or {}),
            package=package,
        )
        start = partial(
            execute,
            sandbox,
            invocation,
            target=f"{name} ({flow.image or ' '.join(flow.command or [])})",
            broker=broker,
            graces=graces,
            control=control,
            stderr_sink=self.stderr_sink,
            depth=depth,
            retained_bytes=self.config.limits.retained_result_bytes,
        )
        execution = await _stopped_as_one(
            start,
            control,
            running,
            graces.cancel if stop_grace is None else stop_grace,
            None if on_stopped is None else lambda stopped: on_stopped(children.into(stopped)),
        )
        return children.into(execution)

    def _check_package(self, name: str, flow: FlowConfig, package: Package | None) -> None:
        """Refuse, before anything starts, capability slots the package does not declare
        in ``uses`` or bound to another contract: a configuration error."""
        if package is None or not flow.capabilities:
            return
        from runner.package.checks import check_capability_slots

        where = f"{self.config.base_dir}: flows.{name}.capabilities"
        try:
            check_capability_slots(package, flow.capabilities, where=where)
        except InvocationRefused as exc:
            raise ConfigError(exc.message) from exc
        for slot, binding in flow.capabilities.items():
            declared = package.uses[slot]
            if declared is None:
                continue  # `local: true`: a nonportable seam, any provider may serve it
            served = self._served_identity(binding)
            if served != declared.identity:
                raise ConfigError(
                    f"{where}.{slot}: package {package.name!r} uses contract "
                    f"{declared.identity} but provider {binding.provider!r} is bound to "
                    f"{served or 'no contract'}; bind a provider for exactly that contract "
                    "(give `contract` the package's descriptor)"
                )

    def _served_identity(self, binding: CapabilityConfig) -> ContractIdentity | None:
        """The contract a binding answers to: configured, else a built-in provider's own."""
        from runner.host.capabilities import ContractError, builtin_contract, load_contract

        try:
            if binding.contract is not None:
                return load_contract(self.config.resolve(binding.contract)).identity
        except ContractError as exc:
            raise ConfigError(f"{self.config.base_dir}: {exc}") from exc
        if binding.provider in BUILTIN_PROVIDERS:
            return builtin_contract(binding.provider).identity
        return None

    async def _package(self, flow: FlowConfig, sandbox: Sandbox) -> Package | None:
        """The package the flow is held to: its configured directory, or its image's."""
        if flow.package is None:
            return await sandbox_package(sandbox)
        return await anyio.to_thread.run_sync(directory_package, self.config.resolve(flow.package))

    def _spec(self, flow: FlowConfig) -> SandboxSpec:
        """The flow's sandbox, its profile and working directory relative to the file."""
        command = tuple(flow.command) if flow.command is not None else None
        base = self.config.base_dir
        if flow.sandbox_backend == "process":
            return SandboxSpec("process", command=command, cwd=base)
        return SandboxSpec(
            flow.sandbox_backend, image=flow.image, command=command, profile=flow.profile,
            base_dir=base, cwd=base,
        )  # fmt: skip

    def _attachments(self, flow: FlowConfig) -> tuple[Attachment, ...]:
        from runner.sandbox.attachments import parse_attachments

        specs = []
        for name, spec in flow.attachments.items():
            path, sep, mode = spec.rpartition(":")
            if not sep or mode not in ("ro", "rw"):
                path, mode = spec, "ro"
            # Not resolved: the parser judges every symlink on the way.
            specs.append(f"{name}={self.config.base_dir / path}:{mode}")
        return parse_attachments(specs)

    def _capabilities(self, name: str, flow: FlowConfig) -> dict[str, CapabilitySlot]:
        for slot, binding in flow.capabilities.items():
            if (name, slot) not in self._bindings:
                where = f"flows.{name}.capabilities.{slot}"
                self._bindings[name, slot] = self._bind(where, slot, binding)
        return {slot: self._bindings[name, slot] for slot in flow.capabilities}

    def _bind(self, where: str, slot: str, binding: CapabilityConfig) -> CapabilityBinding:
        """Build a slot's provider once; its contract must be the provider's own."""
        from runner.host.capabilities import (
            CapabilityBinding,
            ContractError,
            ProviderConfigError,
            builtin_contract,
            load_contract,
            load_provider,
        )

        options = {
            key: str(self.config.resolve(value)) if key in PATH_OPTIONS else value
            for key, value in binding.options.items()
        }
        try:
            provider = load_provider(binding.provider, options)
            contract = (
                load_contract(self.config.resolve(binding.contract)) if binding.contract else None
            )
        except (ProviderConfigError, ContractError) as exc:
            raise ConfigError(f"{self.config.base_dir}: {where}: {exc}") from exc
        if contract is not None and binding.provider in BUILTIN_PROVIDERS:
            own = builtin_contract(binding.provider).identity
            if contract.identity != own:
                raise ConfigError(
                    f"{where}: the contract {contract.identity} is not the one provider "
                    f"{binding.provider!r} implements ({own}); bind the matching descriptor"
                )
        return CapabilityBinding(slot, provider, contract, provider_name=binding.provider)

    async def aclose(self) -> None:
        """Release every provider this host built (database connections and the like)."""
        for binding in self._bindings.values():
            await binding.aclose()
        self._bindings.clear()


async def _stopped_as_one(
    start: Callable[[], Awaitable[Execution]],
    control: RunControl,
    running: set[RunControl],
    grace: float,
    on_stopped: Callable[[Execution], None] | None,
) -> Execution:
    """Run ``start`` (one flow's execution) so that its whole tree stops as one.

    A run's own stop (cancel, grace, kill) would begin only after its children's, so down
    a tree the graces would add up. Instead the execution runs shielded, and cancelling
    the task awaiting this becomes ``control.cancel()``, which every level receives at
    once; ``grace`` seconds later the run is killed, and a kill of ``control`` kills the
    controls in ``running`` (its children) too. The cancellation goes on once the run has
    ended, its execution handed to ``on_stopped``.
    """
    ended = anyio.Event()
    finished: list[Execution | Exception] = []

    async def run() -> None:
        try:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_kill_with, control, running)
                    try:
                        finished.append(await start())
                    except Exception as exc:  # raised where it was awaited, not in a group
                        finished.append(exc)
                    tg.cancel_scope.cancel()
        finally:
            ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            await ended.wait()
        except anyio.get_cancelled_exc_class():
            control.cancel()
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(grace):
                    await ended.wait()
                control.kill()
                await ended.wait()
            stopped = finished[0] if finished else None
            if on_stopped is not None and isinstance(stopped, Execution):
                on_stopped(stopped)
            raise
    (outcome,) = finished
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


async def _kill_with(control: RunControl, running: set[RunControl]) -> None:
    """Once ``control`` is killed, kill the controls in ``running`` (a run's children)."""
    await control.kill_requested.wait()
    for child in list(running):
        child.kill()


@dataclass
class _Tree:
    """What one run tree shares: its budget of children running at once, its channel hub,
    and how many more child reports it keeps (:data:`CHILD_REPORTS` in all)."""

    budget: ChildBudget
    hub: ChannelHub
    reports_left: int = CHILD_REPORTS


@dataclass
class _Children:
    """A run's children's reports within the tree's bound, each stderr cut to
    :data:`CHILD_STDERR`; the rest counted."""

    tree: _Tree
    kept: list[RunReport] = field(default_factory=list)
    omitted: int = 0

    def add(self, report: RunReport) -> None:
        if self.tree.reports_left <= 0:
            self.omitted += 1
            return
        self.tree.reports_left -= 1
        if len(report.stderr) > CHILD_STDERR:
            tail = report.stderr[-CHILD_STDERR:]
            report = replace(report, stderr=tail, stderr_truncated=True)
        self.kept.append(report)

    def into(self, execution: Execution) -> Execution:
        """``execution``, its report given these children."""
        execution.report = replace(
            execution.report, children=self.kept, children_omitted=self.omitted
        )
        return execution
