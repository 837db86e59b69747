"""Rendering Jobs: ``flow-runner k8s job`` (a Job) and ``k8s batch`` (an Indexed Job).

The pod runs ``flow-runner job`` under tini, neither from the component's image: an init
container of the runner image copies them into a memory ``emptyDir`` mounted read-only at
:data:`WRAPPER_DIR`, so any image with a command runs unchanged. The sandbox profile
becomes both containers' securityContext, resources and volumes; what a pod cannot
express is returned as notes (a YAML comment, an annotation, stderr), never dropped.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from runner import __version__, json1
from runner.batch.keys import image_document, input_digest
from runner.batch.manifest import Defaults, ManifestError, Row, check
from runner.exits import EXIT_WRAPPER
from runner.json1 import JSONValue
from runner.protocol.names import is_local_name
from runner.sandbox.profiles import SandboxProfile

from .termination import FINAL_EXITS

KUBERNETES_VERSION = "1.34.0"
"""The Kubernetes version whose schemas the rendered manifests are validated against."""
JOB_DIR = "/flow/job"
SCRATCH_DIR = "/flow/scratch"
RESULTS_DIR = "/flow/results"
ATTACHMENTS_DIR = "/flow/attachments"
SECCOMP_NODE_DIR = "/var/lib/kubelet/seccomp"
"""Where a kubelet looks for ``Localhost`` seccomp profiles."""
SECCOMP_SUBDIR = "flow-runner"
GRACE_MARGIN = 5
"""Seconds the kubelet's termination grace exceeds the wrapper's cancel grace: room for
the kill, the report and the termination message after the component is stopped."""
CONFIGMAP_LIMIT = 1 << 20
"""Bytes of data a ConfigMap may hold."""
RUNNER_IMAGE = f"flow-runner:{__version__}"
"""The runner image of this version: its init container brings the wrapper into the pod."""
RUNNER_WRAPPER_DIR = "/opt/flow-runner/job"
"""Where the runner image keeps the frozen wrapper and tini (images/job-wrapper/build.sh)."""
WRAPPER_DIR = "/flow/wrapper"
"""Where the component container finds them (the read-only ``emptyDir``)."""
WRAPPER = (f"{WRAPPER_DIR}/tini", "--", f"{WRAPPER_DIR}/flow-runner-job")
"""The component container's command: tini as PID 1 forwards the kubelet's SIGTERM to the
wrapper and reaps orphans."""
WRAPPER_SIZE = "64Mi"
"""The sizeLimit of the wrapper's ``emptyDir`` (it takes about 32 MiB)."""
LABEL_KEY = "flow-runner.io/key"
LABEL_JOB = "flow-runner.io/job"
NOTES = "flow-runner.io/not-enforced"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_CONFIG_KEY = re.compile(r"[^-._a-zA-Z0-9]")
_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


class RenderError(ValueError):
    """The job cannot be rendered as asked; the message names the option and the fix."""


@dataclass(frozen=True)
class Mount:
    """An attachment as a pod volume: a PVC, a ConfigMap or (if allowed) a host path."""

    name: str
    kind: str  # pvc | configmap | host
    source: str
    subpath: str | None
    writable: bool

    def volume(self, volume_name: str) -> dict[str, Any]:
        if self.kind == "pvc":
            source: dict[str, Any] = {"claimName": self.source}
            if not self.writable:
                source["readOnly"] = True
            return {"name": volume_name, "persistentVolumeClaim": source}
        if self.kind == "configmap":
            return {"name": volume_name, "configMap": {"name": self.source}}
        return {"name": volume_name, "hostPath": {"path": self.source}}

    def mount(self, volume_name: str, path: str) -> dict[str, Any]:
        mount: dict[str, Any] = {
            "name": volume_name,
            "mountPath": path,
            "readOnly": not self.writable,
        }
        if self.subpath:
            mount["subPath"] = self.subpath
        return mount


