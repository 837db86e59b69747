"""Benchmark: one invocation in a container, flow-runner against plain ``docker run``.

Side by side in one process run, interleaved round by round, the same image and the same
``flow/run`` frame:

- (a)  ``docker run --rm -i --network none IMAGE``, fed the frame on stdin; stdin stays
  open until the response line arrives, then is closed (a subprocess);
- (a') the same with the security options of the sandbox profile (read-only root, all
  capabilities dropped, no-new-privileges, the unprivileged user, memory/CPU/pids/nofile
  limits, init, tmpfs /tmp and /flow/scratch, no log driver): the fair baseline;
- (b)  the Python API, ``runner.api.execute`` with ``DockerSandbox`` and the profile, in
  this process (after one warm-up run, as a long-lived API user would have it);
- (b') the same API call in a fresh Python process (interpreter, imports, one run);
- (c)  the ``flow-runner exec`` CLI as a subprocess (``--report`` for its time split), in
  its own process (``FLOW_RUNNER_WARM=0``): the same command line each round, so each run
  claims the container its start-up asked for ahead (``runner/cli/head_start.py``);
- (c0) the same with nothing started ahead (``FLOW_RUNNER_HEAD_START=0``): a command line
  run for the first time;
- (c') the same command with a warm runner (``flow-runner daemon start --pool 0``) serving
  it: the console script as pip writes it for ``runner.launch:main``, and a server started
  by it before the rounds (its start time and memory are reported) and stopped by its pid
  after;
- (p)  the same with a warm runner that keeps a container waiting (``--pool 1``), one ready
  when the command starts: the run claims it instead of creating and starting one (each
  run is checked to have been pooled; the replacement is waited for, untimed, after it);
- (d)  the runner image: ``docker run --rm -v SOCKET flow-runner:latest exec IMAGE``, the
  run's container a sibling of the runner's (``--report`` into a mounted directory);
- (e)  the runner container's own start cost: ``docker run --rm flow-runner:latest
  --version`` (tini, the entrypoint's group and user switch, the interpreter, the CLI).

Reported: the median wall time of each with its minimum and quartiles, its ratio to (a) and
(a') (the median of the per-round ratios), the median of each phase timing (:data:`SPLIT`,
:data:`MARKS`) from the run reports of every flow-runner variant, and where the CLI spends
the time outside the run: one more CLI run per round, with timestamps taken around the
imports, the sweep and ``execute`` (``--phases 0`` skips it). With (p): the idle memory of a
pool (the server's RSS, and each waiting container's memory and its engine shim's RSS) for
``--pool 1`` and ``--pool 4`` (``--pool-memory ''`` skips it).

    .venv/bin/python bench/exec_overhead.py [--runs 9] [--image IMAGE] [--profile NAME]
                                            [--runner-image flow-runner:latest] [--phases 1]
                                            [--base DIR] [--cases a,a',b,b',c,c0,c',p,d,e]
                                            [--pool-memory 1,4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
from rawrun import docker_run

from runner.api import Invocation, execute
from runner.sandbox.docker.container import SCRATCH_PATH
from runner.sandbox.docker.sandbox import DockerSandbox
from runner.sandbox.profiles import SandboxProfile, load_profile
from runner.sandbox.registry import StopGraces

ROOT = Path(__file__).resolve().parents[1]
PYTHON = Path(sys.executable)
CLI = ROOT / ".venv" / "bin" / "flow-runner"
INPUT = {"name": "Ada"}
SPLIT = ("create", "attach", "start", "claim", "run", "cleanup")
"""The phases a run's wall time is made of (a pooled run: ``claim`` for the first three)."""
MARKS = ("pool_wait", "first_byte", "response", "exit")
"""Phase timings that are not parts of the wall time: the time a pooled container waited before
its claim, and when the first byte, the response and the exit came after ``flow/run`` was sent."""
Timed = tuple[float, dict[str, float]]

