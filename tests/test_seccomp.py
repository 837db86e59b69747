"""The shipped seccomp profile (sandbox-profiles/seccomp-components.json) on the real engine.

tests/components/syscalls.py runs in the fake-component image under each profile and
reports what the kernel answered to calls no component needs, and whether ordinary
Python work (threads, fork, subprocess, multiprocessing, asyncio) still runs. Every shipped
profile names the filter (strict its gVisor variant, which lets gVisor answer clone3); a
profile without a ``seccomp`` key gets the engine's built-in filter, which lets io_uring
through: the contrast shows that the refusals come from our filter, not from the dropped
capabilities.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from execkit import FAKE_IMAGE, flow_runner
from runner.sandbox.base import LaunchRequest
from runner.sandbox.docker.sandbox import DockerSandbox
from runner.sandbox.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
SYSCALLS = (Path(__file__).with_name("components") / "syscalls.py").read_text()
REFUSED = ("EPERM", "ENOSYS")
WORK = {"fork": 7, "subprocess": "hi", "pool": [2, 3], "asyncio": 0}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


async def probe(docker_client: Any, profile: str | Path) -> dict[str, Any]:
    sandbox = DockerSandbox(
        FAKE_IMAGE, load_profile(profile), ["python3", "-c", SYSCALLS], client=docker_client
    )
    async with sandbox.launch(LaunchRequest()) as component:
        await component.stdin.aclose()
        out = bytearray()
        with anyio.fail_after(60):
            async for chunk in component.stdout:
                out += chunk
            assert await component.wait() == 0, out
    report: dict[str, Any] = json.loads(out)
    return report


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_the_default_profile_refuses_what_no_component_needs(docker_client: Any) -> None:
    report = await probe(docker_client, "default")
    calls = report["calls"]
    for name in ("io_uring_setup", "keyctl", "bpf", "unshare", "mount", "userfaultfd"):
        assert calls[name] in REFUSED, (name, calls)
    assert calls["io_uring_setup"] == "ENOSYS"  # users of io_uring fall back to plain I/O
    assert calls["clone3"] == "ENOSYS"  # glibc falls back to clone, whose flags are checked
    assert all(result in REFUSED for result in calls.values()), calls
    assert report["work"] == WORK


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_without_our_filter_the_engines_lets_io_uring_through(
    docker_client: Any, tmp_path: Path
) -> None:
    shipped = (ROOT / "sandbox-profiles" / "default.toml").read_text()
    engine_filter = tmp_path / "engine-filter.toml"
    engine_filter.write_text(shipped.replace('seccomp = "seccomp-components.json"', ""))
    report = await probe(docker_client, engine_filter)
    assert report["calls"]["io_uring_setup"] == "ok"
    assert report["calls"]["ptrace"] == "ESRCH"  # allowed: pid 1 is only not being traced
    assert report["work"] == WORK


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.usefixtures("no_leaks")
async def test_under_gvisor_the_strict_filter_is_applied_and_threads_still_start(
    docker_client: Any,
) -> None:
    report = await probe(docker_client, "strict")  # runsc registered with --oci-seccomp
    calls = report["calls"]
    assert calls["io_uring_setup"] == "EPERM", calls  # runsc answers EPERM for any errnoRet
    assert calls["clone3"] == "ENOSYS"  # gVisor's own answer: glibc falls back to clone
    assert all(result in REFUSED for result in calls.values()), calls
    assert report["work"] == WORK


def test_the_gvisor_filter_is_the_shipped_one_with_clone3_allowed() -> None:
    def rules(name: str) -> dict[str, str]:
        document = json.loads((ROOT / "sandbox-profiles" / name).read_text())
        found = {}
        for rule in document["syscalls"]:
            for call in rule["names"]:
                found[call] = json.dumps({k: v for k, v in rule.items() if k != "names"
                                          and k != "comment"}, sort_keys=True)  # fmt: skip
        return found

    shipped, gvisor = rules("seccomp-components.json"), rules("seccomp-components-gvisor.json")
    assert set(shipped) == set(gvisor)
    assert {call for call in shipped if shipped[call] != gvisor[call]} == {"clone3"}
    assert json.loads(gvisor["clone3"])["action"] == "SCMP_ACT_ALLOW"


def test_default_and_strict_name_the_shipped_filter_and_show_summarises_it() -> None:
    filters = {"default": "seccomp-components.json", "dev": "seccomp-components.json",
               "strict": "seccomp-components-gvisor.json"}  # fmt: skip
    for name, filename in filters.items():
        profile = load_profile(name)
        assert profile.seccomp is not None and profile.seccomp.name == filename
        assert profile.seccomp_json is not None
    shown = json.loads(flow_runner("profiles", "show", "default").stdout)
    seccomp = shown["enforcement"]["seccomp"]
    assert seccomp["file"] == str(load_profile("default").seccomp)
    assert (seccomp["defaultAction"], seccomp["defaultErrno"]) == ("SCMP_ACT_ERRNO", "EPERM")
    assert seccomp["allowedCalls"] > 200
    assert seccomp["families"]["io_uring"] == seccomp["families"]["keyrings"] == "denied"
    assert seccomp["families"]["namespaces"] == "restricted"  # clone without namespace flags
    assert "allowed" not in seccomp["families"].values()
    assert (
        "--oci-seccomp"
        in json.loads(flow_runner("profiles", "show", "strict").stdout)["enforcement"]["seccomp"][
            "runtime"
        ]
    )
    dev = json.loads(flow_runner("profiles", "show", "dev").stdout)["enforcement"]
    assert dev["seccomp"]["file"] == str(load_profile("dev").seccomp)
    assert "not bounded" in dev["disk"]["root"]


def test_show_says_how_each_disk_bound_is_enforced(tmp_path: Path) -> None:
    disk = json.loads(flow_runner("profiles", "show", "default").stdout)["enforcement"]["disk"]
    assert "enforced by the kernel" in disk["scratch"]
    assert "polling every 0.2 s" in disk["scratch"] and "overshoot" in disk["scratch"]
    assert disk["read-write attachments"].startswith(f"each may grow by {1 << 30} bytes")
    quota = tmp_path / "quota.toml"
    quota.write_text('attachment_quota = "1g"\ndisk_poll = 0.1\n')
    disk = json.loads(flow_runner("profiles", "show", str(quota)).stdout)["enforcement"]["disk"]
    assert f"may grow by {1 << 30} bytes" in disk["read-write attachments"]
    assert "polling every 0.1 s" in disk["read-write attachments"]


def test_engine_sh_gives_an_old_runsc_registration_the_seccomp_flag(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    old = {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=kvm", "--network=none"]}
    daemon.write_text(json.dumps({"log-level": "warn", "runtimes": {"runsc": old}}))
    for _ in range(2):  # the second run changes nothing
        subprocess.run([ROOT / "images" / "engine.sh", "runsc-config", daemon], check=True,
                       timeout=60)  # fmt: skip
        config = json.loads(daemon.read_text())
        assert config["log-level"] == "warn"
        assert config["runtimes"]["runsc"] == {
            "path": "/usr/bin/runsc",
            "runtimeArgs": ["--platform=kvm", "--network=none", "--oci-seccomp"],
        }