def parse_mount(spec: str, profile: SandboxProfile, option: str = "--attach") -> Mount:
    """``NAME=pvc:CLAIM[/SUBPATH][:ro|rw]``, ``NAME=configmap:NAME[:ro]`` or a host path
    ``NAME=/PATH[:ro|rw]``, the last only where the profile's ``allowed_mounts`` covers it."""
    name, sep, rest = spec.partition("=")
    form = "write NAME=pvc:CLAIM[/SUBPATH][:ro|rw] or NAME=configmap:NAME"
    if not sep or not is_local_name(name):
        raise RenderError(f"{option} {spec!r}: {form} (NAME a LocalName)")
    head, colon, mode = rest.rpartition(":")
    if not colon or mode not in ("ro", "rw"):
        head, mode = rest, "ro"
    writable = mode == "rw"
    kind, _, source = head.partition(":")
    if kind == "pvc":
        claim, _, subpath = source.partition("/")
        if not _NAME.fullmatch(claim) or ".." in subpath.split("/"):
            raise RenderError(f"{option} {spec!r}: {claim!r} is not a claim name; {form}")
        return Mount(name, "pvc", claim, subpath or None, writable)
    if kind == "configmap":
        if not _NAME.fullmatch(source):
            raise RenderError(f"{option} {spec!r}: {source!r} is not a ConfigMap name; {form}")
        if writable:
            raise RenderError(f"{option} {spec!r}: a ConfigMap is mounted read-only; drop :rw")
        return Mount(name, "configmap", source, None, False)
    if head.startswith("/"):
        path = Path(head)
        if not any(path == a or a in path.parents for a in profile.allowed_mounts):
            raise RenderError(
                f"{option} {spec!r}: a hostPath volume hands the component a node's files; "
                f"refused unless profile {profile.name!r} lists it in allowed_mounts; use a "
                "PersistentVolumeClaim (NAME=pvc:CLAIM) instead"
            )
        return Mount(name, "host", head, None, writable)
    raise RenderError(f"{option} {spec!r}: unknown source {kind!r}; {form}")


@dataclass(frozen=True)
class JobSpec:
    """What ``k8s job`` / ``k8s batch`` were asked to render."""

    image: str
    command: tuple[str, ...]
    profile: SandboxProfile
    deadline: float
    input: JSONValue = None
    settings: dict[str, JSONValue] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    results: Mount | None = None
    package: str | None = None
    name: str | None = None
    namespace: str | None = None
    backoff_limit: int = 2
    ttl: int = 86400
    runner_image: str = RUNNER_IMAGE

    def key(self, value: JSONValue, settings: dict[str, JSONValue], deadline: float) -> str:
        """The invocation key of a run of this job: ``batch``'s key document, with the image
        by its name (a cluster resolves it) and each volume by its source."""
        seccomp = self.profile.seccomp_json
        document = image_document(
            self.image, self.profile.as_json(),
            None if seccomp is None else hashlib.sha256(seccomp.encode()).hexdigest(),
            self.command, [asdict(m) for m in self.mounts], value, settings, deadline,
        )  # fmt: skip
        return hashlib.sha256(json1.canonical(document)).hexdigest()


@dataclass
class Rendered:
    """The resources to apply, and what the pod does not enforce of the profile."""

    resources: list[dict[str, Any]]
    notes: list[str]


def render_job(spec: JobSpec) -> Rendered:
    """A ConfigMap with the input and settings, the Job, and a deny-all NetworkPolicy."""
    key = spec.key(spec.input, spec.settings, spec.deadline)
    name = _job_name(spec.name, key)
    files = {
        "input.json": json1.dumps(spec.input).decode(),
        "settings.json": json1.dumps(spec.settings).decode(),
    }
    _check_size(files, "--input and --settings")
    args = ["--input", f"@{JOB_DIR}/input.json", "--settings", f"@{JOB_DIR}/settings.json"]
    template = _pod_template(spec, name, key, args, env=[])
    job_spec: dict[str, Any] = {
        "backoffLimit": spec.backoff_limit,
        "activeDeadlineSeconds": _active_deadline(spec, waves=1),
        "ttlSecondsAfterFinished": spec.ttl,
        "podFailurePolicy": _failure_policy("FailJob"),
        "template": template,
    }
    return _rendered(spec, name, key, files, job_spec)


@dataclass(frozen=True)
class BatchRows:
    """The checked rows of a batch manifest, normalized for the pod (one JSON a line)."""

    name: str
    lines: list[str]
    longest: float