# The CLI with timestamps (wall clock, so the parent can add its own) around its phases.
# It imports what ``exec`` imports, then wraps the sweep and ``execute``, which the CLI
# imports inside its functions and so picks up wrapped.
PHASES = r"""
import json, os, sys, time
marks = {"begin": time.time()}
import runner.cli.app, runner.api, runner.sandbox.gc, runner.sandbox.docker.sandbox
marks["imported"] = time.time()
sweep, execute = runner.sandbox.gc.sweep, runner.api.execute
def timed_sweep(*args, **kwargs):
    marks["sweep"] = time.time()
    try:
        return sweep(*args, **kwargs)
    finally:
        marks["swept"] = time.time()
async def timed_execute(*args, **kwargs):
    marks["execute"] = time.time()
    try:
        return await execute(*args, **kwargs)
    finally:
        marks["executed"] = time.time()
runner.sandbox.gc.sweep, runner.api.execute = timed_sweep, timed_execute
exit_now = os._exit
def save_then_exit(code):  # the CLI ends with os._exit once its output is flushed
    marks["exit"] = time.time()
    with open(os.environ["PHASES_FILE"], "w") as f:
        json.dump(marks, f)
    exit_now(code)
os._exit = save_then_exit
sys.argv = ["flow-runner", *sys.argv[1:]]
runner.cli.app.main()
"""
PHASE_NAMES = {
    "interpreter start": ("spawned", "begin"),
    "imports (typer, pydantic, docker-py, anyio, runner)": ("begin", "imported"),
    "CLI parsing and checks, up to the sweep": ("imported", "sweep"),
    "gc sweep (client, version, list)": ("sweep", "swept"),
    "profile, invocation, event loop, up to execute": ("swept", "execute"),
    "execute (the run itself)": ("execute", "executed"),
    "print, write the report": ("executed", "exit"),
    "process exit (os._exit after flushing)": ("exit", "ended"),
}


def secure_flags(profile: SandboxProfile) -> list[str]:
    """``docker run`` options equivalent to what DockerSandbox asks the engine for."""
    flags = [
        "--network", profile.network,
        "--user", profile.user,
        "--memory", str(profile.memory), "--memory-swap", str(profile.memory),
        "--cpus", str(profile.cpus),
        "--pids-limit", str(profile.pids),
        "--ulimit", f"nofile={profile.nofile}:{profile.nofile}",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,size={profile.tmp_size},mode=1777",
        "--tmpfs", f"{SCRATCH_PATH}:rw,nosuid,nodev,size={profile.scratch_size},mode=1777",
        "--log-driver", "none",
        "--runtime", profile.runtime,
    ]  # fmt: skip
    if profile.read_only_root:
        flags.append("--read-only")
    flags += [f"--cap-drop={cap}" for cap in profile.cap_drop]
    flags += [f"--cap-add={cap}" for cap in profile.cap_add]
    if profile.no_new_privileges:
        flags += ["--security-opt", "no-new-privileges"]
    if profile.init:
        flags.append("--init")
    return flags


def raw_run(image: str, flags: list[str]) -> Timed:
    """(a)/(a'): one ``docker run --rm -i``, stdin open until the response line."""
    return docker_run(image, INPUT, flags), {}


def api_run(image: str, profile_name: str) -> Timed:
    """(b): ``runner.api.execute`` in this process, event loop included."""
    profile = load_profile(profile_name)

    async def main() -> dict[str, float]:
        execution = await execute(
            DockerSandbox(image, profile),
            Invocation.within(300, input=INPUT),
            target=image,
            graces=StopGraces(profile.cancel_grace, profile.exit_grace),
        )
        if execution.verdict.result is None:
            raise RuntimeError(f"API run failed: {execution.report}")
        return execution.report.timings

    started = time.perf_counter()
    timings = anyio.run(main)
    return time.perf_counter() - started, timings


