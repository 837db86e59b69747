"""The warm runner (``flow-runner daemon``): same results as a command run in process, safely.

Every command goes through a console script made for the test (``bin/flow-runner``,
``runner.launch:main`` as pip writes it), which also notes whether the command went to
the warm runner or ran in process: a test comparing the two knows it compared them. The
warm runner serves from a socket directory of the test's own (``XDG_RUNTIME_DIR``), and
is stopped by its pid at the end of every test that starts one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from execkit import fake, of_runner, profile_file
from runner.warm import envwatch, rundir, server, wire
from runner.warm.client import ANSWER, connect
from runner.warm.key import installation_key

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # one that uid 65534 may run: the venv's may be in /root
# The console script pip writes for `flow-runner = "runner.launch:main"`, noting first
# whether the command went to the warm runner (WARM_MARK names the file).
SCRIPT = f"""#!{sys.executable}
import os
import sys

import runner.warm.client as client

real = client.hand_off


def noted():
    status = real()
    with open(os.environ["WARM_MARK"], "w") as mark:
        mark.write("cold" if status is None else "warm")
    return status


client.hand_off = noted
from runner.launch import main

if __name__ == "__main__":
    sys.exit(main())
"""
PROBE = """
import json, os, sys
root = json.loads(sys.stdin.readline())
mask = os.umask(0)
os.umask(mask)
output = {"cwd": os.getcwd(), "umask": mask, "value": os.environ.get("WARM_VALUE"),
          "input": root["params"]["input"]}