def batch_rows(path: Path, spec: JobSpec) -> BatchRows:
    """Read a ``flow-runner batch`` manifest for an Indexed Job as ``batch`` does, ``spec``
    giving what a row leaves out. One pod template serves every row, so a row that names
    another image, profile or command, or attachments, is refused; every bad line listed.
    """
    defaults = Defaults(
        image=spec.image, input=spec.input, settings=spec.settings,
        deadline=f"{spec.deadline}s", profile=spec.profile, command=spec.command,
    )  # fmt: skip
    lines: list[str] = []
    longest = 0.0
    try:
        for row in check(path, defaults, None, refuse=lambda value: _refused(value, spec)):
            lines.append(_row_line(row, spec))
            longest = max(longest, row.deadline)
    except ManifestError as exc:
        raise RenderError(str(exc)) from exc
    stem = path.name.removesuffix(".jsonl").removesuffix(".json") or path.name
    return BatchRows(_CONFIG_KEY.sub("-", stem), lines, longest)


def _row_line(row: Row, spec: JobSpec) -> str:
    return json1.dumps(
        {
            "id": row.id,
            "line": row.line,
            "key": spec.key(row.input, row.settings, row.deadline),
            "inputDigest": input_digest(row),
            "input": row.input,
            "settings": row.settings,
            "deadline": _millis(row.deadline),
        }
    ).decode()


def _refused(value: dict[str, JSONValue], spec: JobSpec) -> Iterable[tuple[str, str]]:
    same = {"image": spec.image, "profile": spec.profile.name, "command": list(spec.command)}
    for name, expected in same.items():
        if name in value and value[name] != expected:
            yield name, f"every pod of the Indexed Job has {expected!r}; render this row apart"
    if value.get("attach"):
        yield "attach", "give attachments as volumes with k8s batch --attach, not per row"
    if "flow" in value:
        yield "flow", "an Indexed Job runs the image of --image; run flows with flow-runner batch"


def render_batch(
    spec: JobSpec, rows: BatchRows, *, jobs: int, retries: int, max_failed: int | None
) -> Rendered:
    """An Indexed Job running each row of ``rows`` in the pod of its index."""
    key = hashlib.sha256("\n".join(rows.lines).encode()).hexdigest()
    name = _job_name(spec.name, key)
    data_key = f"{rows.name}.jsonl"
    files = {data_key: "\n".join(rows.lines) + "\n"}
    _check_size(files, "the manifest")
    count = len(rows.lines)
    env = [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": _INDEX_FIELD}}}]
    args = ["--manifest", f"{JOB_DIR}/{data_key}"]
    longest = replace(spec, deadline=max(rows.longest, spec.deadline))
    template = _pod_template(longest, name, key, args, env=env)
    waves = math.ceil(count / jobs) * (1 + retries)
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": min(jobs, count),
        "backoffLimitPerIndex": retries,
        "maxFailedIndexes": count if max_failed is None else min(max_failed, count),
        "activeDeadlineSeconds": _active_deadline(longest, waves=waves),
        "ttlSecondsAfterFinished": spec.ttl,
        "podFailurePolicy": _failure_policy("FailIndex"),
        "template": template,
    }
    return _rendered(spec, name, key, files, job_spec)


def _rendered(
    spec: JobSpec, name: str, key: str, files: dict[str, str], job_spec: dict[str, Any]
) -> Rendered:
    notes = not_enforced(spec.profile)
    annotations = {LABEL_KEY: key, "flow-runner.io/profile": spec.profile.name}
    if notes:
        annotations[NOTES] = json.dumps(notes)
    job_meta = {**_metadata(spec, name, key), "annotations": annotations}
    resources: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _metadata(spec, name, key),
            "data": files,
        },
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": job_spec},
    ]
    if spec.profile.network == "none":
        resources.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": _metadata(spec, f"{name}-deny-all", key),
                "spec": {
                    "podSelector": {"matchLabels": {LABEL_JOB: name}},
                    "policyTypes": ["Ingress", "Egress"],
                },
            }
        )
    return Rendered(resources, notes)


def _metadata(spec: JobSpec, name: str, key: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": _labels(name, key)}
    if spec.namespace is not None:
        meta["namespace"] = spec.namespace
    return meta


def _labels(name: str, key: str) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "flow-runner", LABEL_JOB: name, LABEL_KEY: key[:63]}


def _job_name(name: str | None, key: str) -> str:
    if name is None:
        return f"flow-{key[:12]}"
    if len(name) > 52 or not _NAME.fullmatch(name):
        raise RenderError(
            f"--name {name!r}: a Job name is at most 52 lowercase letters, digits and dashes "
            "(its pods add a suffix within the 63 of a label)"
        )
    return name


