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


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A docker-py client for an engine that answers, with the local images built."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the engine is part of the test set-up: fail loudly
        pytest.fail(f"Docker engine not reachable ({exc}); run `make engine` or `make test`")
    # PYTHON: whose pip downloads the runner image's wheels, if they are not there yet.
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([str(ROOT / "images" / "build.sh")], check=True, env=env)
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