result = {"outcome": "done", "output": output}
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": root["id"], "result": result}) + "\\n")
"""


@dataclass
class Ran:
    returncode: int
    stdout: bytes
    stderr: bytes
    where: str  # "warm" or "cold"


@dataclass
class Install:
    """A console script and the environment its commands run in."""

    script: Path
    env: dict[str, str]
    marks: Path

    def run(
        self,
        *args: str | Path,
        env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
        stdin: bytes = b"",
        **popen: Any,
    ) -> Ran:
        process = self.start(*args, env=env, cwd=cwd, stdin=subprocess.PIPE, **popen)
        out, err = process.communicate(stdin, timeout=120)
        return Ran(process.returncode, out, err, self.where(process))

    def start(
        self,
        *args: str | Path,
        env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
        **popen: Any,
    ) -> subprocess.Popen[bytes]:
        environment = {**self.env, **(env or {})}
        fd, mark = tempfile.mkstemp(dir=self.marks)
        os.close(fd)
        environment["WARM_MARK"] = mark
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
        process = subprocess.Popen(
            [str(self.script), *map(str, args)], cwd=cwd, env=environment, **popen
        )
        process.mark = mark  # type: ignore[attr-defined]
        return process

    @staticmethod
    def where(process: subprocess.Popen[bytes]) -> str:
        return Path(process.mark).read_text()  # type: ignore[attr-defined]

    def cold(self, *args: str | Path, **kwargs: Any) -> Ran:
        env = {**kwargs.pop("env", {}), "FLOW_RUNNER_WARM": "0"}
        return self.run(*args, env=env, **kwargs)


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    ready: str

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def socket(self) -> Path:
        return Path(self.ready.split("socket ")[1].split(",")[0])


def installed(tmp_path: Path, code: Path) -> Iterator[Install]:
    """A console script running ``code``'s runner/, in a socket directory of its own."""
    # A short directory: a unix socket's path has 107 bytes at most.
    runtime = Path(tempfile.mkdtemp(prefix="fr-warm-", dir="/tmp"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "flow-runner"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(code)}
    env.pop("FLOW_RUNNER_WARM", None)
    yield Install(script, env, marks)
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def install(tmp_path: Path) -> Iterator[Install]:
    yield from installed(tmp_path, ROOT)


def start_server(install: Install, *options: str) -> Server:
    process = subprocess.Popen(
        [str(install.script), "daemon", "start", "--foreground", *options],
        cwd=ROOT,
        env={**install.env, "WARM_MARK": os.devnull},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    ready = process.stderr.readline().decode()
    assert ready.startswith(server.READY), (ready, process.stderr.read()[-2000:])
    return Server(process, ready)


def stop(found: Server) -> None:
    if found.process.poll() is None:
        os.kill(found.pid, signal.SIGTERM)
    try:
        found.process.wait(30)
    except subprocess.TimeoutExpired:
        os.kill(found.pid, signal.SIGKILL)
        found.process.wait()
        raise AssertionError("the warm runner did not stop on SIGTERM") from None


@pytest.fixture
def warm(install: Install) -> Iterator[Server]:
    """A warm runner without a pool (tests/test_pool.py has the pool's): a replacement
    container prepared after a run would otherwise wait on the engine until the server
    stops, which may come after a test's own check that its runs left nothing."""
    found = start_server(install, "--idle", "10m", "--pool", "0")
    try:
        yield found
    finally:
        stop(found)


def descendants(pid: int) -> list[int]:
    """The children of ``pid``, theirs, and so on."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    found = []
    for child in map(int, text.split()):
        found += [child, *descendants(child)]
    return found


def wait_running(engine: Any, under: int, runner: subprocess.Popen[bytes]) -> int:
    """The pid, below ``under``, of the run whose container the engine reports running."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert runner.poll() is None, runner.communicate()
        for pid in descendants(under):
            if engine.containers.list(filters={"label": of_runner(pid), "status": "running"}):
                return pid
        time.sleep(0.05)
    raise AssertionError("no running container for a run of the warm runner")


def ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie has: an init that does not reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def gone(pid: int) -> None:
    """Return once process ``pid`` (not ours to wait for) has exited."""
    deadline = time.monotonic() + 30
    while not ended(pid):
        assert time.monotonic() < deadline, f"process {pid} is still running"
        time.sleep(0.05)


# ----- the same command, warm and cold: the same bytes, the same status ----------------


def same(install: Install, *args: str | Path, **kwargs: Any) -> Ran:
    cold = install.cold(*args, **kwargs)
    warm = install.run(*args, **kwargs)
    assert (cold.where, warm.where) == ("cold", "warm"), warm.stderr
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )
    return warm


@pytest.mark.docker
def test_a_successful_exec_is_the_same_warm(warm: Server, install: Install, engine: Any) -> None:
    ran = same(install, "exec", "--input", '{"name": "Ada"}', *fake("echo"))
    assert ran.returncode == 0
    assert json.loads(ran.stdout) == {"outcome": "done", "output": {"name": "Ada"}}


def test_a_usage_error_is_the_same_warm(warm: Server, install: Install) -> None:
    ran = same(install, "exec", "--no-such-option")
    assert ran.returncode == 2
    assert b"No such option" in ran.stderr
    assert b"Usage: flow-runner exec" in ran.stderr


@pytest.mark.docker
def test_input_from_stdin_is_the_same_warm(warm: Server, install: Install, engine: Any) -> None:
    ran = same(install, "exec", "--input", "-", *fake("echo"), stdin=b'{"from": "stdin"}')
    assert json.loads(ran.stdout)["output"] == {"from": "stdin"}


@pytest.mark.docker
def test_a_failing_run_is_the_same_warm(warm: Server, install: Install, engine: Any) -> None:
    ran = same(install, "exec", *fake("exit7-after-response"))
    assert ran.returncode == 4
    assert b"flow-runner: run failed: EXECUTION_FAILED" in ran.stderr


def test_the_run_has_the_commands_process(warm: Server, install: Install, tmp_path: Path) -> None:
    """Working directory, umask, environment and an inherited descriptor, by number."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    here = tmp_path / "here"
    here.mkdir()
    given = tmp_path / "input.json"
    given.write_text('{"via": "an inherited descriptor"}')
    with given.open("rb") as inherited:
        fd = inherited.fileno()
        args = ("exec", "--input", f"@/dev/fd/{fd}", "--process", "--", sys.executable, probe)
        extra = {"pass_fds": (fd,), "umask": 0o027, "env": {"WARM_VALUE": "x"}, "cwd": here}
        ran = same(install, *args, **extra)
    assert json.loads(ran.stdout)["output"] == {
        "cwd": str(here),
        "umask": 0o027,
        "value": "x",
        "input": {"via": "an inherited descriptor"},
    }


def test_version_and_help_are_the_same_warm(warm: Server, install: Install) -> None:
    assert same(install, "--version").stdout.startswith(b"flow-runner ")
    assert b"daemon" in same(install, "--help").stdout


# ----- refusals: the command then runs in its own process -------------------------------


def test_a_variable_the_imports_read_differing_runs_in_process(
    warm: Server, install: Install
) -> None:
    read = install.run("daemon", "status")
    assert b"commands go to it" in read.stdout, read
    env = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}  # pydantic reads it when a model is built
    status = install.run("daemon", "status", env=env)
    assert b"refused: not the same PYDANTIC_DISABLE_PLUGINS" in status.stdout, status
    assert install.run("--version", env=env).where == "cold"


def test_another_nice_value_runs_in_process(warm: Server, install: Install) -> None:
    ran = install.run("--version", preexec_fn=lambda: os.nice(3))
    assert (ran.where, ran.returncode) == ("cold", 0)


def test_an_edited_installation_never_reaches_the_old_server(
    install: Install, tmp_path: Path
) -> None:
    """A server holds the code it imported: a changed file changes the socket's name."""
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "runner", copy / "runner", ignore=shutil.ignore_patterns("__pycache__"))
    install.env["PYTHONPATH"] = str(copy)
    found = start_server(install, "--idle", "10m")
    try:
        assert install.run("--version").where == "warm"
        edited = copy / "runner" / "cli" / "app.py"
        os.utime(edited, ns=(edited.stat().st_atime_ns, edited.stat().st_mtime_ns + 10**9))
        ran = install.run("--version")
        assert (ran.where, ran.returncode) == ("cold", 0)
        assert install.run("daemon", "status").returncode == 1
        assert found.process.poll() is None  # still serving the old key, to nobody
    finally:
        stop(found)


