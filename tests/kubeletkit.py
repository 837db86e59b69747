"""Running a rendered pod the way a kubelet would, with ``docker run``.

No cluster can be had here, so the pod template of a rendered Job is turned into
``docker run``s with exactly what it says: its init containers one after another, each
to its end (a failed one fails the pod, as with ``restartPolicy: Never``), then the
component container. Each container gets its image, command, args, env (the completion
index resolved as the Job controller does), user and group, read-only root, dropped and
added capabilities, no privilege escalation, the seccomp profile, memory and CPU limits,
and network none. Volumes: a memory-backed emptyDir that one container mounts is a tmpfs
of its sizeLimit; one that several containers share (the wrapper's) is a host directory
bound into each, since an engine's tmpfs lives and dies with one container (its
sizeLimit is then not enforced); ConfigMaps are read-only binds of their files, PVCs
binds of host directories, and the termination-log path a host file. Stopping is the
kubelet's: SIGTERM, then SIGKILL after ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNNER_IMAGE = "flow-runner/k8s-runner:test"
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def build_runner_image() -> str:
    """The runner image with this checkout's frozen wrapper: images/job-wrapper/build.sh
    (skipped when nothing it freezes changed), then ``FROM flow-runner:latest`` with its
    output, so the pods run the wrapper of the code under test."""
    env = {**os.environ, "PYTHON": sys.executable}
    frozen = subprocess.run(
        [str(ROOT / "images" / "job-wrapper" / "build.sh")],
        capture_output=True, env=env, timeout=600,
    )  # fmt: skip
    assert frozen.returncode == 0, frozen.stderr.decode(errors="replace")[-4000:]
    with tempfile.TemporaryDirectory() as context:
        ctx = Path(context)
        with (ROOT / ".build" / "job-wrapper.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # not while another checkout test freezes it
            subprocess.run(["cp", "-R", str(ROOT / ".build" / "job-wrapper"), str(ctx / "job")],
                           check=True)  # fmt: skip
        (ctx / "Dockerfile").write_text(
            "FROM flow-runner:latest\n"
            "RUN rm -rf /opt/flow-runner/job\n"
            "COPY job /opt/flow-runner/job\n"
        )
        subprocess.run(
            ["docker", "build", "--network", "none", "-q", "-t", RUNNER_IMAGE, str(ctx)],
            check=True, capture_output=True,
        )  # fmt: skip
    return RUNNER_IMAGE


def _bytes(quantity: str) -> int:
    for unit, scale in _UNITS.items():
        if quantity.endswith(unit):
            return int(quantity[: -len(unit)]) * scale
    return int(quantity)


@dataclass
class Pod:
    """A started pod's component container: its process (stdout, stderr piped) and files."""

    name: str
    process: subprocess.Popen[bytes]
    termination_log: Path
    grace: int

    def terminate(self) -> None:
        """The kubelet's stop: SIGTERM; ``docker stop`` kills after the grace period."""
        subprocess.Popen(
            ["docker", "stop", "--signal", "TERM", "--time", str(self.grace), self.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def wait(self, timeout: float) -> tuple[int, bytes, bytes]:
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err


class InitFailed(AssertionError):
    """An init container ended with a status other than 0: the pod never started."""


def start_pod(
    resources: list[dict[str, Any]],
    workdir: Path,
    *,
    index: int | None = None,
    claims: dict[str, Path] | None = None,
    seccomp_dir: Path = ROOT / "sandbox-profiles",
) -> Pod:
    """Run the Job's pod template as its kubelet would: the init containers to their end,
    then the component container, started and returned. ``claims`` maps PVC names to
    host directories, ``seccomp_dir`` is the node's kubelet seccomp/flow-runner dir."""
    job = next(r for r in resources if r["kind"] == "Job")
    config_maps = {r["metadata"]["name"]: r["data"] for r in resources if r["kind"] == "ConfigMap"}
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    everyone = [*pod.get("initContainers", []), container]
    users: dict[str, int] = {}
    for each in everyone:
        for mount in each["volumeMounts"]:
            users[mount["name"]] = users.get(mount["name"], 0) + 1
    node = _Node(workdir, config_maps, claims, seccomp_dir, users)
    name = f"k8s-pod-{uuid.uuid4().hex[:12]}"
    for number, init in enumerate(pod.get("initContainers", [])):
        args = node.run_args(pod, init, f"{name}-init-{number}", index)
        done = subprocess.run(args, capture_output=True, timeout=120)
        if done.returncode != 0:
            raise InitFailed(f"init container {init['name']} exited {done.returncode}: "
                             f"{done.stderr.decode(errors='replace')}")  # fmt: skip
    termination_log = workdir / "termination-log"
    termination_log.write_bytes(b"")
    termination_log.chmod(0o666)
    args = node.run_args(pod, container, name, index)
    args[2:2] = ["-v", f"{termination_log}:{container['terminationMessagePath']}"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return Pod(name, process, termination_log, pod["terminationGracePeriodSeconds"])


@dataclass
class _Node:
    """What the kubelet holds for one pod: its volumes' host sides."""

    workdir: Path
    config_maps: dict[str, dict[str, str]]
    claims: dict[str, Path] | None
    seccomp_dir: Path
    users: dict[str, int]
    """How many of the pod's containers mount each volume."""

    def run_args(
        self, pod: dict[str, Any], container: dict[str, Any], name: str, index: int | None
    ) -> list[str]:
        security = container["securityContext"]
        limits = container["resources"]["limits"]
        memory = str(_bytes(limits["memory"]))
        args = [
            "docker", "run", "--rm", "-i=false", "--name", name, "--network", "none",
            "--user", f"{security['runAsUser']}:{security['runAsGroup']}",
            "--memory", memory, "--memory-swap", memory,
            "--cpus", str(int(limits["cpu"].removesuffix("m")) / 1000),
            "--entrypoint", container["command"][0],
        ]  # fmt: skip
        if security["readOnlyRootFilesystem"]:
            args.append("--read-only")
        if not security["allowPrivilegeEscalation"]:
            args += ["--security-opt", "no-new-privileges"]
        args += [f"--cap-drop={c}" for c in security["capabilities"]["drop"]]
        args += [f"--cap-add={c}" for c in security["capabilities"].get("add", [])]
        seccomp = security["seccompProfile"]
        if seccomp["type"] == "Localhost":
            filename = seccomp["localhostProfile"].removeprefix("flow-runner/")
            args += ["--security-opt", f"seccomp={self.seccomp_dir / filename}"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in container["volumeMounts"]:
            args += self._volume(volumes[mount["name"]], mount)
        for env in container.get("env", []):
            if env["name"] == "JOB_COMPLETION_INDEX":
                assert index is not None
                args += ["-e", f"JOB_COMPLETION_INDEX={index}"]  # the controller's annotation
        return [*args, container["image"], *container["command"][1:], *container.get("args", [])]

    def _volume(self, volume: dict[str, Any], mount: dict[str, Any]) -> list[str]:
        target = mount["mountPath"]
        mode = "ro" if mount.get("readOnly") else "rw"
        if "emptyDir" in volume:
            assert volume["emptyDir"]["medium"] == "Memory"
            if self.users[volume["name"]] > 1:  # shared: one directory for the pod's life
                shared = self.workdir / f"emptydir-{volume['name']}"
                shared.mkdir(exist_ok=True)
                shared.chmod(0o1777)
                return ["-v", f"{shared}:{target}:{mode}"]
            size = _bytes(volume["emptyDir"]["sizeLimit"])
            return ["--tmpfs", f"{target}:rw,size={size},mode=1777"]
        if "configMap" in volume:
            files = self.workdir / f"configmap-{volume['configMap']['name']}"
            files.mkdir(exist_ok=True)
            for key, text in self.config_maps[volume["configMap"]["name"]].items():
                (files / key).write_text(text)
            return ["-v", f"{files}:{target}:ro"]
        if "persistentVolumeClaim" in volume:
            assert self.claims is not None
            source = self.claims[volume["persistentVolumeClaim"]["claimName"]]
            return ["-v", f"{source}:{target}:{mode}"]
        raise AssertionError(f"the emulation knows no volume like {volume}")
