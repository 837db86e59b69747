"""The one backend seam: registration, choice, packages held by a local run, the
configuration of a local run, and attachments checked against the sandbox's user.

Docker tests run the CLI against the real engine (images flow-runner/fake-component and
flow-runner/examples-wordcount).
"""

from __future__ import annotations

import ast
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from execkit import FAKE_IMAGE, FAKE_SCRIPT, ROOT, containers, exec_run, flow_runner
from runner.config import ConfigError, load_config
from runner.sandbox import registry
from runner.sandbox.errors import SandboxError
from runner.sandbox.process import ProcessSandbox
from runner.sandbox.profiles import load_profile
from runner.sandbox.registry import (
    ENTRY_POINT_GROUP,
    SHIPPED,
    BackendUnknown,
    SandboxSpec,
    StopGraces,
    open_sandbox,
)

FAKE = Path(__file__).with_name("fake_component.py")
RELAY = Path(__file__).with_name("components") / "relay.py"
WORDCOUNT = "flow-runner/examples-wordcount:latest"
OWNER = 1000


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports: top level, in functions, under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_sandbox_never_imports_package_and_package_never_imports_docker() -> None:
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for layer, banned in (("sandbox", ("runner.package",)), ("package", ("docker",)))
        for path in sorted((ROOT / "runner" / layer).rglob("*.py"))
        for name in sorted(imports_of(path))
        if any(name == b or name.startswith(f"{b}.") for b in banned)
    ]
    assert wrong == []


def test_no_caller_probes_a_sandbox_for_methods_it_may_lack() -> None:
    probing = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "runner").rglob("*.py"))
        if 'getattr(sandbox, "package"' in path.read_text()
    ]
    assert probing == []


def test_the_shipped_backends_are_the_entry_points_pyproject_registers() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == SHIPPED


def test_open_sandbox_builds_the_named_backend_and_refuses_an_unknown_one() -> None:
    sandbox, graces = open_sandbox(SandboxSpec("process", command=("true",)))
    assert isinstance(sandbox, ProcessSandbox) and sandbox.name == "process"
    assert graces == StopGraces()
    docker, docker_graces = open_sandbox(SandboxSpec("docker", image="x", profile="strict"))
    strict = load_profile("strict")
    assert docker.name == "docker"
    assert docker_graces == StopGraces(cancel=strict.cancel_grace, exit=strict.exit_grace)
    with pytest.raises(BackendUnknown, match=r"no sandbox backend named 'vm' \(installed: "):
        open_sandbox(SandboxSpec("vm"))
    with pytest.raises(SandboxError, match="needs a command"):
        open_sandbox(SandboxSpec("process"))
    assert isinstance(BackendUnknown("x"), SandboxError)


def test_a_flow_may_name_its_backend(tmp_path: Path) -> None:
    config = tmp_path / "flow-runner.toml"
    config.write_text('[flows.a]\nbackend = "process"\ncommand = ["true"]\n')
    assert load_config(config).flows["a"].sandbox_backend == "process"
    config.write_text('[flows.a]\nbackend = "process"\nimage = "x"\ncommand = ["true"]\n')
    with pytest.raises(ConfigError, match="backend 'process' runs `command` on the host"):
        load_config(config)
    config.write_text('[flows.a]\nbackend = "docker"\ncommand = ["true"]\n')
    with pytest.raises(ConfigError, match="backend 'docker' runs an image"):
        load_config(config)
    config.write_text('[flows.a]\nbackend = "vm"\ncommand = ["true"]\n')
    ran = flow_runner("exec", "a", "--config", str(config))
    assert ran.returncode == 2 and "no sandbox backend named 'vm'" in ran.stderr


# ----- exec --process --package DIR -------------------------------------------------------


def package_dir(tmp_path: Path) -> Path:
    """A package whose input schema admits only ``{"name": STRING}``."""
    root = tmp_path / "package"
    root.mkdir()
    (root / "FLOW.md").write_text(
        "---\nname: local-check\ndescription: A package for a local run.\n---\n\n# local\n"
    )
    schema = {
        "$schema": "https://flow.jig.md/schemas/schema-1.json",
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}},
        "additionalProperties": False,
    }
    (root / "input.schema.json").write_text(json.dumps(schema))
    return root


def test_a_process_run_is_held_to_the_package_it_is_given(tmp_path: Path) -> None:
    root, report = package_dir(tmp_path), tmp_path / "report.json"
    echo = ["--", sys.executable, str(FAKE), "echo"]
    refused = exec_run("--process", "--package", root, "--input", "{}", *echo, report=report)
    assert refused.returncode == 2, refused.stderr  # refused before launch, as every refusal
    assert refused.printed["error"]["code"] == "INVALID_INPUT"
    assert "'local-check''s input.schema.json" in refused.printed["error"]["message"]
    assert refused.report is None
    ran = exec_run("--process", "--package", root, "-i", '{"name": "Ada"}', *echo, report=report)
    assert ran.returncode == 0, ran.stderr
    assert ran.report is not None
    assert ran.report["package"]["source"] == str(root.resolve())
    assert ran.report["package"]["digest"].startswith("sha256:")
    assert ran.report["backend"] == "process"
    unchecked = exec_run("--process", "--input", "{}", *echo, report=report)
    assert unchecked.returncode == 0 and unchecked.report is not None
    assert unchecked.report["package"] is None