@pytest.mark.timeout(60)
def test_the_key_follows_what_imports_find_not_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report written into a ``sys.path`` directory (the working directory, an editable
    install's checkout) keeps the key; a module or a package added there changes it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = installation_key()
    (tmp_path / "report.json").write_text("{}")
    (tmp_path / ".pytest_cache").mkdir()
    assert installation_key() == before
    (tmp_path / "shadow.py").write_text("")
    with_module = installation_key()
    assert with_module != before
    (tmp_path / "pkg").mkdir()
    assert installation_key() not in (before, with_module)


def test_an_unsafe_directory_is_never_used(warm: Server, install: Install) -> None:
    directory = warm.socket.parent
    assert install.run("--version").where == "warm"
    for mode in (0o750, 0o701, 0o722):
        directory.chmod(mode)
        try:
            assert install.run("--version").where == "cold"
            assert (
                rundir.unsafe(str(directory)) == f"has mode {mode:04o}: group or others may use it"
            )
        finally:
            directory.chmod(0o700)
    assert install.run("--version").where == "warm"


def test_unsafe_directories_are_named_and_refused(tmp_path: Path) -> None:
    safe = tmp_path / "safe"
    safe.mkdir(0o700)
    assert rundir.unsafe(str(safe)) is None
    link = tmp_path / "link"
    link.symlink_to(safe)
    assert rundir.unsafe(str(link)) == "is a symbolic link"
    theirs = tmp_path / "theirs"
    theirs.mkdir(0o700)
    os.chown(theirs, NOBODY, NOBODY)
    assert rundir.unsafe(str(theirs)) == f"is owned by uid {NOBODY}, not by {os.getuid()}"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, not sticky: our directory could be replaced
    inside = shared / "flow-runner"
    inside.mkdir(0o700)
    assert rundir.unsafe(str(inside)) == "is in a directory others may write without the sticky bit"
    shared.chmod(0o1777)
    assert rundir.unsafe(str(inside)) is None
    with pytest.raises(rundir.UnsafeDirectory, match="is a symbolic link"):
        rundir.ensure(str(link))


def test_start_refuses_an_unsafe_directory(install: Install) -> None:
    runtime = Path(install.env["XDG_RUNTIME_DIR"])
    (runtime / "flow-runner").mkdir(0o755)
    (runtime / "flow-runner").chmod(0o755)
    started = install.run("daemon", "start", "--foreground")
    assert started.returncode == 2
    assert b"has mode 0755: group or others may use it; remove it" in started.stderr


def test_a_malformed_request_is_refused_and_the_server_serves_on(
    warm: Server, install: Install
) -> None:
    key = warm.socket.stem

    def ask(message: dict[str, Any] | bytes) -> dict[str, Any] | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with sock:
            sock.connect(str(warm.socket))
            if isinstance(message, bytes):
                sock.sendall(len(message).to_bytes(4, "big") + message)
            else:
                wire.send(sock, message)
            try:
                return wire.receive(sock)[0]
            except wire.WireError:
                return None

    assert ask({"op": "run", "key": "0" * 24}) == {"refused": "another installation's request"}
    refused = ask({"op": "run", "key": key, "context": []})
    assert refused is not None and refused["refused"].startswith("a malformed request")
    unknown = ask({"op": "dance", "key": key, "context": {}, "env": {}})
    assert unknown is not None and unknown["refused"].startswith("not the same")
    assert ask(b"\xfb not a message") is None  # the handler hangs up (no such type code)
    assert ask(b"N") is None  # nor None, which is not a dict
    assert install.run("--version").where == "warm"


# ----- other users ----------------------------------------------------------------------


def _as_nobody(code: str, *args: str) -> subprocess.Popen[str]:
    """Python ``code`` run as uid/gid 65534 with no groups; it says "ready" when it is."""
    process = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         SYSTEM_PYTHON, "-c", code, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    return process


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory uid 65534 can reach and write (``tmp_path`` is root's alone)."""
    found = Path(tempfile.mkdtemp(prefix="fr-open-", dir="/tmp"))
    found.chmod(0o777)
    yield found
    shutil.rmtree(found, ignore_errors=True)


def test_the_server_refuses_a_peer_of_another_uid(open_dir: Path) -> None:
    """The kernel's word (SO_PEERCRED) on a real connection from uid 65534."""
    path = open_dir / "s"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener:
        listener.bind(str(path))
        path.chmod(0o777)
        listener.listen()
        connecting = (
            "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
            "print('ready', flush=True); sys.stdin.read()"
        )
        nobody = _as_nobody(connecting, str(path))
        try:
            theirs, _ = listener.accept()
            with theirs:
                assert not server.trusted(theirs)
        finally:
            nobody.communicate("")
        ours = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            ours.connect(str(path))
            mine, _ = listener.accept()
            with mine:
                assert server.trusted(mine)


def test_the_client_refuses_a_server_of_another_uid(install: Install, open_dir: Path) -> None:
    """A socket in the client's own directory, but listened on by uid 65534: not used."""
    directory = Path(rundir.directory(install.env))
    rundir.ensure(str(directory))
    listening = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]);"
        "s.listen(); print('ready', flush=True); sys.stdin.read()"
    )
    nobody = _as_nobody(listening, str(open_dir / "s"))
    try:
        target = Path(rundir.socket_path(str(directory), installation_key()))
        (open_dir / "s").rename(target)  # the inode, still bound to nobody's listener
        os.chown(target, os.getuid(), os.getgid())
        assert stat.S_ISSOCK(target.lstat().st_mode)
        assert connect(install.env) is None
        theirs = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            theirs.connect(str(target))  # it is there, and listening
    finally:
        nobody.communicate("")


