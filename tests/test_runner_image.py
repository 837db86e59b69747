"""The runner image (top-level Dockerfile) as its engine's sibling, driven by pytest-docker.

tests/docker-compose.yml builds the image (``docker-compose build``, network none) and
every test runs the runner as a one-off container of its service, with the engine's
socket and a work directory mounted both at the same path and at ``/elsewhere``. So every
container the runner makes is a sibling on this host, and its bind sources are right only
if the runner translated them through its own mounts. No network is ever created: the
session checks ``docker network ls`` before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execkit import ROOT
from runner.sandbox.labels import machine_key, state_dir

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_sibling_left")]

EXAMPLES = ROOT / "examples"
SLOW = "flow-runner/examples-slow:latest"
WORDCOUNT = "flow-runner/examples-wordcount:latest"
RUNNER_UID = 10001
NOBODY = 65534
LABEL_RUNNER_CONTAINER = "flow-runner.runner-container"


@pytest.fixture
def no_sibling_left(docker_client: Any) -> Iterator[None]:
    """Like conftest's ``no_leaks``, for the containers of runner containers only: every
    container these tests make carries that label, and the engine-wide check races with
    other test sessions' containers."""

    def siblings() -> set[str]:
        found = docker_client.api.containers(all=True, filters={"label": LABEL_RUNNER_CONTAINER})
        return {c["Id"] for c in found}

    before = siblings()
    yield
    assert siblings() <= before, f"containers left behind: {sorted(siblings() - before)}"


