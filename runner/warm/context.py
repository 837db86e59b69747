"""What a warm run takes over from the command's process, and what must already be equal.

A warm run must not differ from the run the command would make in its own process. The
client describes its process (:func:`describe_run`); the handler refuses it
(:func:`refusal`), and the command runs in process, unless it can be made the same
(:mod:`runner.warm.adopt`). Taken over: the open descriptors by number, the working
directory (as a descriptor: the very same one), argv, environment, umask, resource limits,
signal dispositions and mask, the standard streams' encoding, errors and buffering, locale,
time zone, ``__main__``'s package (click names the program after it), recursion head-room.
Equal, or refused: uid and groups (the kernel's word), real and saved ids, namespaces, root
directory, nice value, scheduling policy, CPU affinity, capabilities, no_new_privs,
seccomp, LSM label, ``oom_score_adj``, file-system encoding, hard resource limits (not above
the handler's), and the environment variables the server's imports read (baked in).
Neither: the cgroup (the server's), the controlling terminal (none: ``/dev/tty`` cannot be
opened), parent and process-group ids, I/O priority, the memory the server's imports hold
(an address-space limit counts it). The client imports this on every warm command: nothing
here is costly to import.
"""

from __future__ import annotations

import os
import resource
import sys

TYPE_CHECKING = False  # not typing's: the console script's path does without importing it
if TYPE_CHECKING:
    import signal
    import types
    from typing import Any

    from runner.warm.envwatch import Reads
    from runner.warm.wire import Message
else:  # signal's own import builds its enums (~3 ms of every warm command); same calls
    import _signal as signal

NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")
STATUS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
RLIMITS = tuple(sorted(name for name in dir(resource) if name.startswith("RLIMIT_")))


def here() -> dict[str, Any]:
    """This process's facts a handler cannot take over, as a refusal names them (as JSON)."""
    namespaces = {name: _read(f"/proc/self/ns/{name}", link=True) for name in NAMESPACES}
    root = os.stat("/")
    with open("/proc/self/status", encoding="ascii") as lines:
        split = (line.partition(":") for line in lines)
        status = {name: value.strip() for name, _, value in split if name in STATUS}
    return {
        "namespaces": namespaces,
        "root directory": [root.st_dev, root.st_ino],
        "real and saved user and group ids": [list(os.getresuid()), list(os.getresgid())],
        "nice value": os.getpriority(os.PRIO_PROCESS, 0),
        "scheduling policy": os.sched_getscheduler(0),
        "CPU affinity": sorted(os.sched_getaffinity(0)),
        "capabilities, no_new_privs or seccomp mode": status,
        "security label": _read("/proc/self/attr/current"),
        "oom_score_adj": _read("/proc/self/oom_score_adj"),
        "file-system encoding": [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()],
    }


def describe(op: str, key: str) -> Message:
    """A request that carries this process's facts and environment (for any ``op``)."""
    return {"op": op, "key": key, "context": here(), "env": dict(os.environ)}


def describe_run(key: str, fds: list[int], depth: int) -> Message | None:
    """The request to run this command with the descriptors ``fds`` (0, 1, 2 first), ``depth``
    frames below the CLI's ``main``; None if a standard stream is closed or replaced."""
    streams = [_stream(stream, fd) for fd, stream in enumerate((sys.stdin, sys.stdout, sys.stderr))]
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
    """Why this process cannot run ``request`` as its client would, or None (``reads``: the
    environment variables the server's imports read)."""
    theirs = request["context"]
    for name, value in here().items():
        if theirs.get(name) != value:
            return f"not the same {name} as the warm runner"
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
    if handler == signal.SIG_IGN:  # _signal's are plain ints
        return "ignore"
    if handler is signal.default_int_handler:
        return "interrupt"
    if handler in (signal.SIG_DFL, None):
        return "default"
    return "handler"


def _read(path: str, link: bool = False) -> str | None:
    try:
        if link:
            return os.readlink(path)
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return None