# ----- life cycle ----------------------------------------------------------------------


def test_an_idle_server_stops_by_itself(install: Install) -> None:
    found = start_server(install, "--idle", "1s")
    try:
        assert found.process.wait(60) == 0
        assert not found.socket.exists()
        assert list(found.socket.parent.iterdir()) == []  # its lock file too
    finally:
        stop(found)


def test_start_status_stop_in_the_background(install: Install) -> None:
    started = install.run("daemon", "start", "--idle", "10m")
    assert started.returncode == 0, started.stderr
    assert started.stderr.startswith(server.READY.encode())
    pid = int(started.stderr.split(b"pid ")[1].split(b",")[0])
    try:
        again = install.run("daemon", "start")
        assert again.returncode == 0
        assert b"is running already" in again.stderr
        status = install.run("daemon", "status")
        assert status.returncode == 0
        assert f"pid:        {pid}\n".encode() in status.stdout
        assert b"commands go to it" in status.stdout
        assert install.run("--version").where == "warm"
        stopped = install.run("daemon", "stop")
        assert stopped.stderr == f"flow-runner: stopped the warm runner (pid {pid})\n".encode()
        gone(pid)
        assert install.run("daemon", "status").returncode == 1
        assert b"no warm runner is running" in install.run("daemon", "stop").stderr
    finally:
        if not ended(pid):
            os.kill(pid, signal.SIGTERM)


