"""Running a rendered pod's container the way a kubelet would, with ``docker run``.

No cluster can be had here, so the pod template of a rendered Job is turned into a
``docker run`` with exactly what it says: image, command, args, env (the completion
index resolved as the Job controller does), user and group, read-only root, dropped and
added capabilities, no privilege escalation, the seccomp profile, memory and CPU limits,
memory-backed emptyDirs as tmpfs of their sizeLimit, ConfigMaps as read-only binds of
their files, PVCs as binds of host directories, the termination-log path bound to a
host file, and network none. Stopping is the kubelet's: SIGTERM, then SIGKILL after
``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
POD_IMAGE = "flow-runner/k8s-pod:latest"
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def build_pod_image() -> str:
    """``FROM flow-runner:latest`` with this checkout's runner and the fake component."""
    with tempfile.TemporaryDirectory() as context:
        ctx = Path(context)
        shutil.copytree(ROOT / "runner", ctx / "runner", ignore=shutil.ignore_patterns("*.pyc"))
        shutil.copy(ROOT / "tests" / "fake_component.py", ctx / "fake_component.py")
        site = "/opt/flow-runner/lib/python3.11/site-packages"
        (ctx / "Dockerfile").write_text(
            "FROM flow-runner:latest\n"
            f"RUN rm -rf {site}/runner\n"
            f"COPY runner {site}/runner\n"
            f"RUN python3 -m compileall -q {site}/runner\n"
            "COPY fake_component.py /flow/fake_component.py\n"
        )
        subprocess.run(
            ["docker", "build", "--network", "none", "-q", "-t", POD_IMAGE, str(ctx)],
            check=True, capture_output=True,
        )  # fmt: skip
    return POD_IMAGE


def _bytes(quantity: str) -> int:
    for unit, scale in _UNITS.items():
        if quantity.endswith(unit):
            return int(quantity[: -len(unit)]) * scale
    return int(quantity)


@dataclass
class Pod:
    """A started pod container: its process (stdout, stderr piped) and host files."""

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


def start_pod(
    resources: list[dict[str, Any]],
    workdir: Path,
    *,
    index: int | None = None,
    claims: dict[str, Path] | None = None,
    seccomp_dir: Path = ROOT / "sandbox-profiles",
) -> Pod:
    """Run the Job's pod template as its kubelet would; ``claims`` maps PVC names to
    host directories, ``seccomp_dir`` is the node's kubelet seccomp/flow-runner dir."""
    job = next(r for r in resources if r["kind"] == "Job")
    config_maps = {r["metadata"]["name"]: r["data"] for r in resources if r["kind"] == "ConfigMap"}
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = container["securityContext"]
    name = f"k8s-pod-{uuid.uuid4().hex[:12]}"
    termination_log = workdir / "termination-log"
    termination_log.write_bytes(b"")
    termination_log.chmod(0o666)
    limits = container["resources"]["limits"]
    args = [
        "docker", "run", "--rm", "-i=false", "--name", name, "--network", "none",
        "--user", f"{security['runAsUser']}:{security['runAsGroup']}",
        "--memory", str(_bytes(limits["memory"])), "--memory-swap", str(_bytes(limits["memory"])),
        "--cpus", str(int(limits["cpu"].removesuffix("m")) / 1000),
        "--entrypoint", container["command"][0],
        "-v", f"{termination_log}:{container['terminationMessagePath']}",
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
        args += ["--security-opt", f"seccomp={seccomp_dir / filename}"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        if "emptyDir" in volume:
            assert volume["emptyDir"]["medium"] == "Memory"
            size = _bytes(volume["emptyDir"]["sizeLimit"])
            args += ["--tmpfs", f"{target}:rw,size={size},mode=1777"]
        elif "configMap" in volume:
            files = workdir / f"configmap-{volume['configMap']['name']}"
            files.mkdir(exist_ok=True)
            for key, text in config_maps[volume["configMap"]["name"]].items():
                (files / key).write_text(text)
            args += ["-v", f"{files}:{target}:ro"]
        elif "persistentVolumeClaim" in volume:
            assert claims is not None
            source = claims[volume["persistentVolumeClaim"]["claimName"]]
            args += ["-v", f"{source}:{target}:{'ro' if mount.get('readOnly') else 'rw'}"]
        else:
            raise AssertionError(f"the emulation knows no volume like {volume}")
    for env in container.get("env", []):
        if env["name"] == "JOB_COMPLETION_INDEX":
            assert index is not None
            args += ["-e", f"JOB_COMPLETION_INDEX={index}"]  # the controller's annotation
    args += [container["image"], *container["command"][1:], *container["args"]]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return Pod(name, process, termination_log, pod["terminationGracePeriodSeconds"])
