"""Run the probe under a profile, exactly as a run under it would be started, and judge it.

The probe (images/policy-probe) is an ordinary Run/1 component run through
``runner.api.execute``, the code path of every ``exec``, so what it observes is what a
component under that profile gets; the sandbox records the container's inspect for the
engine view.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from runner.api import Invocation, execute
from runner.policy.battery import Context, Finding, judge, sandbox_ended, unprobed
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
_STRESS_DEADLINE = 60.0
STRESS_TESTS = ("pids", "memory", "cpu")
"""The probe's stress tests (images/policy-probe/probe.py), each its own run."""


@dataclass
class Verification:
    """The rows of one profile, with what it took to get them."""

    profile: SandboxProfile
    rows: list[Finding]
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

    @asynccontextmanager
    async def launch(self, request: LaunchRequest) -> AsyncIterator[RunningComponent]:
        async with self.sandbox.launch(request) as component:
            self.facts = component.facts
            yield component


@dataclass(frozen=True)
class _Probed:
    """One probe run: its observations, or why there are none; its sandbox's facts."""

    observations: Mapping[str, Any] | None
    why: str
    """Why there are no observations: the run's error, or its output."""
    failure: str
    """``why`` with the tail of the probe's stderr."""
    facts: SandboxFacts
    exit_code: int | None
    oom_killed: bool
    stderr: str


async def _probe(
    profile: SandboxProfile,
    attachments: tuple[Attachment, ...],
    given: dict[str, Any],
    image: str,
    seconds: float,
) -> _Probed:
    """Run the probe once with input ``given``; raises RuntimeMissing."""
    sandbox, graces = open_sandbox(
        SandboxSpec("docker", image=image, profile=profile, record_engine=True)
    )
    recorder = _Recorder(sandbox)
    invocation = Invocation.within(seconds, input=given, launch=LaunchRequest(attachments))
    execution = await execute(recorder, invocation, target=image, graces=graces)
    report = execution.report
    result = execution.verdict.result
    output: Any = result.get("output") if result is not None else None
    if isinstance(output, dict) and isinstance(output.get("observations"), dict):
        observations, why, failure = output["observations"], "", ""
    else:
        error = execution.verdict.error
        why = f"{error.code}: {error.message}" if error is not None else f"output {output!r}"
        stderr = report.stderr.strip()[-500:]
        observations = None
        failure = f"the probe did not report ({why}); " + (
            f"its stderr: {stderr}" if stderr else "its stderr was empty"
        )
    return _Probed(
        observations, why, failure, recorder.facts or SandboxFacts(), report.exit_code,
        report.oom_killed, report.stderr,
    )  # fmt: skip


async def verify(
    profile: SandboxProfile,
    attachments: tuple[Attachment, ...] = (),
    *,
    stress: bool = False,
    image: str = PROBE_IMAGE,
) -> Verification:
    """Probe ``profile`` and judge every row; with ``stress``, each stress test runs in a
    sandbox of its own, since one may end its whole sandbox (its row is then judged on
    how). A runtime the engine lacks gives rows saying so; an engine that does not answer
    or a missing probe image raise.
    """
    started = time.perf_counter()
    request = {"attachments": {a.name: a.access for a in attachments}}
    try:
        main = await _probe(profile, attachments, request, image, _DEADLINE)
    except RuntimeMissing as exc:
        rows = unprobed(profile, attachments, stress, str(exc), runnable=False)
        return Verification(profile, rows, {"total": time.perf_counter() - started})
    probed = time.perf_counter()
    timings = dict(main.facts.timings)
    if main.observations is None:
        rows = unprobed(profile, attachments, stress, main.failure)
    else:
        observations = dict(main.observations)
        oom_killed = False
        for test in STRESS_TESTS if stress else ():
            run = await _probe(profile, (), {"stress": test}, image, _STRESS_DEADLINE)
            observations[f"stress.{test}"] = _stress_observation(test, run)
            oom_killed = oom_killed or (test == "memory" and run.oom_killed)
        if stress:
            timings["stress"] = time.perf_counter() - probed
        engine = main.facts.details.get("engine")
        engine = engine if isinstance(engine, dict) else {}
        rows = judge(Context(profile, engine, observations, attachments, oom_killed), stress)
    timings["verdict"] = time.perf_counter() - probed - timings.get("stress", 0.0)
    timings["total"] = time.perf_counter() - started
    return Verification(profile, rows, timings)


def _stress_observation(test: str, run: _Probed) -> Mapping[str, Any]:
    """The stress row's observation: the probe's own; else how its sandbox ended, if the
    test had begun (its progress line on stderr); else why the probe did not report."""
    key = f"stress.{test}"
    if run.observations is not None and key in run.observations:
        observation: Mapping[str, Any] = run.observations[key]
        return observation
    if f"policy-probe: {key}:" in run.stderr:
        value = sandbox_ended(run.exit_code, run.oom_killed, run.stderr)
        last = [line for line in run.stderr.splitlines() if line.strip()][-3:]
        return {"value": value, "evidence": f"{run.why}; its stderr ends: {' / '.join(last)}"}
    return {"error": run.failure}


def environment(profile: SandboxProfile) -> dict[str, str]:
    """What a snapshot is taken on: the engine's version, its kernel, the runtime."""
    from runner.sandbox.docker.engine import default_client

    version = default_client().version()
    return {
        "engine": str(version.get("Version")),
        "kernel": str(version.get("KernelVersion")),
        "runtime": profile.runtime,
    }