def test_start_needs_the_console_script(install: Install) -> None:
    through_cli = subprocess.run(
        [sys.executable, "-m", "runner.cli", "daemon", "start"],
        cwd=ROOT, env=install.env, capture_output=True, check=False,
    )  # fmt: skip
    assert through_cli.returncode == 2
    assert b"only the flow-runner command" in through_cli.stderr


# ----- signals, and processes lost under a run -------------------------------------------


@pytest.mark.docker
def test_ctrl_c_reaches_the_warm_run(
    warm: Server, install: Install, engine: Any, tmp_path: Path
) -> None:
    runner = install.start("exec", "--profile", profile_file(tmp_path), *fake("ignore-cancel"))
    run = wait_running(engine, warm.pid, runner)
    runner.send_signal(signal.SIGINT)
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 130, err
    assert json.loads(out)["error"]["code"] == "CANCELLED"
    assert b"cancelling (again to kill now)" in err
    assert install.where(runner) == "warm"
    gone(run)
    assert engine.containers.list(all=True, filters={"label": of_runner(run)}) == []


@pytest.mark.docker
def test_a_killed_command_cancels_its_warm_run(
    warm: Server, install: Install, engine: Any, tmp_path: Path
) -> None:
    runner = install.start("exec", "--profile", profile_file(tmp_path), *fake("ignore-cancel"))
    run = wait_running(engine, warm.pid, runner)
    runner.kill()
    runner.communicate(timeout=60)
    gone(run)  # cancelled by its handler, its container removed by its own cleanup
    assert engine.containers.list(all=True, filters={"label": of_runner(run)}) == []


@pytest.mark.docker
@pytest.mark.timeout(120)
def test_a_warm_exec_has_its_handler_sweep_what_a_killed_runner_left(
    warm: Server, install: Install, engine: Any
) -> None:
    """A command the warm runner serves does not sweep before its launch; its handler
    sweeps once it has reported how the run ended."""
    args = ("exec", "--input", '{"seconds": 30}', "flow-runner/examples-slow:latest")
    killed = install.start(*args, env={"FLOW_RUNNER_WARM": "0"})
    left = wait_running(engine, os.getpid(), killed)
    killed.kill()
    killed.communicate(timeout=60)
    assert engine.containers.list(all=True, filters={"label": of_runner(left)})
    ran = install.run("exec", *fake("echo"))
    assert (ran.where, ran.returncode) == ("warm", 0), ran.stderr
    deadline = time.monotonic() + 30  # the event waited for: the handler's sweep took it
    while engine.containers.list(all=True, sparse=True, filters={"label": of_runner(left)}):
        assert time.monotonic() < deadline, "the handler did not sweep the killed runner's"
        time.sleep(0.05)


