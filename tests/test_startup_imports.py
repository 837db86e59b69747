"""What a ``flow-runner`` process imports: each command only what its path needs.

A fresh process pays for every module it imports (``bench/README.md``, Start-up imports),
so these run the real CLI in a subprocess and read ``sys.modules`` as it exits: ``exec``
of an image or a command imports no configuration, no pydantic, no batch, policy or k8s
machinery and no rich; ``exec`` of an image without a package no docker-py (the engine is
spoken to directly, ``runner.sandbox.docker.http``), no jsonschema and nothing that
validates or checks a package, and one with a valid package still no jsonschema; a run
without an attachment or a scratch directory nothing that holds host paths
(``HOST_PATHS``); ``exec --help`` and ``--version`` no other command's module. The
positive checks (what must be there) show
that each run got as far as it should.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer.main

from runner.cli.app import COMMANDS, SUB_APPS, app

ROOT = Path(__file__).resolve().parents[1]
FAKE_IMAGE = "flow-runner/fake-component:latest"

REPORT_MODULES = r"""
import json, os, sys
exit_now = os._exit
def report_then_exit(code):  # the CLI ends with os._exit once its output is flushed
    with open(os.environ["MODULES_FILE"], "w") as file:
        json.dump(sorted(sys.modules), file)
    exit_now(code)
os._exit = report_then_exit
sys.argv = ["flow-runner", *sys.argv[1:]]
from runner.cli.app import main
main()
"""

OTHER_COMMANDS = frozenset(
    {"runner.cli.admin", "runner.cli.batch", "runner.cli.job", "runner.cli.k8s"}
    | {"runner.cli.policy"}
)
NOT_FOR_A_RUN = OTHER_COMMANDS | {
    "pydantic",  # the configuration, a profile file (--report writes its JSON without it)
    "pydantic_core",
    "runner.config",
    "runner.flows",
    "runner.sandbox.profile_model",
    "runner.batch",
    "runner.policy",
    "runner.k8s",
    "runner.doctor",
    "sqlite3",
    "rich",
    "typer.rich_utils",
    "yaml",
    "jsonschema",
    "runner.contracts.schema1",
    "importlib.metadata",  # entry points: read only for a backend that is not shipped
    "runner.package.parse",  # a package's files validated: only an image that has one
    "runner.package.checks",
    "secrets",  # a channel's tokens, the label key: made when first needed
}
HOST_PATHS = frozenset(
    {"runner.sandbox.attachments", "runner.sandbox.disk", "runner.sandbox.pathmap"}
)
"""What only a run with an attachment or a scratch directory needs: holding and judging
host paths, their disk bounds, their names on the engine's host."""
DOCKER_PY = frozenset({"docker", "requests", "urllib3"})
"""docker-py and what it brings: for the rare engine calls only (``engine.py``)."""