class ApiServer:
    """(b base): a process running another tree's code that makes one API run per request
    (a line on its stdin) and answers with its wall time and timings (a line)."""

    def __init__(self, tree: Path, image: str, profile: str) -> None:
        self.process = subprocess.Popen(
            [str(PYTHON), __file__, "--api-serve", "--image", image, "--profile", profile],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(tree)},
            text=True,
        )

    def run(self) -> Timed:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        wall, timings = json.loads(self.process.stdout.readline())
        return wall, timings

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def serve_api(image: str, profile: str) -> None:
    """The loop of :class:`ApiServer`, in the process it starts."""
    for _ in sys.stdin:
        print(json.dumps(api_run(image, profile)), flush=True)


def api_process_run(image: str, profile: str) -> Timed:
    """(b'): the API in a fresh process: this script with ``--api-once``."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(PYTHON), __file__, "--api-once", "--image", image, "--profile", profile],
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - started, json.loads(done.stdout)


def cli_run(
    image: str, profile: str, report: Path, warm: Warm | None = None, ahead: bool = True
) -> Timed:
    """(c): ``flow-runner exec`` as a subprocess, in its own process (``ahead``: with its
    head start); (c') handed to ``warm``."""
    script, env = (CLI, {**os.environ, "FLOW_RUNNER_WARM": "0"}) if warm is None else warm.use
    env = env if ahead else {**env, "FLOW_RUNNER_HEAD_START": "0"}
    command = [str(script), "exec", "--input", json.dumps(INPUT), "--profile", profile,
               "--report", str(report), image]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"flow-runner exec failed: {done.returncode} {done.stderr!r}")
    written = json.loads(report.read_text())
    if warm is not None and written["pooled"] != (warm.pool > 0):
        raise RuntimeError(f"a run of the warm runner with --pool {warm.pool}: {written!r}")
    timings: dict[str, float] = written["timings"]
    return elapsed, timings


def pooled_run(image: str, profile: str, report: Path, warm: Warm) -> Timed:
    """(p): with a container waiting; its replacement waited for after, untimed, so that
    its preparation runs during no other variant's measurement."""
    warm.wait_pool(1)
    timed = cli_run(image, profile, report, warm)
    warm.wait_pool(1)
    return timed


@dataclass
class Warm:
    """A warm runner serving (c'): its console script and environment, what it cost."""

    use: tuple[Path, dict[str, str]]
    pid: int
    start_seconds: float
    pool: int

    def waiting(self) -> list[str]:
        """The ids of the pool's containers (the server's own label), running."""
        label = f"flow-runner.owner={socket.gethostname()}:{self.pid}"
        command = ["docker", "ps", "-q", "--no-trunc", "--filter", f"label={label}",
                   "--filter", "status=running"]  # fmt: skip
        return subprocess.run(command, capture_output=True, check=True, text=True).stdout.split()

    def wait_pool(self, count: int, timeout: float = 60.0) -> None:
        """Return once ``count`` containers wait, handed to the server (``daemon status``)."""
        script, env = self.use
        deadline = time.monotonic() + timeout
        while True:
            said = subprocess.run([str(script), "daemon", "status"], env=env, capture_output=True)
            if f"pool:       {count} ".encode() in said.stdout:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"not {count} pooled containers after {timeout} s: {said!r}")
            time.sleep(0.02)

    def pool_memory_mib(self) -> tuple[float, float, float]:
        """The waiting containers' memory (cgroup), their shims' RSS, and the server's."""
        ids = self.waiting()
        stats = subprocess.run(
            ["docker", "stats", "--no-stream", "--format", "{{.ID}} {{.MemUsage}}", *ids],
            capture_output=True, check=True, text=True,
        ).stdout.split("\n")  # fmt: skip
        containers = sum(_mib(line.split()[1]) for line in stats if line.strip())
        shims = 0.0
        for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"-id" in argv and argv[argv.index(b"-id") + 1].decode() in ids:
                    shims += _rss_mib(int(pid))
            except (OSError, IndexError):
                continue
        return containers, shims, self.rss_mib()

    def connections(self) -> int:
        """Connections the server accepted so far (this question's own included)."""
        script, env = self.use
        said = subprocess.run([str(script), "daemon", "status"], env=env, capture_output=True)
        if b"commands go to it" not in said.stdout:
            raise RuntimeError(f"(c') would not go to the warm runner: {said.stdout!r}")
        return int(said.stdout.split(b"served:")[1].split()[0]) + 1

    def rss_mib(self) -> float:
        """The server's resident memory (its runs are other processes)."""
        return _rss_mib(self.pid)


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def _mib(usage: str) -> float:
    """``docker stats``' ``12.3MiB`` (or KiB, GiB) in MiB."""
    for unit, scale in (("KiB", 1 / 1024), ("MiB", 1.0), ("GiB", 1024.0), ("B", 1 / 1024**2)):
        if usage.endswith(unit):
            return float(usage[: -len(unit)]) * scale
    raise ValueError(usage)