def test_a_package_directory_is_held_to_the_package_rules(tmp_path: Path) -> None:
    root = package_dir(tmp_path)
    (root / "link.json").symlink_to(root / "input.schema.json")
    ran = exec_run("--process", "--package", root, "--", sys.executable, str(FAKE), "echo")
    assert ran.returncode == 2 and "symlinks" in ran.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    ran = exec_run("--process", "--package", empty, "--", sys.executable, str(FAKE), "echo")
    assert ran.returncode == 2 and "FLOW.md" in ran.stderr
    ran = exec_run("--package", empty, *[FAKE_IMAGE])
    assert ran.returncode == 2 and "--package is for a local run (--process)" in ran.stderr


# ----- exec --process --config FILE ---------------------------------------------------


def test_a_process_run_with_a_configuration_stands_in_for_a_named_flow(tmp_path: Path) -> None:
    config = tmp_path / "flow-runner.toml"
    config.write_text(
        '[flows.parent]\nimage = "flow-runner/not-built:latest"\n'
        'children = { next = "child" }\n'
        f'[flows.child]\ncommand = ["{sys.executable}", "{RELAY}"]\n'
    )
    plan = {"calls": [{"op": "c", "slot": "next", "input": {}}, {"op": "u", "slot": "nope"}]}
    relay = ["--", sys.executable, str(RELAY)]
    ignored = exec_run("--process", "--config", config, "-i", json.dumps(plan), *relay)
    assert ignored.returncode == 2
    assert "--process needs --flow NAME" in ignored.stderr
    ran = exec_run(
        "--process", "--config", config, "--flow", "parent", "-i", json.dumps(plan), *relay
    )
    assert ran.returncode == 0, ran.stderr
    results = ran.printed["output"]["results"]
    assert results[0]["outcome"] == "done"  # the configured child slot answers
    assert results[1] == "UNAVAILABLE"  # an unconfigured one does not
    unknown = exec_run("--process", "--config", config, "--flow", "nope", *relay)
    assert unknown.returncode == 2
    assert "defines no such flow (known: child, parent)" in unknown.stderr


# ----- attachments the component can use (Docker) -------------------------------------


def fake_args(*options: str | Path) -> list[str | Path]:
    return [*options, FAKE_IMAGE, "--", "python3", FAKE_SCRIPT, "echo"]


@pytest.mark.docker
def test_a_root_owned_0755_directory_attached_rw_is_refused_before_any_container(
    docker_client: Any, no_leaks: None, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    os.chown(out, 0, 0)
    before = len(containers(docker_client, "flow-runner.run-id"))
    ran = exec_run(*fake_args("--attach", f"out={out}:rw"))
    assert ran.returncode == 2, ran.stderr
    assert f"attachment 'out={out}:rw' is unusable" in ran.stderr
    assert "runs as 65534:65534 and could not write and search" in ran.stderr
    assert "(owner 0:0, mode 0755, directory)" in ran.stderr
    assert f"`chown 65534:65534 {out}`" in ran.stderr
    assert "--user" not in ran.stderr  # as its owner, root, the profile refuses the run
    assert "Traceback" not in ran.stderr
    assert len(containers(docker_client, "flow-runner.run-id")) == before


@pytest.mark.docker
def test_a_0700_directory_attached_ro_is_refused(
    docker_client: Any, no_leaks: None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    ran = exec_run(*fake_args("--attach", f"data={data}:ro"))
    assert ran.returncode == 2, ran.stderr
    assert "could not read and search" in ran.stderr and "mode 0700" in ran.stderr


@pytest.mark.docker
def test_with_the_owners_user_the_scratch_is_written_and_the_file_lands(
    docker_client: Any, no_leaks: None, tmp_path: Path
) -> None:
    source, scratch = tmp_path / "source", tmp_path / "scratch"
    source.mkdir(mode=0o755)
    (source / "a.txt").write_text("one two three\n")
    (source / "a.txt").chmod(0o644)
    scratch.mkdir(mode=0o755)
    os.chown(scratch, OWNER, OWNER)
    args = ["-i", "{}", "--attach", f"source={source}", "--scratch", str(scratch), WORDCOUNT]
    refused = exec_run(*args)
    assert refused.returncode == 2
    assert f"--scratch {scratch} is unusable" in refused.stderr
    assert f"(owner {OWNER}:{OWNER}, mode 0755" in refused.stderr
    ran = exec_run("--user", f"{OWNER}:{OWNER}", *args)
    assert ran.returncode == 0, ran.stderr
    assert ran.printed["output"]["words"] == 3
    landed = scratch / "wordcount-report.txt"
    assert landed.is_file() and landed.stat().st_uid == OWNER
    root = exec_run("--user", "0:0", *args)
    assert root.returncode == 2 and "uid 0 or gid 0 is root" in root.stderr


def test_options_may_come_after_the_target() -> None:
    ran = exec_run("--process", sys.executable, str(FAKE), "echo", "--input", '{"after": true}')
    assert ran.returncode == 0, ran.stderr
    assert ran.printed["output"] == {"after": True}


def test_an_installed_package_adds_backends_but_cannot_take_over_a_shipped_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plugin registering "docker" would otherwise swap the sandbox of every run.
    import importlib.metadata

    group = ENTRY_POINT_GROUP
    claimed = [
        importlib.metadata.EntryPoint("docker", "runner.sandbox.process:open_process", group),
        importlib.metadata.EntryPoint("plain", "runner.sandbox.process:open_process", group),
    ]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: claimed)
    docker, _ = open_sandbox(SandboxSpec("docker", image="x"))
    assert docker.name == "docker"
    plain, _ = open_sandbox(SandboxSpec("plain", command=("true",)))
    assert plain.name == "process"
    assert sorted(registry._registered()) == ["docker", "plain", "process"]
