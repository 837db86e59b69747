"""Sandbox probes: small stdlib programs that test the Docker backend's confinement.

Each probe is a subcommand; results are one JSON object on stdout, so the tests assert on
data, not on shell output. Nothing here may need the network or a writable root.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import time


def _report(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def echo() -> None:
    """Copy stdin to stdout until EOF, then say so on stderr."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while chunk := stdin.read1(1 << 16):
        stdout.write(chunk)
        stdout.flush()
    sys.stderr.write("echo: end of input\n")


def burst(total: str) -> None:
    """Write ``total`` bytes of a counting pattern to stdout, interleaved with stderr lines.

    Chunk sizes vary from 1 byte to 100,000 so frames split and straddle reads. The
    pattern is the decimal counting text the test rebuilds with :func:`pattern`.
    """
    data = pattern(int(total))
    out = sys.stdout.buffer
    pos, size, index = 0, 1, 0
    while pos < len(data):
        end = min(pos + size, len(data))
        view = memoryview(data)[pos:end]
        while view:  # a write may return short (gVisor): loop
            view = view[out.raw.write(view) :]
        sys.stderr.write(f"err {index}\n")
        sys.stderr.flush()
        pos, size, index = end, size * 7 % 100_003 + 1, index + 1


def pattern(total: int) -> bytes:
    text = b"".join(b"%d\n" % i for i in range(total // 2 + 1))
    return text[:total]


def facts(readonly: str, writable: str) -> None:
    """Who am I, what can I reach, what can I write."""
    with open("/proc/self/status") as status:
        caps = dict(line.split(":\t", 1) for line in status if line.startswith("Cap"))
    _report(
        uid=os.getuid(),
        gid=os.getgid(),
        netifs=sorted(os.listdir("/sys/class/net")),
        cap_eff=caps["CapEff"].strip(),
        root_write=_try_write("/probe-was-here"),
        tmp_write=_try_write("/tmp/probe"),
        scratch_write=_try_write("/flow/scratch/probe"),
        readonly_write=_try_write(os.path.join(readonly, "probe")),
        writable_write=_try_write(os.path.join(writable, "probe")),
    )


def _try_write(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("probe\n")
    except OSError as exc:
        return _errno_name(exc)
    return "ok"


def fill(path: str) -> None:
    """Write 1 MiB blocks to ``path`` until the filesystem refuses."""
    block, written = b"\0" * (1 << 20), 0
    try:
        with open(path, "wb") as f:
            while True:
                written += f.write(block)
                f.flush()
    except OSError as exc:
        _report(errno=_errno_name(exc), written=written)


def forkbomb() -> None:
    """Fork children that wait, until fork fails; report how many, then end them all."""
    children: list[int] = []
    try:
        while len(children) < 100_000:
            pid = os.fork()
            if pid == 0:
                signal.pause()
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        failure = _errno_name(exc)
    else:
        failure = "none"
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    _report(forked=len(children), errno=failure)


def memhog() -> None:
    """Touch 16 MiB blocks until the memory limit ends the process."""
    blocks = []
    while True:
        blocks.append(bytearray(16 << 20))
        sys.stderr.write(f"{len(blocks) * 16} MiB\n")


def sleep() -> None:
    print("sleeping", flush=True)
    time.sleep(600)


PROBES = {f.__name__: f for f in (echo, burst, facts, fill, forkbomb, memhog, sleep)}

if __name__ == "__main__":
    PROBES[sys.argv[1]](*sys.argv[2:])
