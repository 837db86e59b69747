"""Shared fixtures.

Docker tests (marker ``docker``) never skip themselves: without an engine they fail, with
the fix in the message. The images they need are built once per session by
``images/build.sh``, which skips every image whose recipe has not changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

os.environ["FLOW_RUNNER_WARM"] = "0"
"""Every command a test starts runs in its own process, whatever warm runner serves this
installation on the machine (a pooled run's container is the server's, not the command's:
tests that look for a command's containers would not find them). tests/test_warm.py and
tests/test_pool.py start warm runners of their own, with this variable taken out."""

os.environ["FLOW_RUNNER_HEAD_START"] = "0"
"""No command starts a container ahead from a record an earlier test's identical command left
(runner/cli/head_start.py): what a test of one command sees must not depend on which test ran
before it. tests/test_head_start.py takes it out, with a socket directory of its own."""


_built: list[subprocess.CompletedProcess[bytes]] = []
"""The session's run of images/build.sh, once made."""


def _build_images() -> subprocess.CompletedProcess[bytes]:
    """Run images/build.sh once per session (it skips every image whose recipe is built)."""
    if not _built:
        # PYTHON: whose pip downloads the runner image's wheels, if they are not there yet.
        env = {**os.environ, "PYTHON": sys.executable}
        _built.append(subprocess.run([str(ROOT / "images" / "build.sh")], env=env, check=False))
    return _built[0]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the images before the first test starts, when a selected test uses the
    engine: a first build (minutes) then counts against no test's timeout."""
    if any("docker_client" in getattr(item, "fixturenames", ()) for item in session.items):
        import docker

        try:
            docker.from_env().ping()
        except Exception:  # the docker_client fixture says so, test by test
            return
        _build_images()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A docker-py client for an engine that answers, with the local images built."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the engine is part of the test set-up: fail loudly
        pytest.fail(f"Docker engine not reachable ({exc}); run `make engine` or `make test`")
    _build_images().check_returncode()
    yield client
    client.close()


@pytest.fixture
def no_leaks(docker_client: Any) -> Iterator[None]:
    """Fail the test if it leaves a container labelled flow-runner.run-id behind.

    Sparse listings (one list call, no inspect per container): a container removed between
    the list and its inspect, by its own run finishing, is no error of this test.
    """
    labelled = {"label": "flow-runner.run-id"}
    before = {c.id for c in docker_client.containers.list(all=True, sparse=True, filters=labelled)}
    yield
    after = {c.id for c in docker_client.containers.list(all=True, sparse=True, filters=labelled)}
    assert after <= before, f"containers left behind: {sorted(after - before)}"


@pytest.fixture
def engine(docker_client: Any, no_leaks: None) -> Any:
    """The engine for a container test that must leave no container behind.

    Modules of container tests take it for every test with
    ``pytestmark = pytest.mark.usefixtures("engine")``.
    """
    return docker_client
