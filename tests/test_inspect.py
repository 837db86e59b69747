"""Packages read out of images, and runs held to them (Docker).

Images: the examples (``examples/*/Dockerfile``) and ``images/package-check``, the fake
component as a package whose ``result.schema.json`` requires ``output.ok == true`` and
whose FLOW.md declares the outcome ``accepted`` and the capability slot ``tool`` only.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker.errors
import pytest

from execkit import FAKE_SCRIPT, LABEL_OWNER, LABEL_RUN_ID, exec_run, flow_runner, owner
from runner.api import Execution, Invocation, execute
from runner.config import ConfigError, load_config
from runner.flows import FlowHost
from runner.package import reader
from runner.package.errors import InvocationRefused
from runner.package.parse import Package
from runner.package.reader import sandbox_package
from runner.sandbox.docker.sandbox import DockerSandbox
from runner.sandbox.profiles import load_profile

HELLO = "flow-runner/examples-hello:latest"
CHECK = "flow-runner/package-check:latest"
EXAMPLES = {
    "hello": ({"anonymous"}, set(), {"input"}),
    "research": ({"no-subject"}, set(), set()),
    "research-report": (set(), {"artifacts"}, set()),
    "slow": (set(), set(), {"input"}),
    "wordcount": (set(), set(), {"input"}),
}

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def engine(docker_client: Any, no_leaks: None) -> Iterator[Any]:
    reader._cache.clear()
    yield docker_client
    reader._cache.clear()


class Counting:
    """Wraps one docker-py API method and records the arguments of every call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, api: Any, name: str) -> None:
        self.calls: list[tuple[Any, ...]] = []
        original = getattr(api, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(args)
            return original(*args, **kwargs)

        monkeypatch.setattr(api, name, counted)


def read_image_package(client: Any, image: str) -> Package | None:
    """The image's package, read through the Docker backend as a run reads it."""
    return anyio.run(sandbox_package, DockerSandbox(image, load_profile("default"), client=client))


def run(
    client: Any, image: str, input: Any, command: list[str] | None = None, **kw: Any
) -> Execution:
    sandbox = DockerSandbox(image, load_profile("default"), command, client=client)

    async def main() -> Execution:
        return await execute(sandbox, Invocation.within(30, input=input, **kw), target=image)

    return anyio.run(main)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_image_carries_its_package(docker_client: Any, name: str) -> None:
    package = read_image_package(docker_client, f"flow-runner/examples-{name}:latest")
    assert package is not None and package.name == name
    outcomes, uses, schemas = EXAMPLES[name]
    assert set(package.outcomes) == outcomes
    assert set(package.uses) == uses
    assert set(package.schemas) == schemas
    assert package.root == "/flow/package"
    assert package.digest.startswith("sha256:") and len(package.digest) == 71
    if name == "wordcount":
        assert package.attachments == {"source": "read"}
    if name == "research-report":
        contract = package.uses["artifacts"]
        assert contract is not None and contract.identity.version == "1.0.0"


def test_an_image_without_flow_md_carries_no_package(docker_client: Any) -> None:
    assert read_image_package(docker_client, "flow-runner/fake-component:latest") is None


def test_inspecting_the_same_image_twice_reads_it_once(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty disk cache
    archives = Counting(monkeypatch, docker_client.api, "get_archive")
    creates = Counting(monkeypatch, docker_client.api, "create_container")
    first = read_image_package(docker_client, HELLO)
    second = read_image_package(docker_client, HELLO)
    assert first is second is not None
    assert (len(archives.calls), len(creates.calls)) == (1, 1)
    # The inspection container was created (never started) and is gone again.
    assert docker_client.containers.list(all=True, filters={"label": "flow-runner.inspect"}) == []
    # A new process (here: a forgotten in-process cache) reads the disk cache, not the image.
    reader._cache.clear()
    third = read_image_package(docker_client, HELLO)
    assert third is not None and third.digest == first.digest
    assert (len(archives.calls), len(creates.calls)) == (1, 1)


def run_containers_created(client: Any, since: float) -> int:
    """Containers this process created for runs (labelled with a run id) since ``since``,
    from the engine's events: not the ones that read an image's package."""
    filters = {
        "type": "container",
        "event": "create",
        "label": f"{LABEL_OWNER}={owner(os.getpid())}",
    }
    events = client.events(since=since, until=time.time() + 0.1, filters=filters, decode=True)
    return sum(LABEL_RUN_ID in e["Actor"]["Attributes"] for e in events)


def test_bad_input_is_refused_before_any_container(docker_client: Any) -> None:
    since = time.time() - 0.1
    execution = run(docker_client, HELLO, {"nmae": "Ada"})
    assert execution.verdict.error is not None
    assert execution.verdict.error.code == "INVALID_INPUT"
    assert "input.schema.json" in execution.verdict.error.message
    assert execution.report.error is not None and execution.report.exit_code is None
    assert run_containers_created(docker_client, since) == 0
    good = run(docker_client, HELLO, {"name": "Ada"})
    assert good.verdict.result == {"outcome": "done", "output": {"greeting": "Hello, Ada!"}}
    assert run_containers_created(docker_client, since) == 1


def test_cli_exit_statuses_for_input_and_settings() -> None:
    """One rule for every refusal before a container exists: exit 2, the error on stdout."""
    ran = exec_run("--input", '{"nmae": "Ada"}', HELLO)
    assert ran.returncode == 2, ran.stderr
    assert ran.printed["error"]["code"] == "INVALID_INPUT"
    ran = exec_run("--settings", '{"color": "red"}', HELLO)
    assert ran.returncode == 2, ran.stderr
    assert ran.printed["error"]["code"] == "INVALID_SETTINGS"
    assert "settings.schema.json" in ran.stderr


def test_settings_and_attachments_are_refused_before_any_container(
    docker_client: Any, tmp_path: Path
) -> None:
    from runner.sandbox.base import Attachment, LaunchRequest

    since = time.time() - 0.1
    with pytest.raises(InvocationRefused, match="INVALID_SETTINGS"):
        run(docker_client, HELLO, {}, settings={"x": 1})
    wordcount = "flow-runner/examples-wordcount:latest"
    with pytest.raises(InvocationRefused, match="missing source"):
        run(docker_client, wordcount, {})
    launch = LaunchRequest((Attachment("source", tmp_path, "read-write"),))
    with pytest.raises(InvocationRefused, match="supplied read-write: source"):
        run(docker_client, wordcount, {}, launch=launch)
    assert run_containers_created(docker_client, since) == 0


def test_a_result_outside_its_schema_is_invalid_result(docker_client: Any) -> None:
    good = run(docker_client, CHECK, {"ok": True})
    assert good.verdict.result == {"outcome": "done", "output": {"ok": True}}
    bad = run(docker_client, CHECK, {"ok": False})
    assert bad.verdict.result is None and bad.verdict.error is not None
    assert bad.verdict.error.code == "INVALID_RESULT"
    assert "result.schema.json" in bad.verdict.error.message
    assert bad.report.status == "failed" and bad.report.exit_code == 0


def test_an_undeclared_outcome_is_invalid_result(docker_client: Any) -> None:
    execution = run(docker_client, CHECK, None, ["python3", FAKE_SCRIPT, "custom-outcome"])
    assert execution.verdict.error is not None
    assert execution.verdict.error.code == "INVALID_RESULT"
    assert "'partial' is neither done nor declared" in execution.verdict.error.message


def test_a_capability_slot_missing_from_uses_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "flow-runner.toml"
    config.write_text(
        f"""
[flows.check]
image = "{CHECK}"

[flows.check.capabilities.other]
provider = "kv"
"""
    )

    async def main() -> Execution:
        return await FlowHost(load_config(config)).run("check", {"ok": True}, deadline_seconds=30)

    with pytest.raises(ConfigError, match=r"slot\(s\) other are not in package 'package-check'"):
        anyio.run(main)


def test_a_provider_for_another_contract_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "flow-runner.toml"
    config.write_text(
        '[flows.report]\nimage = "flow-runner/examples-research-report:latest"\n'
        f'[flows.report.capabilities.artifacts]\nprovider = "kv"\n'
        f'options = {{ path = "{tmp_path / "kv.sqlite3"}" }}\n'
    )

    async def main() -> Execution:
        return await FlowHost(load_config(config)).run("report", {}, deadline_seconds=30)

    with pytest.raises(ConfigError, match=r"uses contract .*artifacts.* bound to .*kv"):
        anyio.run(main)


def test_cli_inspect_prints_the_package() -> None:
    ran = flow_runner("inspect", "--json", "flow-runner/examples-research-report:latest")
    assert ran.returncode == 0, ran.stderr
    info = json.loads(ran.stdout)
    assert info["name"] == "research-report"
    assert info["uses"]["artifacts"]["contract"] == "https://flow-runner.dev/contracts/artifacts"
    assert info["uses"]["artifacts"]["digest"].startswith("sha256:")
    ran = flow_runner("inspect", HELLO)
    assert ran.returncode == 0, ran.stderr
    assert '"properties":["name"]' in ran.stdout
    ran = flow_runner("inspect", "flow-runner/fake-component:latest")
    assert ran.returncode == 2 and "carries no FLOW package" in ran.stderr


@pytest.fixture
def volume_image(docker_client: Any) -> Iterator[str]:
    """A throwaway image that declares a ``VOLUME`` (and carries no package)."""
    tag = f"flow-runner/test-volume:{uuid.uuid4().hex[:12]}"
    subprocess.run(
        ["docker", "build", "--network", "none", "-q", "-t", tag, "-"],
        input=b"FROM flow-runner/base:bookworm\nVOLUME /data\n",
        check=True,
        capture_output=True,
    )
    yield tag
    docker_client.images.remove(tag, force=True)


def test_reading_a_package_leaves_no_anonymous_volume(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, volume_image: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a cache miss: read from the image
    volumes: list[str] = []
    remove = docker_client.api.remove_container

    def noting_volumes(container: str, **options: Any) -> None:
        mounts = docker_client.api.inspect_container(container)["Mounts"]
        volumes.extend(m["Name"] for m in mounts if m["Type"] == "volume")
        remove(container, **options)

    monkeypatch.setattr(docker_client.api, "remove_container", noting_volumes)
    try:
        assert read_image_package(docker_client, volume_image) is None
        assert len(volumes) == 1  # the image's VOLUME /data, made when the container was
        assert docker_client.volumes.list(filters={"name": volumes[0]}) == []
    finally:
        for name in volumes:  # what a leak would have left
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.api.remove_volume(name)