def imported(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``flow-runner ARGS``; its result and the modules it had imported at exit."""
    modules = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", REPORT_MODULES, *args],
        cwd=ROOT,
        env={**os.environ, "MODULES_FILE": str(modules)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, set(json.loads(modules.read_text()))


def test_exec_of_a_command_imports_only_the_run(tmp_path: Path) -> None:
    done, modules = imported(tmp_path, "exec", "--process", "--", "/nonexistent/cmd")
    assert done.returncode == 2 and "cannot start '/nonexistent/cmd'" in done.stderr
    assert {"runner.cli.exec", "runner.api", "anyio", "runner.host.driver"} <= modules
    assert modules & NOT_FOR_A_RUN == set()
    assert modules & (DOCKER_PY | HOST_PATHS) == set()


@pytest.mark.docker
def test_exec_of_an_image_imports_only_the_run(tmp_path: Path) -> None:
    done, modules = imported(tmp_path, "exec", "flow-runner/no-such-image:latest")
    assert done.returncode == 2 and "is not on this Docker engine" in done.stderr
    assert {"runner.sandbox.docker.sandbox", "runner.sandbox.profiles"} <= modules
    assert modules & (NOT_FOR_A_RUN | DOCKER_PY | HOST_PATHS) == set()


@pytest.mark.docker
def test_a_run_of_an_image_without_a_package_imports_no_docker_py(tmp_path: Path) -> None:
    """The whole run: sweep, inspect, create, attach, start, wait, remove, and its report
    written. The first run reads the image (it has no package directory) through
    docker-py's archive call, once per image id; the second finds that in the package
    cache."""
    report = tmp_path / "report.json"
    args = ("exec", "-q", "--report", str(report), "--input", '{"name": "Ada"}', FAKE_IMAGE)
    first, _ = imported(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    done, modules = imported(tmp_path, *args)
    assert done.returncode == 0 and json.loads(done.stdout)["output"] == {"name": "Ada"}
    assert json.loads(report.read_text())["status"] == "succeeded"
    assert {"runner.sandbox.docker.sandbox", "runner.sandbox.gc", "runner.host.driver"} <= modules
    assert {"runner.sandbox.own_container"} <= modules  # the labels name the runner's container
    assert modules & (NOT_FOR_A_RUN | DOCKER_PY | HOST_PATHS | {"tarfile"}) == set()


@pytest.mark.docker
def test_a_run_of_a_valid_package_imports_no_jsonschema(tmp_path: Path) -> None:
    """jsonschema explains a meta-schema violation (``runner.contracts.schema1_meta``); a
    package whose schemas are all valid is judged without it."""
    args = ("exec", "-q", "--input", '{"name": "Ada"}', "flow-runner/examples-hello:latest")
    done, modules = imported(tmp_path, *args)
    assert done.returncode == 0 and json.loads(done.stdout)["output"]["greeting"] == "Hello, Ada!"
    assert {"runner.package.parse", "runner.contracts.schema1"} <= modules  # it was judged
    assert modules & {"jsonschema", "referencing", "attrs"} == set()


@pytest.mark.docker
def test_a_run_with_an_attachment_imports_the_host_path_machinery(tmp_path: Path) -> None:
    """The other side of HOST_PATHS: an attachment is held and judged, after the sweep and
    the sandbox are ready, by the modules a plain run leaves out."""
    shared = tmp_path / "in"
    shared.mkdir()
    shared.chmod(0o755)  # the component's user may read and search it
    tmp_path.chmod(0o755)
    args = ("exec", "-q", "--attach", f"in={shared}:ro", "--input", "{}", FAKE_IMAGE)
    done, modules = imported(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert modules >= HOST_PATHS


def test_a_configuration_is_read_with_its_models(tmp_path: Path) -> None:
    config = tmp_path / "flow-runner.toml"
    config.write_text('[flows.hello]\nimage = "flow-runner/no-such-image:latest"\nnope = 1\n')
    done, modules = imported(tmp_path, "exec", "--config", str(config), "hello")
    assert done.returncode == 2 and "nope" in done.stderr
    assert {"runner.config", "pydantic"} <= modules


@pytest.mark.parametrize(
    ("args", "loaded"),
    [(("--version",), set()), (("exec", "--help"), {"runner.cli.exec"})],
)
def test_help_and_version_import_no_other_command(
    tmp_path: Path, args: tuple[str, ...], loaded: set[str]
) -> None:
    done, modules = imported(tmp_path, *args)
    assert done.returncode == 0 and done.stdout
    commands = {name for name in modules if name.startswith("runner.cli.")} - {
        "runner.cli.app",
        "runner.cli.inputs",
        "runner.cli.running",
    }
    assert commands == loaded
    assert modules & {"anyio", "docker", "pydantic", "runner.api", "runner.config"} == set()


def test_the_lazy_table_names_every_command_its_modules_register() -> None:
    for module in {module for modules in COMMANDS.values() for module in modules}:
        importlib.import_module(f"runner.cli.{module}")
    registered = {
        command.name or typer.main.get_command_name(command.callback.__name__)
        for command in app.registered_commands
        if command.callback is not None
    }
    assert registered | set(SUB_APPS) == set(COMMANDS)
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    context = click.Context(group)
    for name in COMMANDS:
        command = group.get_command(context, name)
        assert command is not None and command.name == name


# ----- the cyclic collector over start-up ------------------------------------------------

SPY_ON_THE_LOOP = """
import gc, sys
import anyio
real = anyio.run
def spy(*args, **kwargs):
    print("collector", gc.isenabled(), gc.get_freeze_count(), file=sys.stderr, flush=True)
    return real(*args, **kwargs)
anyio.run = spy
sys.argv = ["flow-runner", *sys.argv[1:]]
from runner.launch import main
main()
"""


def test_the_console_script_pauses_the_collector_until_its_event_loop_starts() -> None:
    # Start-up runs with the collector paused (its imports live as long as the process);
    # the run must be collected as ever, with what start-up made frozen out of its passes.
    fake = ROOT / "tests" / "fake_component.py"
    command = [sys.executable, "-c", SPY_ON_THE_LOOP, "exec", "-q", "--process", "--"]
    ran = subprocess.run(
        [*command, sys.executable, str(fake), "echo"],
        cwd=ROOT, env={**os.environ, "FLOW_RUNNER_WARM": "0"}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stderr.splitlines() if line.startswith("collector")]
    _, enabled, frozen = line.split()
    assert enabled == "True"
    assert int(frozen) > 10_000  # the imports, frozen: the collector was off until here


def test_every_event_loop_of_a_command_starts_with_the_collector_on() -> None:
    # A command that ran its loop with the collector still paused would never collect a
    # cycle: each anyio.run in runner/cli/ follows before_loop() in its function.
    missing = []
    for path in sorted((ROOT / "runner" / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            calls = [
                node
                for node in ast.walk(function)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
            ]
            names = [ast.unparse(call.func) for call in calls]
            if "anyio.run" in names and "before_loop" not in names:
                missing.append(f"{path.name}:{function.name}")
    assert missing == []
