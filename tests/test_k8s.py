"""flow-runner on Kubernetes: the in-pod wrapper, the manifests, batch import.

No cluster can be had here. The wrapper runs for real (as a process, and frozen in the
pods' containers, started exactly as a kubelet would start the rendered pod, its init
container first: tests/kubeletkit.py); the manifests are validated against the official
schemas of Kubernetes ``KUBERNETES_VERSION`` with ``kubernetes-validate``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runner.exits import EXIT_WRAPPER
from runner.k8s import manifests, termination
from runner.k8s.manifests import KUBERNETES_VERSION
from runner.sandbox.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "runner.cli"]
FAKE = [sys.executable, str(ROOT / "tests" / "fake_component.py")]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def wait_component_started(root_pid: int, timeout: float = 30) -> None:
    """Return once a process below ``root_pid`` runs the fake component with its stdin
    reader thread started: its ``main()`` runs (seen in procfs, as a condition polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in _descendants(root_pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                threads = len(os.listdir(f"/proc/{pid}/task"))
            except OSError:  # ended meanwhile
                continue
            if b"fake_component.py" in cmdline and threads >= 2:
                return
        time.sleep(0.01)
    raise AssertionError(f"no fake component started below pid {root_pid} in {timeout} s")


def _descendants(root_pid: int) -> list[int]:
    found: list[int] = []
    pending = [root_pid]
    while pending:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            except OSError:
                continue
            found += map(int, children)
            pending += map(int, children)
    return found


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> Any:
    return subprocess.run(
        [*CLI, *args], capture_output=True, env=env or ENV, timeout=timeout, cwd=ROOT
    )


def job(
    tmp_path: Path, *args: str, scenario: str = "echo", env: dict[str, str] | None = None
) -> Any:
    log = tmp_path / "termination-log"
    return cli("job", "--termination-log", str(log), *args, "--", *FAKE, scenario, env=env)


def lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(x) for x in data.splitlines() if x.startswith(b"{")]


def header_of(stderr: bytes) -> dict[str, Any]:
    return next(x["flowRunnerJob"] for x in lines(stderr) if "flowRunnerJob" in x)


def sealed(stdout: bytes, stderr: bytes) -> dict[str, Any]:
    """The one result line, checked against the header's seal digest."""
    (result,) = lines(stdout)
    digest = "sha256:" + hashlib.sha256(result["job"]["seal"].encode()).hexdigest()
    assert digest == header_of(stderr)["sealDigest"]
    return result


def termination_message(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    assert len(data) <= termination.MESSAGE_LIMIT
    return json.loads(data)


def validate(resources: list[dict[str, Any]]) -> None:
    for resource in resources:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


# ----- the wrapper, as a process --------------------------------------------------------


def test_job_result_line_report_and_termination_message(tmp_path: Path) -> None:
    (tmp_path / "input.json").write_text('{"n": 7}')
    results = tmp_path / "results"
    results.mkdir()
    done = job(tmp_path, "--input", f"@{tmp_path}/input.json", "--results", str(results))
    assert done.returncode == 0, done.stderr
    result = sealed(done.stdout, done.stderr)
    assert result["outcome"] == "done" and result["output"] == {"n": 7}
    (report,) = results.glob("*.report.json")
    digest = "sha256:" + hashlib.sha256(report.read_bytes()).hexdigest()
    assert result["job"]["reportDigest"] == digest
    message = termination_message(tmp_path / "termination-log")
    assert message == {
        "class": "done", "exit": 0, "run": result["job"]["run"], "outcome": "done",
        "reportDigest": digest,
    }  # fmt: skip


def test_job_input_from_environment(tmp_path: Path) -> None:
    done = job(tmp_path, "--input", "env:FLOW_INPUT", env={**ENV, "FLOW_INPUT": "[1, 2]"})
    assert done.returncode == 0 and sealed(done.stdout, done.stderr)["output"] == [1, 2]
    missing = job(tmp_path, "--input", "env:NOPE")
    assert missing.returncode == 2 and b"no variable 'NOPE'" in missing.stderr
    assert termination_message(tmp_path / "termination-log")["class"] == "usage"


def test_job_deadline_is_124(tmp_path: Path) -> None:
    started = time.monotonic()
    late = job(tmp_path, "--deadline", "1s", "--grace", "0.2", scenario="ignore-cancel")
    assert late.returncode == 124 and time.monotonic() - started < 15
    assert sealed(late.stdout, late.stderr)["error"]["code"] == "DEADLINE_EXCEEDED"
    message = termination_message(tmp_path / "termination-log")
    assert message["class"] == "deadline" and message["code"] == "DEADLINE_EXCEEDED"


def test_job_sigterm_is_the_first_ctrl_c(tmp_path: Path) -> None:
    """The kubelet's SIGTERM cancels: request/cancel, the grace, then the kill."""
    process = subprocess.Popen(
        [*CLI, "job", "--termination-log", str(tmp_path / "tl"), "--grace", "0.5", "--",
         *FAKE, "ignore-cancel"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT,
    )  # fmt: skip
    assert process.stderr is not None
    first = process.stderr.readline()  # the header: written before the component starts
    assert b"flowRunnerJob" in first
    wait_component_started(process.pid)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 130, err
    assert time.monotonic() - started < 10  # the grace was 0.5 s, not a hang
    assert sealed(out, first + err)["error"]["code"] == "CANCELLED"
    assert termination_message(tmp_path / "tl")["class"] == "cancelled"


def test_job_refuses_child_flows(tmp_path: Path) -> None:
    done = job(tmp_path, scenario="unavailable")
    assert done.returncode == 0
    assert sealed(done.stdout, done.stderr)["output"]["child"] == "UNAVAILABLE"


def test_job_wrapper_failure_is_75(tmp_path: Path) -> None:
    """A report that cannot be written to the results volume is the wrapper's failure."""
    results = tmp_path / "results"
    (results / "a.report.json").mkdir(parents=True)  # the row's report path is taken
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(_row_line("a", 1) + "\n")
    failed = cli("job", "--termination-log", str(tmp_path / "tl"), "--manifest", str(manifest),
                 "--index", "0", "--results", str(results), "--", *FAKE, "echo")  # fmt: skip
    assert failed.returncode == EXIT_WRAPPER, failed.stderr
    assert b"Traceback" not in failed.stderr and lines(failed.stdout) == []
    assert termination_message(tmp_path / "tl")["class"] == "wrapper"


def test_termination_message_fits_4_kib() -> None:
    text = 'é\u2028"' * 5000
    data = termination.message(4, run_id="r", outcome="o" * 9000, code="C" * 9000, text=text)
    assert len(data) <= termination.MESSAGE_LIMIT
    body = json.loads(data)
    assert len(body["outcome"]) == termination.NAME_LIMIT and body["message"]
    assert text.startswith(body["message"])


def _row_line(row_id: str, value: Any) -> str:
    return json.dumps({"id": row_id, "line": 1, "key": "k", "inputDigest": "d", "input": value,
                       "settings": {}})  # fmt: skip


# ----- the manifests ----------------------------------------------------------------------


def render(*args: str) -> tuple[list[dict[str, Any]], str]:
    done = cli("k8s", *args)
    assert done.returncode == 0, done.stderr
    documents = list(yaml.safe_load_all(done.stdout))
    if documents[0]["kind"] == "List":  # -o json
        documents = documents[0]["items"]
    return documents, done.stderr.decode()


def test_k8s_job_validates_and_carries_the_profile(tmp_path: Path) -> None:
    resources, stderr = render(
        "job", "img:1", "--input", '{"a": 1}', "--deadline", "90s", "--attach",
        "data=pvc:inputs/set-1:ro", "--attach", "conf=configmap:tool-conf", "--results",
        "pvc:out", "--", "python3", "/flow/package/flow.py",
    )  # fmt: skip
    validate(resources)
    kinds = [r["kind"] for r in resources]
    assert kinds == ["ConfigMap", "Job", "NetworkPolicy"]
    cm, jb, policy = resources
    assert json.loads(cm["data"]["input.json"]) == {"a": 1}
    spec = jb["spec"]
    pod = spec["template"]["spec"]
    assert spec["activeDeadlineSeconds"] == 90 + pod["terminationGracePeriodSeconds"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "True"}]}  # fmt: skip
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"]["values"] == [
        2, 3, 4, 124, 130]  # fmt: skip
    assert rules[2] == {"action": "Count", "onExitCodes": {
        "containerName": "component", "operator": "In", "values": [75]}}  # fmt: skip
    (container,) = pod["containers"]
    assert container["command"] == ["/flow/wrapper/tini", "--", "/flow/wrapper/flow-runner-job"]
    (init,) = pod["initContainers"]
    assert init["image"] == "flow-runner:0.1.0" and init["command"][0] == "cp"
    assert init["securityContext"] == container["securityContext"]
    assert init["resources"] == container["resources"]
    assert init["volumeMounts"] == [{"name": "wrapper", "mountPath": "/flow/wrapper"}]
    assert {"name": "wrapper", "mountPath": "/flow/wrapper", "readOnly": True} in container[
        "volumeMounts"]  # fmt: skip
    assert container["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
        "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "Localhost",
                           "localhostProfile": "flow-runner/seccomp-components.json"},
    }  # fmt: skip
    assert container["resources"]["limits"] == {"cpu": "1000m", "memory": "512Mi"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["scratch"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Mi"}
    assert volumes["wrapper"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert volumes["a0"]["persistentVolumeClaim"] == {"claimName": "inputs", "readOnly": True}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/flow/attachments/data"]["subPath"] == "set-1"
    assert "--attach" in container["args"] and "data=/flow/attachments/data:ro" in container["args"]
    assert policy["spec"] == {"podSelector": {"matchLabels": {"flow-runner.io/job":
        jb["metadata"]["name"]}}, "policyTypes": ["Ingress", "Egress"]}  # fmt: skip
    key = jb["metadata"]["annotations"]["flow-runner.io/key"]
    assert jb["metadata"]["labels"]["flow-runner.io/key"] == key[:63]
    notes = json.loads(jb["metadata"]["annotations"]["flow-runner.io/not-enforced"])
    assert any(n.startswith("pids = 256") for n in notes) and "nofile = 1024" in stderr


def test_k8s_job_strict_and_weakened_profiles(tmp_path: Path) -> None:
    strict, _ = render("job", "img:1", "--profile", "strict", "-o", "json", "--", "run")
    validate(strict)
    assert strict[1]["spec"]["template"]["spec"]["runtimeClassName"] == "gvisor"
    loose = tmp_path / "loose.toml"
    loose.write_text(
        'user = "1000:1000"\nread_only_root = false\nseccomp = "unconfined"\n'
        'cap_add = ["CAP_NET_BIND_SERVICE"]\nno_new_privileges = false\nnetwork = "host"\n'
        "allow_network = true\n"
    )
    resources, stderr = render("job", "img:1", "--profile", str(loose), "--", "run")
    validate(resources)
    assert [r["kind"] for r in resources] == ["ConfigMap", "Job"]  # no deny-all policy
    context = resources[1]["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert context["seccompProfile"] == {"type": "Unconfined"}
    assert (
        context["allowPrivilegeEscalation"] is True and context["readOnlyRootFilesystem"] is False
    )
    assert "writable root is not bounded" in stderr


def test_k8s_job_refuses_host_paths_and_bad_names(tmp_path: Path) -> None:
    refused = cli("k8s", "job", "img:1", "--attach", f"d={tmp_path}", "--", "run")
    assert refused.returncode == 2 and b"hostPath" in refused.stderr
    assert b"Traceback" not in refused.stderr
    allowed = tmp_path / "allow.toml"
    allowed.write_text(f'allowed_mounts = ["{tmp_path}"]\n')
    resources, _ = render("job", "img:1", "-p", str(allowed), "--attach", f"d={tmp_path}:rw",
                          "--", "run")  # fmt: skip
    validate(resources)
    bad = cli("k8s", "job", "img:1", "--name", "Bad_Name", "--", "run")
    assert bad.returncode == 2 and b"--name" in bad.stderr
    newline = cli("k8s", "job", "img:1", "--name", "job\n", "--", "run")
    assert newline.returncode == 2 and b"--name" in newline.stderr  # `$` once let it in
    with pytest.raises(manifests.RenderError):
        manifests.parse_mount("d=pvc:claim\n", load_profile("default"))


@pytest.mark.docker
def test_k8s_job_checks_the_image_it_can_read(docker_client: Any, tmp_path: Path) -> None:
    """Refused: an image with nothing to run, one of another architecture than the
    wrapper's; said: what could not be read (no engine, an image not on it)."""
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY Dockerfile /Dockerfile\n")
    tag = f"flow-runner/k8s-check-{os.getpid()}"
    for platform, cmd in (("linux/amd64", ""), ("linux/arm64", 'CMD ["/x"]\n')):
        (tmp_path / "Dockerfile").write_text(f"FROM scratch\nCOPY Dockerfile /Dockerfile\n{cmd}")
        subprocess.run(["docker", "build", "-q", "--network", "none", "--platform", platform,
                        "-t", f"{tag}:{platform[6:]}", str(tmp_path)],
                       check=True, capture_output=True)  # fmt: skip
    try:
        empty = cli("k8s", "job", f"{tag}:amd64")
        assert empty.returncode == 2 and b"has no ENTRYPOINT or CMD" in empty.stderr
        arm = cli("k8s", "job", f"{tag}:arm64")
        assert arm.returncode == 2, arm.stderr
        assert b"built for linux/arm64, and the wrapper" in arm.stderr
        assert b"--runner-image" in arm.stderr and b"Traceback" not in arm.stderr
        resources, stderr = render("job", f"{tag}:amd64", "--", "/x")
        validate(resources)
        assert "was not inspected" not in stderr
    finally:
        subprocess.run(["docker", "rmi", f"{tag}:amd64", f"{tag}:arm64"], capture_output=True)
    missing = cli("k8s", "job", f"{tag}:gone", "--", "/x")
    assert missing.returncode == 0 and b"was not inspected (not on the local engine)" in (
        missing.stderr)  # fmt: skip
    no_engine = {**ENV, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    unread = cli("k8s", "job", HELLO, "--", "python3", "/flow/package/flow.py", env=no_engine)
    assert unread.returncode == 0 and b"was not inspected (no engine" in unread.stderr
    refused = cli("k8s", "job", HELLO, env=no_engine)
    assert refused.returncode == 2 and b"name the component's command" in refused.stderr


def test_k8s_batch_indexed_job(tmp_path: Path) -> None:
    manifest = tmp_path / "cases.jsonl"
    manifest.write_text('{"id": "a", "input": 1}\n\n{"id": "b", "input": 2, "deadline": "10m"}\n')
    resources, _ = render("batch", str(manifest), "--image", "img:1", "--command", "run it",
                          "--jobs", "3", "--retries", "2", "--runner-image",
                          "registry.example/flow-runner:0.1.0")  # fmt: skip
    validate(resources)
    spec = resources[1]["spec"]
    (init,) = spec["template"]["spec"]["initContainers"]
    assert init["image"] == "registry.example/flow-runner:0.1.0"
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimitPerIndex"] == 2 and spec["maxFailedIndexes"] == 2
    assert spec["podFailurePolicy"]["rules"][1]["action"] == "FailIndex"
    rows = [json.loads(x) for x in resources[0]["data"]["cases.jsonl"].splitlines()]
    assert [(r["id"], r["line"], r["input"], r["deadline"]) for r in rows] == [
        ("a", 1, 1, "300000ms"), ("b", 3, 2, "600000ms")]  # fmt: skip
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "image": "other:2"}\n{"id": "a"}\n{"id": "B"}\nnot json\n'
                   '{"id": "f", "flow": "x"}\n{"id": "g", "attach": ["x=/tmp:ro"]}\n')  # fmt: skip
    refused = cli("k8s", "batch", str(bad), "--image", "img:1", "--command", "run")
    assert refused.returncode == 2
    for text in (b"line 1: image", b"line 2: id: 'a' is already on line 1", b"line 3: id",
                 b"line 4:", b"line 5: flow: an Indexed Job runs the image of --image; run "
                 b"flows with flow-runner batch", b"line 6: attach: give attachments as "
                 b"volumes with k8s batch --attach"):  # fmt: skip
        assert text in refused.stderr


def test_batch_rows_are_keyed_as_batch_keys_them(tmp_path: Path) -> None:
    """A row's key is batch's key document (the deadline in it: a row that ran out of
    time may finish with more), and its input digest the batch store's, by which
    ``batch diff`` matches rows."""
    from runner.batch import keys
    from runner.batch.manifest import Defaults, check

    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a", "input": {"x": 1}}\n{"id": "b", "input": {"x": 1}, '
                        '"deadline": "10m"}\n')  # fmt: skip
    spec = manifests.JobSpec("img:1", ("run",), load_profile("default"), 300.0)
    rows = [json.loads(x) for x in manifests.batch_rows(manifest, spec).lines]
    assert rows[0]["key"] != rows[1]["key"]
    batch_rows = check(manifest, Defaults(image="img:1"), None)
    assert [r["inputDigest"] for r in rows] == [keys.input_digest(r) for r in batch_rows]


def test_rendering_imports_no_scheduler_and_no_host_configuration() -> None:
    """``k8s job`` needs batch's key document, not the batch scheduler or the host
    configuration (pydantic): those are for running a batch, and slow every render."""
    heavy = "{'runner.batch.scheduler', 'runner.config'}"
    code = f"import sys, runner.k8s.manifests; print(sorted({heavy} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "[]"


def test_profile_notes_cover_what_a_pod_cannot_set() -> None:
    notes = manifests.not_enforced(load_profile("default"))
    assert [n.split(" ")[0] for n in notes[:3]] == ["pids", "nofile", "disk_entries"]


# ----- the pod, run as a kubelet would (Docker) -----------------------------------------


FAKE_IMAGE = "flow-runner/fake-component:latest"
"""Python and the fake component only: no flow-runner, no tini."""
HELLO = "flow-runner/examples-hello:latest"
SHELL_HELLO = "flow-runner/examples-shell-hello:latest"
"""A static busybox and a shell script: no Python, no libc (examples/shell-hello)."""


@pytest.fixture(scope="module")
def runner_image(docker_client: Any) -> str:
    """The runner image of this checkout; the component images are built by then."""
    from kubeletkit import build_runner_image

    return build_runner_image()


def _rendered(runner_image: str, *args: str) -> list[dict[str, Any]]:
    """``k8s job|batch ARGS`` with the runner image under test, validated."""
    resources, _ = render(args[0], "--runner-image", runner_image, *args[1:])
    validate(resources)
    return resources


def _pod(resources: list[dict[str, Any]], workdir: Path, **options: Any) -> Any:
    from kubeletkit import start_pod

    return start_pod(resources, workdir, **options)


def _claim(tmp_path: Path) -> Path:
    results = tmp_path / "claim"
    results.mkdir()
    results.chmod(0o777)
    return results


@pytest.mark.docker
def test_pod_runs_and_reports(runner_image: str, tmp_path: Path) -> None:
    from kubeletkit import start_pod

    resources = _rendered(runner_image, "job", FAKE_IMAGE, "--input", '{"hi": 1}', "--results",
                          "pvc:out", "--", "python3", "/fake/fake_component.py",
                          "params")  # fmt: skip
    claim = _claim(tmp_path)
    code, out, err = start_pod(resources, tmp_path, claims={"out": claim}).wait(60)
    assert code == 0, err
    result = sealed(out, err)
    params = result["output"]
    assert params["input"] == {"hi": 1} and params["scratch"] == "/flow/scratch"
    (report,) = claim.glob("*.report.json")
    digest = "sha256:" + hashlib.sha256(report.read_bytes()).hexdigest()
    message = termination_message(tmp_path / "termination-log")
    assert message["class"] == "done" and message["reportDigest"] == digest


@pytest.mark.docker
def test_pod_runs_the_unchanged_hello_image(runner_image: str, tmp_path: Path) -> None:
    """The example image has neither flow-runner nor tini; its command and package come
    from the image (the engine here), the wrapper from the init container."""
    resources = _rendered(runner_image, "job", HELLO, "--input", '{"name": "Ada"}')
    (container,) = resources[1]["spec"]["template"]["spec"]["containers"]
    assert container["args"][-3:] == ["--", "python3", "/flow/package/flow.py"]
    assert container["args"][container["args"].index("--package") + 1] == "/flow/package"
    code, out, err = _pod(resources, tmp_path).wait(60)
    assert code == 0, err
    result = sealed(out, err)
    assert result["outcome"] == "done" and result["output"] == {"greeting": "Hello, Ada!"}
    message = termination_message(tmp_path / "termination-log")
    assert message["class"] == "done" and message["run"] == result["job"]["run"]
    assert message["reportDigest"] == result["job"]["reportDigest"]
    anonymous = tmp_path / "anonymous"
    anonymous.mkdir()
    custom = _rendered(runner_image, "job", HELLO, "--input", "{}")
    code, out, err = _pod(custom, anonymous).wait(60)
    assert code == 3 and sealed(out, err)["outcome"] == "anonymous", err
    assert termination_message(anonymous / "termination-log")["class"] == "outcome"


@pytest.mark.docker
def test_pod_component_gets_the_pods_environment(runner_image: str, tmp_path: Path) -> None:
    """Not the frozen wrapper's: its LD_LIBRARY_PATH would load the bundle's libraries
    into the component's programs."""
    resources = _rendered(runner_image, "job", FAKE_IMAGE, "--", "sh", "-c",
                          "env >&2; exec python3 /fake/fake_component.py echo")  # fmt: skip
    code, out, err = _pod(resources, tmp_path).wait(60)
    assert code == 0, err
    sealed(out, err)
    environment = dict(
        line.split("=", 1) for line in err.decode().splitlines() if "=" in line and line[0] != "{"
    )
    assert "PATH" in environment
    assert not [name for name in environment if name.startswith(("LD_", "_PYI", "_MEI"))]


@pytest.mark.docker
def test_pod_sigterm_cancels_within_the_grace(runner_image: str, tmp_path: Path) -> None:
    from kubeletkit import start_pod

    resources = _rendered(runner_image, "job", FAKE_IMAGE, "--", "python3",
                          "/fake/fake_component.py", "ignore-cancel")  # fmt: skip
    pod = start_pod(resources, tmp_path)
    assert pod.process.stderr is not None
    header = pod.process.stderr.readline()
    assert b"flowRunnerJob" in header
    inspected = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", pod.name],
                               capture_output=True, text=True, check=True)  # fmt: skip
    wait_component_started(int(inspected.stdout))
    started = time.monotonic()
    pod.terminate()
    code, out, err = pod.wait(60)
    assert code == 130, err
    assert time.monotonic() - started < pod.grace  # the wrapper's grace, not the kubelet's kill
    assert sealed(out, header + err)["error"]["code"] == "CANCELLED"
    assert termination_message(tmp_path / "termination-log")["class"] == "cancelled"


@pytest.mark.docker
def test_pod_deadline(runner_image: str, tmp_path: Path) -> None:
    from kubeletkit import start_pod

    resources = _rendered(runner_image, "job", FAKE_IMAGE, "--deadline", "1s", "--", "python3",
                          "/fake/fake_component.py", "ignore-cancel")  # fmt: skip
    code, _out, err = start_pod(resources, tmp_path).wait(60)
    assert code == 124, err
    assert termination_message(tmp_path / "termination-log")["code"] == "DEADLINE_EXCEEDED"


@pytest.mark.docker
def test_pod_unwritable_results_is_retryable(runner_image: str, tmp_path: Path) -> None:
    from kubeletkit import start_pod

    resources = _rendered(runner_image, "job", FAKE_IMAGE, "--results", "pvc:out", "--", "python3",
                          "/fake/fake_component.py", "echo")  # fmt: skip
    claim = tmp_path / "claim"
    claim.mkdir()  # owned by root, mode 755: the pod's uid 65534 cannot write the report
    code, _out, err = start_pod(resources, tmp_path, claims={"out": claim}).wait(60)
    assert code == EXIT_WRAPPER, err
    assert termination_message(tmp_path / "termination-log")["class"] == "wrapper"


@pytest.mark.docker
def test_indexed_rows_and_batch_import(runner_image: str, tmp_path: Path) -> None:
    from kubeletkit import start_pod

    manifest = tmp_path / "cases.jsonl"
    manifest.write_text('{"id": "first", "input": 1}\n{"id": "second", "input": 2}\n')
    resources = _rendered(runner_image, "batch", str(manifest), "--image", FAKE_IMAGE, "--command",
                          "python3 /fake/fake_component.py forge-result")  # fmt: skip
    logs = []
    for index in (1, 0):
        code, out, err = start_pod(resources, tmp_path, index=index).wait(60)
        assert code == 0, err
        row = header_of(err)["row"]
        assert (row["index"], row["id"]) == (index, ["first", "second"][index])
        log = tmp_path / f"pod-{index}.log"
        log.write_bytes(err + out)  # `kubectl logs`: both streams, the result line last
        logs.append(log)
    store = tmp_path / "results.sqlite"
    imported = cli("batch", "import", "--results", str(store), *map(str, logs))
    assert imported.returncode == 0, imported.stderr
    db = sqlite3.connect(store)
    rows = db.execute("SELECT id, manifest, line, status, output, attempts FROM runs "
                      "ORDER BY line").fetchall()  # fmt: skip
    assert rows == [("first", "cases", 1, "succeeded", '{"real":true}', 1),
                    ("second", "cases", 2, "succeeded", '{"real":true}', 1)]  # fmt: skip
    # a pod killed before it answered: its header and no sealed line
    lost = tmp_path / "lost.log"
    lost.write_bytes(logs[0].read_bytes().splitlines(keepends=True)[0])
    again = cli("batch", "import", "--results", str(store), str(lost))
    assert again.returncode == 0, again.stderr
    status = db.execute("SELECT status, error_code, attempts FROM runs WHERE id = 'second'")
    assert status.fetchone() == ("infra-failed", "POD_LOST", 1)
    foreign = tmp_path / "foreign.log"
    foreign.write_text("hello\n")
    refused = cli("batch", "import", "--results", str(store), str(foreign))
    assert refused.returncode == 2 and b"no flow-runner job header" in refused.stderr


@pytest.mark.docker
def test_indexed_rows_of_an_image_without_python_or_libc(runner_image: str, tmp_path: Path) -> None:
    """examples/shell-hello as an Indexed Job: the wrapper brings its own glibc, so an
    image with no libc at all runs; the rows' pod logs go into a store by batch import."""
    manifest = tmp_path / "greetings.jsonl"
    manifest.write_text('{"id": "ada", "input": {"name": "Ada"}}\n{"id": "nobody", "input": {}}\n')
    resources = _rendered(runner_image, "batch", str(manifest), "--image", SHELL_HELLO)
    (container,) = resources[1]["spec"]["template"]["spec"]["containers"]
    assert container["args"][-3:] == ["--", "/bin/sh", "/flow/package/flow.sh"]
    logs, classes = [], []
    for index in (0, 1):
        workdir = tmp_path / f"pod-{index}"
        workdir.mkdir()
        code, out, err = _pod(resources, workdir, index=index).wait(60)
        assert code == (0, 3)[index], err
        assert b"shell-hello: answering the flow/run request" in err
        assert sealed(out, err)["output"]["greeting"].startswith("Hello, ")
        classes.append(termination_message(workdir / "termination-log")["class"])
        log = tmp_path / f"pod-{index}.log"
        log.write_bytes(err + out)
        logs.append(log)
    assert classes == ["done", "outcome"]
    store = tmp_path / "results.sqlite"
    imported = cli("batch", "import", "--results", str(store), *map(str, logs))
    assert imported.returncode == 0, imported.stderr
    rows = (
        sqlite3.connect(store)
        .execute("SELECT id, status, outcome, output FROM runs ORDER BY line")
        .fetchall()
    )
    assert rows == [
        ("ada", "succeeded", "done", '{"greeting":"Hello, Ada!"}'),
        ("nobody", "succeeded", "anonymous", '{"greeting":"Hello, whoever you are!"}'),
    ]
