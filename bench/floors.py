"""Benchmark: the floors under issue 17's call and channel targets, on this machine.

Two costs no host of this design pays less than, each printed beside the target it bounds:

- *protocol work per call*: what the host's sans-I/O core does for one ``capability/call``
  that a broker answers at once, in a plain loop, with no event loop, task, cancel scope
  or socket: frame and decode the request (JSON/1), classify and check it (Run/1's
  envelope and params), admit it to the operation ledger (its canonical identity and
  SHA-256), encode and check the result and frame the answer. This is the Python work
  every call costs before it is read or written; ``bench/calls.py`` measures the whole.
  Issue 17 asks for 50,000 calls/s with 64 in flight: 20 µs of host CPU per call.
- *the attach socket per line*: one container of the channel benchmark's image, under the
  same protections (no network, read-only root, no capabilities, an unprivileged user),
  echoes stdin lines; this process writes a 64-character JSON string and reads its echo
  back with blocking calls on the hijacked attach socket, no event loop. Reported: its CPU
  per line (the system calls, and whatever the kernel charges for waking ``dockerd``),
  and ``dockerd``'s. A relayed channel item is two such round trips for the host (the
  writer's ``channel/send`` and the reader's ``channel/next``, each a request in and an
  answer out); issue 17 asks for 100 µs of host CPU per item.

    .venv/bin/python bench/floors.py [--calls 50000] [--lines 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from channels import ECHO, IMAGE, engine_cpu

from runner import json1
from runner.host.eager import CallScope
from runner.host.operations import OperationLedger
from runner.protocol.results import validate_capability_result
from runner.protocol.session import CallRequested, HostSession, decode
from runner.sandbox.labels import run_labels

FRAME = (
    b'{"jsonrpc":"2.0","id":"c:%d","method":"capability/call","params":'
    b'{"operationId":"o:%d","slot":"bench","method":"ping","input":null}}\n'
)  # the frame bench/call_component.py writes


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def protocol_work(calls: int) -> float:
    """Host CPU seconds per call of the sans-I/O core's work for ``calls`` calls."""
    deadline = int(time.time() * 1000) + 3_600_000
    session = HostSession(
        {"protocol": "run/1", "input": None, "settings": {}, "attachments": {},
         "scratch": "/flow/scratch", "deadlineUnixMs": deadline}
    )  # fmt: skip
    session.start()
    session.data_to_send()
    ledger = OperationLedger()
    frames = [FRAME % (i, i) for i in range(calls)]
    started = cpu()
    for frame in frames:
        payloads, events = session.receive_bytes(frame)
        for payload in payloads:
            events += session.receive_decoded(decode(payload))
        for event in events:
            assert isinstance(event, CallRequested), event
            scope = CallScope()  # as the driver admits a call: no cancel scope unless it waits
            ticket = ledger.admit(event.request_id, event.method, event.params, scope)
            result = {"value": None}  # the broker's answer, as bench/calls.py's PingBroker
            ticket.operation.result = json1.dumps(result)
            assert validate_capability_result(result) is None
            session.respond_encoded(event.request_id, ticket.encoded_result())
        session.data_to_send()
    return (cpu() - started) / calls


def attach_line(lines: int) -> tuple[float, float, float]:
    """(host CPU s/line, engine CPU s/line, lines/s) of a blocking lock-step echo."""
    import docker  # imported here: the protocol floor needs none of it

    client = docker.from_env()
    container = client.containers.create(
        IMAGE,
        ["python3", "-c", ECHO],
        stdin_open=True,
        network_disabled=True,
        read_only=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        user="65534:65534",
        labels=run_labels(uuid.uuid4().hex),
    )
    try:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        sock: socket.socket = client.api.attach_socket(container.id, params=params)._sock
        container.start()
        line = json1.dumps("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
        line += b"\n"
        expected = 8 + len(line)  # one attach frame: an 8-byte header and the line

        def round_trip() -> None:
            sock.sendall(line)
            got = 0
            while got < expected:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise RuntimeError("the echo ended")
                got += len(chunk)

        for _ in range(200):  # the container is up and its interpreter warm
            round_trip()
        began, host, engine = time.perf_counter(), cpu(), engine_cpu()
        for _ in range(lines):
            round_trip()
        wall = time.perf_counter() - began
        return (cpu() - host) / lines, (engine_cpu() - engine) / lines, lines / wall
    finally:
        container.remove(force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--lines", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = [protocol_work(args.calls) for _ in range(args.rounds)]
    lines = [attach_line(args.lines) for _ in range(args.rounds)]
    call = statistics.median(work) * 1e6
    host = statistics.median(line[0] for line in lines) * 1e6
    engine = statistics.median(line[1] for line in lines) * 1e6
    rate = statistics.median(line[2] for line in lines)
    print(f"{args.rounds} rounds (medians)\n")
    print("| floor | per unit | target it bounds |")
    print("|---|---:|---|")
    print(f"| protocol work per call (no I/O, no loop) | {call:.1f} µs | 20 µs/call (50,000/s) |")
    print(f"| attach socket, blocking lock-step line, host CPU | {host:.0f} µs | |")
    print(f"| the same, two lines (one relayed item), host CPU | {2 * host:.0f} µs | 100 µs/item |")
    print(f"| the same, engine CPU per line | {engine:.0f} µs | |")
    print(f"| the same, lines/s | {rate:,.0f} | |")
    print("\nper round: protocol µs/call " + ", ".join(f"{w * 1e6:.1f}" for w in work))
    print("per round: attach host µs/line " + ", ".join(f"{x[0] * 1e6:.0f}" for x in lines))


if __name__ == "__main__":
    main()