@pytest.mark.docker
def test_the_server_dying_under_a_run_changes_nothing(
    install: Install, engine: Any, tmp_path: Path
) -> None:
    found = start_server(install, "--idle", "10m", "--pool", "0")  # (see the warm fixture)
    try:
        args = ("exec", "--input", '{"seconds": 1.5}', "flow-runner/examples-slow:latest")
        runner = install.start(*args)
        run = wait_running(engine, found.pid, runner)
        os.kill(found.pid, signal.SIGKILL)
        out, err = runner.communicate(timeout=60)
        assert runner.returncode == 0, err
        assert json.loads(out)["outcome"] == "done"
        gone(run)
        assert engine.containers.list(all=True, filters={"label": of_runner(run)}) == []
    finally:
        stop(found)


@pytest.mark.docker
def test_a_lost_handler_is_said_and_the_run_still_ends(
    warm: Server, install: Install, engine: Any
) -> None:
    args = ("exec", "--input", '{"seconds": 1.5}', "flow-runner/examples-slow:latest")
    runner = install.start(*args)
    run = wait_running(engine, warm.pid, runner)
    handler = int(Path(f"/proc/{run}/stat").read_text().rpartition(")")[2].split()[1])
    os.kill(handler, signal.SIGKILL)
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 5
    assert json.loads(out)["outcome"] == "done"  # the run went on, and wrote its result
    assert err.endswith(b"its exit status is unknown (exit 5)\n")
    assert ended(run)  # before the client did
    assert engine.containers.list(all=True, filters={"label": of_runner(run)}) == []


# ----- what the server imports, and the wire ------------------------------------------


def test_preloading_changes_no_process_wide_setting() -> None:
    """Importing everything (as the server does) leaves what a run inherits as it was.

    Warning filters aside: urllib3 and requests add some when imported (as they do in a
    command that imports them), for their own warning classes, which only they raise.
    """
    code = """
import json, locale, os, signal, sys, threading, warnings
def umask():
    mask = os.umask(0o22)
    os.umask(mask)
    return mask
def state():
    return {
        "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask(),
        "fds": sorted(os.listdir("/proc/self/fd")), "threads": threading.active_count(),
        "signals": {int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()},
        "path": sys.path, "meta": repr(sys.meta_path),
        "hooks": repr((sys.excepthook, sys.displayhook, threading.excepthook)),
        "recursion": sys.getrecursionlimit(), "locale": locale.setlocale(locale.LC_ALL),
        "digits": sys.get_int_max_str_digits(),
        "filters": [[a, c.__module__, c.__qualname__, repr(m), n]
                    for a, m, c, _, n in warnings.filters],
    }
from runner.warm.envwatch import watching
before = state()
with watching() as reads:
    from runner.cli.daemon import preload
    preload()
print(json.dumps({"before": before, "after": state(), "reads": reads.values}))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    found = json.loads(done.stdout)
    before, after = found["before"], found["after"]
    filters_before, filters_after = before.pop("filters"), after.pop("filters")
    added = [f for f in filters_after if f not in filters_before]
    assert [f for f in filters_before if f not in filters_after] == []  # none taken away
    assert {module for _, module, *_ in added} <= {"urllib3.exceptions", "requests.exceptions"}
    assert after == before
    assert "PYDANTIC_DISABLE_PLUGINS" in found["reads"]  # what the refusal test relies on


@pytest.mark.parametrize("unbuffered", [False, True])
def test_the_run_builds_its_standard_streams_as_the_interpreter_does(unbuffered: bool) -> None:
    """Described by one interpreter, rebuilt in another: the same objects over 0, 1, 2."""
    code = """