@pytest.fixture(scope="session")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host directory the runner container sees at its own path and at /elsewhere.

    Owned by the runner's user (it writes reports, artifacts and doctor's nonces there);
    ``scratch`` belongs to nobody, the components' user, so runs can write it.
    """
    work = tmp_path_factory.mktemp("runner-image")
    shutil.copytree(EXAMPLES / "wordcount" / "sample", work / "sample")
    shutil.copy(ROOT / "runner/host/capabilities/contracts/artifacts.json", work)
    (work / "flow-runner.toml").write_text(
        '[flows.research-report]\nimage = "flow-runner/examples-research-report:latest"\n'
        'deadline = "2m"\nchildren = { research = "research" }\n'
        "[flows.research-report.capabilities.artifacts]\n"
        'provider = "artifacts"\noptions = { root = "artifacts" }\n'
        'contract = "artifacts.json"\n'
        '[flows.research]\nimage = "flow-runner/examples-research:latest"\n'
    )
    for path in (work, *work.rglob("*")):
        os.chown(path, RUNNER_UID, RUNNER_UID)
    (work / "scratch").mkdir()
    os.chown(work / "scratch", NOBODY, NOBODY)
    return work


@pytest.fixture(scope="session")
def docker_compose_command(work: Path, docker_client: Any) -> str:
    """Debian's docker-compose (v1), given the work directory the compose file mounts and
    the recipe label images/build.sh gave the image (the same inputs: compose's build of
    them is labelled alike, so the next images/build.sh keeps it)."""
    recipe = docker_client.images.get("flow-runner:latest").labels["flow-runner.recipe"]
    machine_key()  # the runner containers get the host's label key: gc here judges theirs
    return (
        f"env FLOW_RUNNER_WORK={work} FLOW_RUNNER_RECIPE={recipe} "
        f"FLOW_RUNNER_HOST_STATE={state_dir()} docker-compose"
    )


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(ROOT / "tests" / "docker-compose.yml")


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"flowrunner{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    """Build the image; nothing is started: each test runs its own one-off container."""
    return ["build --quiet"]


@pytest.fixture(scope="session")
def networks_unchanged(docker_client: Any) -> Iterator[None]:
    before = {n.id for n in docker_client.networks.list()}
    yield
    after = {n.id for n in docker_client.networks.list()}
    assert after == before, "compose created or removed a network"


@pytest.fixture(scope="session")
def compose(
    docker_client: Any,  # images/build.sh first: the wheels the compose build needs
    networks_unchanged: None,
    docker_services: Any,
    docker_compose_command: str,
    docker_compose_file: str,
    docker_compose_project_name: str,
) -> list[str]:
    """The compose command line up to the subcommand (the image is built by now)."""
    return [
        *docker_compose_command.split(),
        "-f",
        docker_compose_file,
        "-p",
        docker_compose_project_name,
    ]


def run(compose: list[str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``flow-runner ARGS`` in a one-off runner container, to its end."""
    return subprocess.run(
        [*compose, "run", "--rm", "-T", "runner", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def printed(ran: subprocess.CompletedProcess[str]) -> Any:
    assert ran.stdout.strip(), ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_hello(compose: list[str]) -> None:
    ran = run(compose, "exec", "flow-runner/examples-hello:latest", "--input", '{"name":"Ada"}')
    assert ran.returncode == 0, ran.stderr
    assert printed(ran) == {"outcome": "done", "output": {"greeting": "Hello, Ada!"}}


@pytest.mark.parametrize("inside", ["same path", "/elsewhere"])
def test_wordcount_reads_ro_and_writes_rw_on_the_host(
    compose: list[str], work: Path, inside: str
) -> None:
    # /elsewhere exists only in the runner container: the engine mounts it only if the
    # runner names the host path instead.
    base = str(work) if inside == "same path" else "/elsewhere"
    report = work / "scratch" / "wordcount-report.txt"
    report.unlink(missing_ok=True)
    ran = run(
        compose, "exec", WORDCOUNT, "--input", "{}",
        "--attach", f"source={base}/sample:ro", "--scratch", f"{base}/scratch",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    out = printed(ran)["output"]
    assert out["files"] == 3 and out["per_file"]["poem.txt"]["lines"] == 7
    assert out["source_write"].startswith("refused: [Errno 30] Read-only file system")
    assert report.read_text().splitlines()[-1].split()[0] == "total"  # written, on the host
    assert not (work / "sample" / ".wordcount-write-probe").exists()


def test_a_child_flow_and_a_capability_from_the_runner_container(
    compose: list[str], work: Path
) -> None:
    ran = run(
        compose, "exec", "research-report", "--config", f"{work}/flow-runner.toml",
        "--input", '{"subject":"tides"}',
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    output = printed(ran)["output"]
    assert output["research"]["outcome"] == "done"
    assert output["research"]["output"]["subject"] == "tides"
    assert (work / "artifacts" / "notes" / "tides.txt").stat().st_size == 19


def test_a_path_no_mount_covers_is_refused_before_any_container(
    compose: list[str], docker_client: Any
) -> None:
    since = time.time()
    ran = run(compose, "exec", WORDCOUNT, "--input", "{}", "--attach", "source=/opt/flow-runner:ro")
    until = time.time() + 1
    assert ran.returncode == 2, ran.stderr
    assert "/opt/flow-runner cannot be attached" in ran.stderr
    assert "-v HOSTPATH:/opt/flow-runner" in ran.stderr
    assert json.loads(ran.stdout)["error"]["code"] == "INVALID_ATTACHMENTS"
    events = docker_client.api.events(
        since=since, until=until, decode=True,
        filters={"type": "container", "event": "create",
                 "label": [LABEL_RUNNER_CONTAINER, "flow-runner.run-id"]},
    )  # fmt: skip
    assert list(events) == []  # (the image's package is read through a never-started one)


def test_doctor_proves_both_mounts(compose: list[str], work: Path) -> None:
    ran = run(compose, "doctor", str(work), "/elsewhere")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count("a sibling read the nonce back from bind:" + str(work)) == 2
    assert f"/elsewhere -> bind:{work}" in ran.stdout
    assert "container   yes: " in ran.stdout


def test_doctor_fails_with_the_fix_for_an_uncovered_directory(compose: list[str]) -> None:
    ran = run(compose, "doctor", "/opt")
    assert ran.returncode == 1
    assert "FAIL prove /opt" in ran.stdout and "-v HOSTPATH:/opt" in ran.stdout


@pytest.fixture
def slow_runner(compose: list[str], docker_client: Any) -> Iterator[tuple[Any, Any]]:
    """A runner container running the slow example: (runner container, its run's container)."""
    name = f"flow-runner-test-{uuid.uuid4().hex[:12]}"
    subprocess.run(
        [*compose, "run", "-d", "-T", "--name", name, "runner",
         "exec", SLOW, "--input", '{"seconds": 60}'],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    runner = docker_client.containers.get(name)
    try:
        for line in runner.logs(stream=True, follow=True, stdout=False, stderr=True):
            if b"slow: sleeping" in line:
                break
        children = docker_client.containers.list(
            filters={"label": f"{LABEL_RUNNER_CONTAINER}={runner.id}"}
        )
        assert len(children) == 1, children
        yield runner, children[0]
    finally:
        runner.remove(force=True)


def test_docker_stop_cancels_the_run_and_removes_its_container(
    slow_runner: tuple[Any, Any], docker_client: Any
) -> None:
    runner, child = slow_runner
    started = time.monotonic()
    runner.stop(timeout=10)
    stopped_in = time.monotonic() - started
    runner.reload()
    assert runner.attrs["State"]["ExitCode"] == 130, runner.logs().decode()
    assert stopped_in < 8, f"the stop took {stopped_in:.1f} s: it waited for the kill"
    assert b"slow: cancelled after" in runner.logs()
    assert docker_client.containers.list(all=True, filters={"id": child.id}) == []


def test_after_docker_kill_the_next_sweep_removes_the_run_container(
    slow_runner: tuple[Any, Any], docker_client: Any
) -> None:
    runner, child = slow_runner
    sweep = [sys.executable, "-m", "runner.cli", "gc"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kept = subprocess.run(sweep, capture_output=True, text=True, env=env, check=True)
    assert child.id not in kept.stdout  # its runner container is alive: not ours to judge
    assert docker_client.containers.list(filters={"id": child.id}) != []
    runner.kill()
    runner.wait(timeout=30)
    assert docker_client.containers.list(all=True, filters={"id": child.id}) != []  # left
    swept = subprocess.run(sweep, capture_output=True, text=True, env=env, check=True)
    assert child.id in swept.stdout
    assert docker_client.containers.list(all=True, filters={"id": child.id}) == []