@contextmanager
def warm_runner(scratch: Path, pool: int = 0) -> Iterator[Warm]:
    """Start ``flow-runner daemon start --foreground --pool POOL`` and wait for its ready
    line; stop it by its pid at the end. Its socket directory is the benchmark's own."""
    home = Path(tempfile.mkdtemp(prefix=f"warm-{pool}-", dir=scratch))
    bin_dir, runtime = home / "bin", home / "run"
    bin_dir.mkdir()
    runtime.mkdir(mode=0o700)
    script = bin_dir / "flow-runner"  # what pip writes for `runner.launch:main`
    script.write_text(
        f"#!{PYTHON}\nimport sys\nfrom runner.launch import main\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    script.chmod(0o755)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    env.pop("FLOW_RUNNER_WARM", None)
    started = time.perf_counter()
    server = subprocess.Popen(
        [str(script), "daemon", "start", "--foreground", "--idle", "1h", "--pool", str(pool)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        ready = server.stderr.readline().decode()
        if "warm runner ready" not in ready:
            raise RuntimeError(f"the warm runner did not start: {ready}{server.stderr.read()!r}")
        yield Warm((script, env), server.pid, time.perf_counter() - started, pool)
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(30)


def runner_image_run(runner_image: str, image: str, profile: str, reports: Path) -> Timed:
    """(d): ``flow-runner exec`` in the runner image, driving this engine through its socket."""
    command = ["docker", "run", "--rm", "--network", "none",
               "-v", "/var/run/docker.sock:/var/run/docker.sock", "-v", f"{reports}:/reports",
               runner_image, "exec", "--input", json.dumps(INPUT), "--profile", profile,
               "--report", "/reports/r.json", image]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the runner image's exec failed: {done.returncode} {done.stderr!r}")
    timings: dict[str, float] = json.loads((reports / "r.json").read_text())["timings"]
    return elapsed, timings


def runner_start(runner_image: str) -> Timed:
    """(e): the runner container started and gone, running nothing but ``--version``."""
    command = ["docker", "run", "--rm", "--network", "none", runner_image, "--version"]
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True)
    return time.perf_counter() - started, {}


def cli_phases(image: str, profile: str, marks_file: Path) -> dict[str, float]:
    """The CLI once more, instrumented: seconds spent in each of PHASE_NAMES."""
    command = [str(PYTHON), "-c", PHASES, "exec", "--input", json.dumps(INPUT),
               "--profile", profile, image]  # fmt: skip
    spawned = time.time()
    subprocess.run(
        command, capture_output=True, check=True, env={**os.environ, "PHASES_FILE": str(marks_file)}
    )
    marks = {**json.loads(marks_file.read_text()), "spawned": spawned, "ended": time.time()}
    return {name: marks[end] - marks[begin] for name, (begin, end) in PHASE_NAMES.items()}


def wanted_keys(every: dict[str, object], wanted: set[str]) -> list[str]:
    return [key for key in every if key in wanted]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def paired(values: list[float], baseline: list[float]) -> float:
    """The median of the per-round ratios ``values[i] / baseline[i]``."""
    return statistics.median(v / b for v, b in zip(values, baseline, strict=True))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="rounds")
    parser.add_argument("--phases", type=int, default=1, help="instrumented CLI runs per round")
    parser.add_argument("--image", default="flow-runner/fake-component:latest")
    parser.add_argument("--profile", default="default")
    parser.add_argument(
        "--runner-image", default="flow-runner:latest", help="for (d) and (e); '' skips them"
    )
    parser.add_argument("--base", type=Path, default=None, help="the tree of (b base)")
    parser.add_argument("--cases", default="a,a',b,b',c,c0,c',p,d,e", help="the variants to run")
    parser.add_argument(
        "--pool-memory", default="1,4", help="pool sizes whose idle memory to measure ('' none)"
    )
    parser.add_argument("--api-once", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--api-serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.api_once:
        print(json.dumps(api_run(args.image, args.profile)[1]))
        return
    if args.api_serve:
        serve_api(args.image, args.profile)
        return
    flags = secure_flags(load_profile(args.profile))
    scratch = Path(tempfile.mkdtemp())
    reports = scratch / "runner-image"
    reports.mkdir()
    os.chown(reports, 10001, 10001)  # the runner image's user writes its report there
    image, profile = args.image, args.profile
    wanted = set(args.cases.split(","))
    with contextlib.ExitStack() as servers:  # a warm runner only for the cases that use one
        warm = servers.enter_context(warm_runner(scratch)) if "c'" in wanted else None
        pooled = servers.enter_context(warm_runner(scratch, 1)) if "p" in wanted else None
        measure(args, flags, scratch, reports, image, profile, warm, pooled)
    sizes = [int(size) for size in args.pool_memory.split(",") if size]
    if sizes and "p" in args.cases.split(","):
        print("\n| idle pool, one configuration | containers' memory MiB | their shims' RSS MiB "
              "| server RSS MiB | total MiB |")  # fmt: skip
        print("|---|---:|---:|---:|---:|")
        for size in sizes:
            with warm_runner(scratch, size) as sized:
                cli_run(image, profile, scratch / f"m{size}.json", replace(sized, pool=0))
                sized.wait_pool(size)
                memory = sized.pool_memory_mib()
                cells = " | ".join(f"{value:.1f}" for value in (*memory, sum(memory)))
                print(f"| --pool {size} | {cells} |")


def measure(
    args: argparse.Namespace,
    flags: list[str],
    scratch: Path,
    reports: Path,
    image: str,
    profile: str,
    warm: Warm | None,
    pooled: Warm | None,
) -> None:
    idle_rss = warm.rss_mib() if warm is not None else 0.0
    connected = warm.connections() if warm is not None else 0
    server = ApiServer(args.base, image, profile) if args.base is not None else None
    base_label = f"(b) base tree {args.base}, in process"
    every: dict[str, tuple[str, Callable[[], Timed]]] = {
        "a": ("(a) `docker run --rm -i --network none`",
              lambda: raw_run(image, ["--network", "none"])),
        "a'": ("(a') `docker run`, the profile's security options",
               lambda: raw_run(image, flags)),
        "b": ("(b) `runner.api.execute`, in process", lambda: api_run(image, profile)),
        "b base": (base_label, lambda: server.run() if server else (0.0, {})),
        "b'": ("(b') `runner.api.execute`, fresh process",
               lambda: api_process_run(image, profile)),
        "c": ("(c) `flow-runner exec`, subprocess",
              lambda: cli_run(image, profile, scratch / "r.json")),
        "c0": ("(c0) `flow-runner exec`, subprocess, nothing started ahead",
               lambda: cli_run(image, profile, scratch / "r0.json", ahead=False)),
        "c'": ("(c') `flow-runner exec`, warm runner",
               lambda: cli_run(image, profile, scratch / "w.json", warm)),
        "p": ("(p) `flow-runner exec`, warm runner, a pooled container ready",
               lambda: pooled_run(image, profile, scratch / "p.json", pooled)),
        "d": ("(d) `docker run flow-runner:latest exec`",
              lambda: runner_image_run(args.runner_image, image, profile, reports)),
        "e": ("(e) `docker run flow-runner:latest --version`",
              lambda: runner_start(args.runner_image)),
    }  # fmt: skip
    wanted = set(args.cases.split(",")) | {"a", "a'"} | ({"b base"} if server else set())
    if not args.runner_image:
        wanted -= {"d", "e"}
    cases = {label: run for key, (label, run) in every.items() if key in wanted}
    walls: dict[str, list[float]] = {name: [] for name in cases}
    splits: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    phases: list[dict[str, float]] = []
    for key, run in zip(wanted_keys(every, wanted), cases.values(), strict=True):
        if key == "p":  # its warm-up is fresh: it makes the configuration's first container
            assert pooled is not None
            cli_run(image, profile, scratch / "p.json", replace(pooled, pool=0))
        else:  # image and page caches, the in-process client
            run()
    for _ in range(args.runs):
        for name, run in cases.items():
            wall, timings = run()
            walls[name].append(wall)
            splits[name].append(timings)
        if "c" in wanted:
            phases += [cli_phases(image, profile, scratch / "m.json") for _ in range(args.phases)]

    if server is not None:
        server.close()
    if warm is not None:  # every (c') run and its warm-up went warm
        handed = warm.connections() - connected - 1
        if handed != args.runs + 1:
            raise RuntimeError(f"{handed} of {args.runs + 1} (c') runs went to the warm runner")
    names = list(cases)
    a, a_secure = walls[names[0]], walls[names[1]]
    print(f"image {image}, profile {profile}, {args.runs} rounds\n")
    print("| variant | median ms | min ms | q1 – q3 ms | ÷ (a) | ÷ (a') |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        q1, median, q3 = quartiles(walls[name])
        print(f"| {name} | {ms(median)} | {ms(min(walls[name]))} | {ms(q1)} – {ms(q3)} | "
              f"{paired(walls[name], a):.2f} | {paired(walls[name], a_secure):.2f} |")  # fmt: skip
    print("\n÷: the median of the per-round ratios (rounds are interleaved, so a ratio compares")
    print("runs made moments apart, which a machine shared with other jobs needs).")
    if warm is not None:
        print(f"\nwarm runner: ready {ms(warm.start_seconds)} ms after `daemon start "
              f"--foreground`; server RSS {idle_rss:.0f} MiB before the rounds, "
              f"{warm.rss_mib():.0f} MiB after; {sys.version.split()[0]}")  # fmt: skip

    keys = (*SPLIT, *MARKS)
    print("\n| time split, median ms | " + " | ".join(keys) + " | outside the split |")
    print("|---|" + "---:|" * (len(keys) + 1))
    for name in [name for name in names if any(splits[name])]:
        cells = [
            f"{statistics.median(v) * 1000:.1f}" if (v := [t[k] for t in splits[name] if k in t])
            else ""
            for k in keys
        ]  # fmt: skip
        outside = [w - sum(t.get(k, 0.0) for k in SPLIT) for w, t in
                   zip(walls[name], splits[name], strict=True)]  # fmt: skip
        print(f"| {name} | " + " | ".join(cells) + f" | {ms(statistics.median(outside))} |")

    if phases and "c" in wanted:
        print(f"\n| where (c) spends its time, median of {len(phases)} instrumented runs | ms |")
        print("|---|---:|")
        for phase in PHASE_NAMES:
            print(f"| {phase} | {ms(statistics.median(p[phase] for p in phases))} |")
        total = statistics.median(sum(p.values()) for p in phases)
        print(f"| total | {ms(total)} |")


if __name__ == "__main__":
    main()
