"""The raw baseline the container benchmarks compare against: one plain ``docker run``.

The same ``flow/run`` frame the host would send goes to ``docker run --rm -i`` on stdin,
which stays open until the response line arrives (as the host's does).
"""

from __future__ import annotations

import json
import subprocess
import time

from runner.json1 import JSONValue
from runner.sandbox.docker.container import SCRATCH_PATH


def root_frame(input: JSONValue) -> bytes:
    """The flow/run request, with a deadline well in the future."""
    params = {
        "protocol": "run/1",
        "input": input,
        "settings": {},
        "attachments": {},
        "scratch": SCRATCH_PATH,
        "deadlineUnixMs": int((time.time() + 300) * 1000),
    }
    frame = {"jsonrpc": "2.0", "id": "host:1", "method": "flow/run", "params": params}
    return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


def docker_run(image: str, input: JSONValue, flags: list[str]) -> float:
    """Seconds for one ``docker run --rm -i FLAGS IMAGE`` to answer and exit."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        ["docker", "run", "--rm", "-i", *flags, image],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(root_frame(input))
    proc.stdin.flush()
    line = proc.stdout.readline()
    proc.stdin.close()
    rest = proc.stdout.read()
    code = proc.wait()
    elapsed = time.perf_counter() - started
    if code != 0 or "result" not in json.loads(line or b"{}") or rest:
        raise RuntimeError(f"docker run failed: exit {code}, {line!r}, {rest[:200]!r}")
    return elapsed
