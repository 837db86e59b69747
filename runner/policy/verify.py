"""Run the probe under a profile, exactly as a run under it would be started, and judge it.

The probe (images/policy-probe) is an ordinary Run/1 component: it goes through
``runner.api.execute`` in the Docker backend's sandbox of (probe image, profile), the code
path every
``exec`` takes (user, mounts, tmpfs, limits, seccomp, runtime, the given attachments), so
what it observes is what a component under that profile gets. The sandbox is asked to
record the running container's inspect (``record_engine``) for the engine column.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from runner.api import Invocation, execute
from runner.policy.battery import Context, Row, judge, skipped
from runner.sandbox.base import (
    Attachment,
    ImageSource,
    LaunchRequest,
    RunningComponent,
    Sandbox,
    SandboxFacts,
)
from runner.sandbox.errors import RuntimeMissing
from runner.sandbox.profiles import SandboxProfile
from runner.sandbox.registry import SandboxSpec, open_sandbox

PROBE_IMAGE = "flow-runner/policy-probe:latest"
_DEADLINE = 30.0
_STRESS_DEADLINE = 120.0


@dataclass
class Verification:
    """The rows of one profile, with what it took to get them."""

    profile: SandboxProfile
    rows: list[Row]
    timings: dict[str, float] = field(default_factory=dict)


class _Recorder:
    """A sandbox that is the given one, keeping the launched component's facts."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.name = sandbox.name
        self.facts: SandboxFacts | None = None

    async def image_source(self) -> ImageSource | None:
        return await self.sandbox.image_source()

    def planned_paths(self, request: LaunchRequest) -> tuple[Mapping[str, str], str]:
        return self.sandbox.planned_paths(request)

    def launch(self, request: LaunchRequest) -> AbstractAsyncContextManager[RunningComponent]:
        return self._launch(request)

    @asynccontextmanager
    async def _launch(self, request: LaunchRequest) -> AsyncIterator[RunningComponent]:
        async with self.sandbox.launch(request) as component:
            self.facts = component.facts
            yield component


async def verify(
    profile: SandboxProfile,
    attachments: tuple[Attachment, ...] = (),
    *,
    stress: bool = False,
    image: str = PROBE_IMAGE,
) -> Verification:
    """Probe ``profile`` once and judge every row.

    A runtime the engine lacks (runsc) gives SKIP rows naming the command that registers
    it; an engine that does not answer or a missing probe image raise (nothing ran).
    """
    started = time.perf_counter()
    sandbox, graces = open_sandbox(
        SandboxSpec("docker", image=image, profile=profile, record_engine=True)
    )
    recorder = _Recorder(sandbox)
    invocation = Invocation.within(
        _STRESS_DEADLINE if stress else _DEADLINE,
        input={"attachments": {a.name: a.access for a in attachments}, "stress": stress},
        launch=LaunchRequest(attachments),
    )
    try:
        execution = await execute(
            recorder, invocation, target=image, graces=graces,
        )  # fmt: skip
    except RuntimeMissing as exc:
        rows = skipped(profile, attachments, stress, "SKIP", str(exc))
        return Verification(profile, rows, {"total": time.perf_counter() - started})
    probed = time.perf_counter()
    facts = recorder.facts or SandboxFacts()
    timings = dict(facts.timings)
    result = execution.verdict.result
    output: Any = result.get("output") if result is not None else None
    if not isinstance(output, dict) or not isinstance(output.get("observations"), dict):
        error = execution.verdict.error
        why = f"{error.code}: {error.message}" if error is not None else f"output {output!r}"
        stderr = execution.report.stderr.strip()[-500:]
        reason = f"the probe did not report ({why})" + (f"; stderr: {stderr}" if stderr else "")
        rows = skipped(profile, attachments, stress, "ERROR", reason)
    else:
        engine = facts.details.get("engine")
        ctx = Context(
            profile,
            engine if isinstance(engine, dict) else {},
            output["observations"],
            attachments,
            oom_killed=execution.report.oom_killed,
        )
        rows = judge(ctx, stress)
    timings["verdict"] = time.perf_counter() - probed
    timings["total"] = time.perf_counter() - started
    return Verification(profile, rows, timings)


def environment(profile: SandboxProfile) -> dict[str, str]:
    """What a snapshot is taken on: the engine's version, its kernel, the runtime."""
    from runner.sandbox.docker.engine import default_client

    version = default_client().version()
    return {
        "engine": str(version.get("Version")),
        "kernel": str(version.get("KernelVersion")),
        "runtime": profile.runtime,
    }