import json, sys
from runner.warm import adopt, context
def attributes():
    return [[s.encoding, s.errors, s.line_buffering, s.write_through, s.mode, s.name,
             type(s.buffer).__name__, getattr(s.buffer, "buffer_size", None),
             getattr(getattr(s.buffer, "raw", s.buffer), "name", None)]
            for s in (sys.stdin, sys.stdout, sys.stderr)]
original = attributes()
described = [context._stream(s, fd) for fd, s in enumerate((sys.stdin, sys.stdout, sys.stderr))]
adopt._streams(described)
assert sys.__stdout__ is sys.stdout
print(json.dumps([original, attributes()]))
"""
    flags = ["-u"] if unbuffered else []
    done = subprocess.run(
        [sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": ""}, stdin=subprocess.PIPE,
    )  # fmt: skip
    original, rebuilt = json.loads(done.stdout)
    assert rebuilt == original
    assert original[1][6] == ("FileIO" if unbuffered else "BufferedWriter")


def test_the_environment_watch_sees_reads_and_walks() -> None:
    os.environ["WARM_SEEN"] = "1"
    try:
        with envwatch.watching() as reads:
            os.environ.get("WARM_SEEN")
            os.getenv("WARM_UNSET_VARIABLE")
        assert reads.values == {"WARM_SEEN": "1", "WARM_UNSET_VARIABLE": None}
        assert not reads.whole
        assert reads.differs({"WARM_SEEN": "1"}) is None
        assert reads.differs({"WARM_SEEN": "2"}) == "WARM_SEEN"
        assert reads.differs({"WARM_SEEN": "1", "WARM_UNSET_VARIABLE": ""}) == "WARM_UNSET_VARIABLE"
        with envwatch.watching() as walked:
            dict(os.environ)
        assert walked.whole
        assert walked.differs({**os.environ, "WARM_EXTRA": "1"}) == "WARM_EXTRA"
        assert walked.differs(dict(os.environ)) is None
    finally:
        del os.environ["WARM_SEEN"]
    assert type(os.environ) is os._Environ


def test_the_console_script_imports_little_before_it_hands_off() -> None:
    """With no warm runner: the launcher and the client's checks, nothing of the CLI."""
    code = (
        "import sys; before = set(sys.modules)\n"
        "import runner.launch, runner.warm.client as c\n"
        "assert c.connect({'XDG_RUNTIME_DIR': sys.argv[1]}) is None\n"
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    with tempfile.TemporaryDirectory() as empty:
        done = subprocess.run(
            [sys.executable, "-c", code, empty], cwd=ROOT, capture_output=True, check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
        )  # fmt: skip
    imported = set(done.stdout.split())
    assert imported <= {
        "runner", "runner.exits", "runner.launch", "runner.warm", "runner.warm.client",
        "runner.warm.rundir", "runner.warm.key", "_blake2", "fcntl",
        "gc",  # built in: the launcher pauses the collector for start-up
        "__future__",  # what `from __future__ import annotations` reads: 0.2 ms
    }, imported  # fmt: skip


def test_the_wire_refuses_what_is_not_a_message() -> None:
    left, right = socket.socketpair()
    with left, right:
        wire.send(left, {"op": "x", "text": "caf\udce9"}, [0])
        message, fds = wire.receive(right, 1)
        assert message == {"op": "x", "text": "caf\udce9"}  # surrogate escapes survive
        assert len(fds) == 1 and os.path.sameopenfile(fds[0], 0)
        os.close(fds[0])
        for body in (b"[1]", b"{", b"x" * 10):
            left.sendall(len(body).to_bytes(4, "big") + body)
            with pytest.raises(wire.WireError):
                wire.receive(right)
        left.sendall((wire.MAX_BODY + 1).to_bytes(4, "big"))
        with pytest.raises(wire.WireError, match="a message of"):
            wire.receive(right)
    left, right = socket.socketpair()
    with right:
        left.close()
        with pytest.raises(wire.WireError, match=r"^closed$"):
            wire.receive(right)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_the_client_ends_by_the_signal_that_ended_the_run(signum: int) -> None:
    """A run killed by SIGKILL (the OOM killer, kill -9) ends its client by SIGKILL too,
    as the command run in its own process would end; SIGKILL cannot be given a handler,
    and trying to reset it raised out of the client (a traceback, exit 1)."""
    code = f"from runner.warm.client import _die_by; _die_by({int(signum)})"
    ended = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True)
    assert ended.returncode == -signum, ended.stderr