def _check_size(files: dict[str, str], what: str) -> None:
    size = sum(len(k) + len(v.encode()) for k, v in files.items())
    if size > CONFIGMAP_LIMIT:
        raise RenderError(
            f"{what} take {size} bytes, more than a ConfigMap holds ({CONFIGMAP_LIMIT}); "
            "put large inputs in an attachment (a PVC) or split the manifest"
        )


def _failure_policy(action: str) -> dict[str, Any]:
    """Disruptions are not failures; outcomes and usage errors are final; the wrapper's
    own failure counts towards the retries."""
    disruption = {"type": "DisruptionTarget", "status": "True"}
    return {
        "rules": [
            {"action": "Ignore", "onPodConditions": [disruption]},
            _on_exits(action, list(FINAL_EXITS)),
            _on_exits("Count", [EXIT_WRAPPER]),
        ]
    }


def _on_exits(action: str, values: list[int]) -> dict[str, Any]:
    exits = {"containerName": "component", "operator": "In", "values": values}
    return {"action": action, "onExitCodes": exits}


def termination_grace(profile: SandboxProfile) -> int:
    return math.ceil(profile.cancel_grace) + GRACE_MARGIN


def _active_deadline(spec: JobSpec, *, waves: int) -> int:
    """The run's deadline plus the termination grace, for each wave of pods."""
    return waves * (math.ceil(spec.deadline) + termination_grace(spec.profile))


