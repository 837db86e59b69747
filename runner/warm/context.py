"""What a warm run takes over from the command's process, and what must already be equal.

A warm run must not differ from the run the command would have made in its own process.
The client describes its process (:func:`describe_run`); the handler refuses it
(:func:`refusal`), and the command then runs in its own process, unless the run can be
made the same (:mod:`runner.warm.adopt`):

- taken over by the run: the open file descriptors by number (0, 1, 2 and any other
  inherited one), the working directory (as a descriptor, so the very same directory),
  argv, the environment, the umask, the resource limits, the signal dispositions and
  mask, the standard streams' encoding, errors and buffering, the locale and time zone
  the environment sets, ``__main__``'s package (click names the program after it), and
  the head-room below the recursion limit;
- equal, or refused: the uid and groups (the kernel's word, checked by the server and the
  handler), the real and saved ids, namespaces and root directory, nice value,
  scheduling policy and CPU affinity, capabilities, no_new_privs, seccomp, the LSM label,
  ``oom_score_adj``, the file-system encoding, every resource limit's hard value (not
  above the handler's), and every environment variable that importing flow-runner read
  in the server (the imports baked those values in);
- neither: the cgroup (the run is accounted to the server's), the controlling terminal
  (the run has none, so ``/dev/tty`` cannot be opened), parent and process-group ids,
  the I/O priority, and memory the server's imports already hold (an address-space
  limit counts them).

The client imports this module on every warm command: nothing here is costly to import.
"""

from __future__ import annotations

import os
import resource
import signal
import sys

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    import types
    from typing import Any

    from runner.warm.envwatch import Reads
    from runner.warm.wire import Message

NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")
STATUS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
RLIMITS = tuple(sorted(name for name in dir(resource) if name.startswith("RLIMIT_")))
FACTS = {
    "namespaces": "namespaces",
    "root": "root directory",
    "ids": "real and saved user and group ids",
    "nice": "nice value",
    "scheduler": "scheduling policy",
    "affinity": "CPU affinity",
    "status": "capabilities, no_new_privs or seccomp mode",
    "security": "security label",
    "oom_score_adj": "oom_score_adj",
    "fs_encoding": "file-system encoding",
}
"""The facts :func:`here` returns, by key, as a refusal names them."""


def here() -> dict[str, Any]:
    """This process's facts that a handler cannot take over (lists, as JSON returns them)."""
    namespaces = {name: _readlink(f"/proc/self/ns/{name}") for name in NAMESPACES}
    root = os.stat("/")
    with open("/proc/self/status", encoding="ascii") as lines:
        split = (line.partition(":") for line in lines)
        status = {name: value.strip() for name, _, value in split if name in STATUS}
    return {
        "namespaces": namespaces,
        "root": [root.st_dev, root.st_ino],
        "ids": [list(os.getresuid()), list(os.getresgid())],
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "scheduler": os.sched_getscheduler(0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "status": status,
        "security": _read("/proc/self/attr/current"),
        "oom_score_adj": _read("/proc/self/oom_score_adj"),
        "fs_encoding": [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()],
    }


def describe(op: str, key: str) -> Message:
    """A request that carries this process's facts and environment (for any ``op``)."""
    return {"op": op, "key": key, "context": here(), "env": dict(os.environ)}


def describe_run(key: str, fds: list[int], depth: int) -> Message | None:
    """The request to run this command, with the descriptors ``fds`` (0, 1, 2 first).

    None when this process cannot be described: a standard stream closed or replaced.
    ``depth``: frames on the stack where the command would call the CLI's ``main``.
    """
    streams = [_stream(stream, fd) for fd, stream in enumerate(_std_streams())]
    if None in streams:
        return None
    mask = os.umask(0o077)
    os.umask(mask)
    return describe("run", key) | {
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "main_package": getattr(sys.modules["__main__"], "__package__", None),
        "fds": fds,
        "umask": mask,
        "rlimits": {name: list(resource.getrlimit(getattr(resource, name))) for name in RLIMITS},
        "signals": {str(int(signum)): _disposition(signum) for signum in signal.valid_signals()},
        "blocked": sorted(int(signum) for signum in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "streams": streams,
        "recursion": [sys.getrecursionlimit(), depth],
    }


def inherited_fds() -> list[int]:
    """The descriptors this process has open, in order (read before it opens any)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue  # the listing's own descriptor, closed by now
        found.append(int(name))
    return sorted(found)


def refusal(request: Message, reads: Reads) -> str | None:
    """Why this process cannot run ``request`` as its client would, or None.

    ``reads``: the environment variables the server's imports read, with their values.
    """
    theirs = request["context"]
    for name, value in here().items():
        if theirs.get(name) != value:
            return f"not the same {FACTS[name]} as the warm runner"
    variable = reads.differs(request["env"])
    if variable is not None:
        return f"not the same {variable} as the warm runner read while importing flow-runner"
    if request["op"] != "run":
        return None
    for name, (_, hard) in request["rlimits"].items():
        own = resource.getrlimit(getattr(resource, name))[1]
        if own != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > own):
            return f"a hard {name} above the warm runner's"
    if not set(request["signals"].values()) <= {"ignore", "default", "interrupt"}:
        return "a signal handler of its own"
    if [len(stream) for stream in request["streams"]] != [5, 5, 5]:
        raise ValueError("streams")
    fds = request["fds"]
    if fds[:3] != [0, 1, 2] or len(set(fds)) != len(fds):
        return "descriptors other than 0, 1, 2 and more"
    return None


def stack_depth(frame: types.FrameType | None) -> int:
    """Python frames on the stack from ``frame`` down, ``frame`` included."""
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _std_streams() -> tuple[Any, Any, Any]:
    return sys.stdin, sys.stdout, sys.stderr


def _stream(stream: Any, fd: int) -> list[Any] | None:
    try:
        if stream is None or stream.fileno() != fd:
            return None
        raw = not hasattr(stream.buffer, "raw")  # -u: the file itself, no buffer over it
        return [stream.encoding, stream.errors, stream.line_buffering, stream.write_through, raw]
    except (AttributeError, ValueError, OSError):
        return None


def _disposition(signum: int) -> str:
    handler = signal.getsignal(signum)
    if handler is signal.SIG_IGN:
        return "ignore"
    if handler is signal.default_int_handler:
        return "interrupt"
    if handler in (signal.SIG_DFL, None):
        return "default"
    return "handler"


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return None
