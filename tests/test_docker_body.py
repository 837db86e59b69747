"""What the Docker backend asks the engine for, written without docker-py, is what docker-py
would write: the create body of every shipped profile and of a run with attachments and a
scratch directory (``sandbox._host_config``, ``engine.create_body``), and the engine address
read from the environment (``http.plain_address``, ``EngineHttp.from_env``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker
import pytest
from docker.types import LogConfig, Mount, Ulimit

from runner.sandbox.docker.container import ATTACHMENTS_DIR, SCRATCH_PATH
from runner.sandbox.docker.engine import create_body
from runner.sandbox.docker.http import EngineHttp, plain_address
from runner.sandbox.docker.sandbox import _host_config, _tmpfs
from runner.sandbox.labels import run_labels
from runner.sandbox.pathmap import HostSource
from runner.sandbox.profiles import SandboxProfile, load_profile, with_user

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted(path.stem for path in (ROOT / "sandbox-profiles").glob("*.toml"))


def docker_py_body(
    version: str,
    image: str,
    command: list[str] | None,
    profile: SandboxProfile,
    held: dict[str, str],
    sources: dict[str, HostSource],
    labels: dict[str, str],
) -> dict[str, Any]:
    """The body as flow-runner built it with docker-py (held: mount target -> access)."""
    api = docker.APIClient(version=version)
    tmpfs = {path: _tmpfs(profile.tmp_size, profile) for path in ("/tmp", "/dev/shm")}
    if SCRATCH_PATH not in held:
        tmpfs[SCRATCH_PATH] = _tmpfs(profile.scratch_size, profile)
    security_opt = ["no-new-privileges"] if profile.no_new_privileges else []
    if profile.seccomp_json is not None:
        security_opt.append(f"seccomp={profile.seccomp_json}")
    elif profile.seccomp == "unconfined":
        security_opt.append("seccomp=unconfined")
    mounts = [
        Mount(t, sources[t].source, type=sources[t].type, read_only=access == "read")
        for t, access in held.items()
    ]
    host_config = api.create_host_config(
        network_mode=profile.network,
        read_only=profile.read_only_root,
        mem_limit=profile.memory,
        memswap_limit=profile.memory,
        nano_cpus=round(profile.cpus * 1e9),
        pids_limit=profile.pids,
        ulimits=[Ulimit(name="nofile", soft=profile.nofile, hard=profile.nofile)],
        cap_drop=list(profile.cap_drop),
        cap_add=list(profile.cap_add),
        security_opt=security_opt,
        init=profile.init,
        runtime=profile.runtime,
        tmpfs=tmpfs,
        mounts=mounts,
        log_config=LogConfig(type="none"),
    )
    config = api.create_container_config(
        image, command, stdin_open=True, tty=False, user=profile.user, labels=labels,
        host_config=host_config,
    )  # fmt: skip
    return {name: value for name, value in config.items() if value is not None}


def ours(
    image: str,
    command: list[str] | None,
    profile: SandboxProfile,
    held: dict[str, str],
    sources: dict[str, HostSource],
    labels: dict[str, str],
) -> dict[str, Any]:
    paths = {t: SimpleNamespace(attachment=SimpleNamespace(access=a)) for t, a in held.items()}
    host_config = _host_config(profile, paths, sources)  # type: ignore[arg-type]
    return create_body(image, command, user=profile.user, labels=labels, host_config=host_config)


def same_json(body: dict[str, Any]) -> Any:
    """The body as the engine receives it (docker-py's types are dicts)."""
    return json.loads(json.dumps(body))


@pytest.mark.parametrize("version", ["1.41", "1.45"])
@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("command", [None, ["python3", "-c", "print(1)"]])
def test_the_body_of_every_shipped_profile_is_docker_pys(
    name: str, version: str, command: list[str] | None
) -> None:
    profile = load_profile(name)
    labels = run_labels("r" * 32, None)
    image = "flow-runner/fake-component:latest"
    expected = docker_py_body(version, image, command, profile, {}, {}, labels)
    assert same_json(ours(image, command, profile, {}, {}, labels)) == same_json(expected)


@pytest.mark.parametrize("name", PROFILES)
def test_the_body_of_a_run_with_attachments_and_scratch_is_docker_pys(name: str) -> None:
    profile = with_user(load_profile(name), "1234:1234")
    held = {f"{ATTACHMENTS_DIR}/in": "read", f"{ATTACHMENTS_DIR}/out": "read-write"}
    held[SCRATCH_PATH] = "read-write"
    sources = {
        f"{ATTACHMENTS_DIR}/in": HostSource("bind", "/data/in.txt"),
        f"{ATTACHMENTS_DIR}/out": HostSource("volume", "runner-volume"),
        SCRATCH_PATH: HostSource("bind", "/home/me/scratch"),
    }
    labels = run_labels("r" * 32, "p" * 32)
    expected = docker_py_body("1.41", "img:1", None, profile, held, sources, labels)
    body = ours("img:1", None, profile, held, sources, labels)
    assert same_json(body) == same_json(expected)
    assert (
        SCRATCH_PATH not in body["HostConfig"]["Tmpfs"] and len(body["HostConfig"]["Mounts"]) == 3
    )


def test_the_default_profiles_security_options_are_all_in_the_body() -> None:
    """The defaults, spelled out: a change here is a change of the sandbox, not of speed."""
    host = ours("img", None, load_profile("default"), {}, {}, {})["HostConfig"]
    assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"] and "CapAdd" not in host
    assert host["SecurityOpt"][0] == "no-new-privileges"
    assert host["SecurityOpt"][1].startswith("seccomp={")
    assert host["Init"] is True and host["LogConfig"] == {"Type": "none", "Config": {}}
    assert host["Memory"] == host["MemorySwap"] > 0 and host["PidsLimit"] > 0


def docker_py_address(environ: dict[str, str]) -> EngineHttp | None:
    client = docker.from_env(environment=environ, version="1.41")
    return EngineHttp.of(client.api)


ENVIRONMENTS: list[dict[str, str]] = [
    {},
    {"DOCKER_HOST": ""},
    {"DOCKER_HOST": "unix://"},
    {"DOCKER_HOST": "unix:///run/user/1000/docker.sock"},
    {"DOCKER_HOST": " unix:///var/run/other.sock "},
    {"DOCKER_HOST": "unix:///run/docker.sock/"},
    {"DOCKER_HOST": "tcp://127.0.0.1:2375"},
    {"DOCKER_HOST": "tcp://Engine.Example:12375"},
    {"DOCKER_HOST": "tcp://127.0.0.1:2375", "DOCKER_TLS_VERIFY": ""},
    {"DOCKER_HOST": "tcp://127.0.0.1:2376", "DOCKER_TLS_VERIFY": "1"},
    {"DOCKER_HOST": "tcp://127.0.0.1:2376", "DOCKER_CERT_PATH": "/certs"},
    {"DOCKER_HOST": "tcp://127.0.0.1:2375/prefix"},
    {"DOCKER_HOST": "http://127.0.0.1:2375"},
    {"DOCKER_HOST": "ssh://me@engine"},
    {"DOCKER_CONTEXT": "default"},
    {"DOCKER_CONTEXT": "elsewhere"},
]


@pytest.mark.parametrize("config", [None, {}, {"currentContext": "default"}, {"a": 1}, "{bad"])
@pytest.mark.parametrize("environ", ENVIRONMENTS)
def test_a_plain_address_is_where_docker_py_connects(
    environ: dict[str, str], config: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where :func:`plain_address` answers, docker-py connects there too (TLS is refused
    either way; everything else it leaves to docker-py)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    if config is not None:
        (tmp_path / ".docker").mkdir()
        text = config if isinstance(config, str) else json.dumps(config)
        (tmp_path / ".docker" / "config.json").write_text(text)
    found = plain_address(environ)
    if found is None:
        assert "DOCKER_HOST" in environ or "DOCKER_CONTEXT" in environ
        return
    unix_path, host, port = found
    assert docker_py_address(environ) == EngineHttp(unix_path, host, port, "1.41", 60.0)


def test_another_current_context_is_left_to_docker_py(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "cfg"))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text('{"currentContext": "desktop-linux"}')
    assert plain_address({}) is None
    (tmp_path / "cfg" / "config.json").write_text('{"currentContext": "default"}')
    assert plain_address({}) == ("/var/run/docker.sock", "", 0)


@pytest.mark.docker
def test_the_engine_found_directly_is_docker_pys_with_its_negotiated_version() -> None:
    environ = {name: value for name, value in os.environ.items() if name != "DOCKER_CONTEXT"}
    direct = EngineHttp.from_env(environ)
    assert direct is not None
    assert direct == EngineHttp.of(docker.from_env(environment=environ).api)


def test_the_default_engines_worker_threads_are_docker_pys_pool() -> None:
    # engine.POOL_SIZE stands in for docker-py's constant so that the run need not import it.
    from docker.constants import DEFAULT_MAX_POOL_SIZE

    from runner.sandbox.docker.engine import POOL_SIZE

    assert POOL_SIZE == DEFAULT_MAX_POOL_SIZE