def _pod_template(
    spec: JobSpec, name: str, key: str, args: list[str], env: list[Any]
) -> dict[str, Any]:
    profile = spec.profile
    volumes: list[Any] = [
        {"name": "job", "configMap": {"name": name}},
        {"name": "wrapper", "emptyDir": {"medium": "Memory", "sizeLimit": WRAPPER_SIZE}},
        {
            "name": "scratch",
            "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(profile.scratch_size)},
        },
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(profile.tmp_size)}},
    ]
    mounts: list[Any] = [
        {"name": "job", "mountPath": JOB_DIR, "readOnly": True},
        {"name": "wrapper", "mountPath": WRAPPER_DIR, "readOnly": True},
        {"name": "scratch", "mountPath": SCRATCH_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    wrapper_args = [*args, "--deadline", _millis(spec.deadline), "--scratch", SCRATCH_DIR]
    for number, m in enumerate(spec.mounts):
        path = f"{ATTACHMENTS_DIR}/{m.name}"
        volumes.append(m.volume(f"a{number}"))
        mounts.append(m.mount(f"a{number}", path))
        wrapper_args += ["--attach", f"{m.name}={path}:{'rw' if m.writable else 'ro'}"]
    if spec.results is not None:
        volumes.append(spec.results.volume("results"))
        mounts.append(spec.results.mount("results", RESULTS_DIR))
        wrapper_args += ["--results", RESULTS_DIR]
    if spec.package is not None:
        wrapper_args += ["--package", spec.package]
    grace = f"{profile.cancel_grace:g}"
    wrapper_args += ["--grace", grace, "--exit-grace", f"{profile.exit_grace:g}"]
    container: dict[str, Any] = {
        "name": "component",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(WRAPPER),
        "args": [*wrapper_args, "--", *spec.command],
        "resources": _resources_of(profile),
        "securityContext": security_context(profile),
        "volumeMounts": mounts,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if env:
        container["env"] = env
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": termination_grace(profile),
        "initContainers": [wrapper_container(spec)],
        "containers": [container],
        "volumes": volumes,
    }
    if any(m.writable for m in (*spec.mounts, *([spec.results] if spec.results else []))):
        pod["securityContext"] = {"fsGroup": _ids(profile)[1]}
    if profile.runtime == "runsc":
        pod["runtimeClassName"] = "gvisor"
    return {"metadata": {"labels": _labels(name, key)}, "spec": pod}


def wrapper_container(spec: JobSpec) -> dict[str, Any]:
    """The init container that copies the wrapper into the pod, as locked down as the
    component (an init container's limits count only as a maximum of the pod's)."""
    return {
        "name": "wrapper",
        "image": spec.runner_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["cp", "-R", f"{RUNNER_WRAPPER_DIR}/.", f"{WRAPPER_DIR}/"],
        "resources": _resources_of(spec.profile),
        "securityContext": security_context(spec.profile),
        "volumeMounts": [{"name": "wrapper", "mountPath": WRAPPER_DIR}],
    }


def _ids(profile: SandboxProfile) -> tuple[int, int]:
    uid, _, gid = profile.user.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise RenderError(
            f"profile {profile.name!r}: user {profile.user!r} is not numeric UID:GID; a pod's "
            "runAsUser and runAsGroup are numbers, so write them in the profile"
        )
    return int(uid), int(gid)


def security_context(profile: SandboxProfile) -> dict[str, Any]:
    """The container's securityContext from the profile."""
    uid, gid = _ids(profile)
    caps: dict[str, Any] = {"drop": [c.removeprefix("CAP_") for c in profile.cap_drop]}
    if profile.cap_add:
        caps["add"] = [c.removeprefix("CAP_") for c in profile.cap_add]
    return {
        "runAsNonRoot": uid != 0,
        "runAsUser": uid,
        "runAsGroup": gid,
        "readOnlyRootFilesystem": profile.read_only_root,
        "allowPrivilegeEscalation": not profile.no_new_privileges,
        "privileged": False,
        "capabilities": caps,
        "seccompProfile": _seccomp(profile),
    }


def _seccomp(profile: SandboxProfile) -> dict[str, Any]:
    if profile.seccomp is None:
        return {"type": "RuntimeDefault"}
    if profile.seccomp == "unconfined":
        return {"type": "Unconfined"}
    return {"type": "Localhost", "localhostProfile": seccomp_node_path(profile)}


def seccomp_node_path(profile: SandboxProfile) -> str:
    """The Localhost profile's path relative to the kubelet's seccomp directory."""
    assert isinstance(profile.seccomp, Path)
    return f"{SECCOMP_SUBDIR}/{profile.seccomp.name}"


def _resources_of(profile: SandboxProfile) -> dict[str, Any]:
    """Requests equal to limits: the pod is Guaranteed, as a container's limits are."""
    amounts: dict[str, Any] = {
        "cpu": f"{round(profile.cpus * 1000)}m",
        "memory": _quantity(profile.memory),
    }
    return {"limits": amounts, "requests": dict(amounts)}


def _millis(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def _quantity(size: int) -> str:
    for unit, scale in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def not_enforced(profile: SandboxProfile) -> list[str]:
    """What the profile sets that this pod does not enforce (or needs on the node)."""
    notes = [
        f"pids = {profile.pids}: a pod cannot set its own pids limit (the kubelet's "
        "podPidsLimit is node-wide); not applied",
        f"nofile = {profile.nofile}: Kubernetes has no ulimits; the runtime's default applies",
        f"disk_entries = {profile.disk_entries}: an emptyDir has no bound on its entries; "
        "only its sizeLimit applies (and memory-backed emptyDirs count against the memory limit)",
        f"memory = {_quantity(profile.memory)}: the wrapper's files (about 32 MiB) in their "
        "memory emptyDir count against the pod's memory limit, so the component has that "
        "much less",
    ]
    if profile.attachment_quota is not None:
        notes.append(
            f"attachment_quota = {profile.attachment_quota}: not polled in a pod; a read-write "
            "PVC is bounded only by its capacity"
        )
    if isinstance(profile.seccomp, Path):
        notes.append(
            f"seccomp = {profile.seccomp}: every node must hold this file at "
            f"{SECCOMP_NODE_DIR}/{seccomp_node_path(profile)}, or the pod fails to start"
        )
    if profile.runtime == "runsc":
        notes.append(
            "runtime = runsc: the cluster needs a RuntimeClass named gvisor (handler runsc) "
            "on its nodes"
        )
    if profile.network == "none":
        notes.append(
            "network = none: the pod keeps its own interface; the deny-all NetworkPolicy "
            "holds only where the cluster's network plugin enforces NetworkPolicy"
        )
    else:
        notes.append(f"network = {profile.network!r}: the pod gets the cluster network")
    if not profile.read_only_root:
        notes.append("read_only_root = false: the writable root is not bounded in size")
    return notes


def to_yaml(rendered: Rendered) -> str:
    """YAML documents, the notes first as a comment."""
    import yaml

    head = "".join(f"# profile vs pod: {n}\n" for n in rendered.notes)
    version = f"flow-runner {__version__}; schemas of Kubernetes {KUBERNETES_VERSION}"
    head += f"# rendered by {version}\n"
    return head + yaml.safe_dump_all(rendered.resources, sort_keys=False, width=100)


def to_json(rendered: Rendered) -> str:
    """A ``v1`` List of the resources (``kubectl apply -f`` takes it)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": rendered.resources}, indent=2)