# ----- a server that does not answer is not waited for ---------------------------------


def test_a_stopped_server_is_not_waited_for(install: Install) -> None:
    found = start_server(install, "--idle", "10m")
    os.kill(found.pid, signal.SIGSTOP)  # Ctrl-Z on a server in the foreground
    try:
        ran = install.run("--version")
    finally:
        os.kill(found.pid, signal.SIGCONT)
        stop(found)
    assert (ran.returncode, ran.where) == (0, "cold"), ran.stderr


def test_a_server_that_never_answers_is_given_up_on(install: Install, tmp_path: Path) -> None:
    """The command's descriptors went with its request and stay queued at the silent
    socket until it closes, so the output goes to files here, not to pipes whose end
    would wait for that."""
    found = start_server(install, "--idle", "10m")
    path = found.socket
    stop(found)
    path.unlink(missing_ok=True)
    out, err = tmp_path / "out", tmp_path / "err"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(str(path))  # accepts (the kernel queues), reads nothing, says nothing
        silent.listen()
        started = time.monotonic()
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = install.start("--version", stdout=stdout, stderr=stderr)
            process.wait(timeout=ANSWER + 30)
        seconds = time.monotonic() - started
    assert (process.returncode, install.where(process)) == (0, "cold"), err.read_bytes()
    assert out.read_bytes().startswith(b"flow-runner ")
    assert ANSWER <= seconds < ANSWER + 10


@pytest.mark.timeout(30)
def test_a_runs_status_reaches_its_client_before_its_process_is_gone() -> None:
    """The run writes its status as it exits, every other descriptor closed first: the
    handler passes it on at once, while the run's process still lives (its teardown is not
    waited for), a reader of the client's output sees its end, and the handler reaps the
    run after, sending nothing more."""
    import select
    import threading

    from runner.warm import handler

    client, conn = socket.socketpair()
    status_read, status_write = os.pipe()
    output_read, output_write = os.pipe()  # the client's stdout, as the run holds it
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    try:
        pid = os.fork()
        if pid == 0:  # the run: reports 3, then lingers until told to go
            try:
                handler._exiting(status_write, 3)
                signal.sigwait([signal.SIGUSR1])
            finally:
                os._exit(3)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1])
    for fd in (status_write, output_write):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    alive = os.pidfd_open(pid)
    watching = threading.Thread(target=handler._watch, args=(conn, pid, pidfd, status_read))
    watching.start()
    client.settimeout(10)
    try:
        assert wire.receive(client)[0] == {"exit": 3}
        assert select.select([alive], [], [], 0)[0] == []  # the run has not exited
        assert os.read(output_read, 1) == b""  # its copy of the output is closed
    finally:
        os.kill(pid, signal.SIGUSR1)
        watching.join(10)
    assert not watching.is_alive()
    assert select.select([alive], [], [], 0)[0] == [alive]
    conn.close()
    assert client.recv(1) == b""  # one status, not two
    for fd in (alive, output_read):
        os.close(fd)
    client.close()
