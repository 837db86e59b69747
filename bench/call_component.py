"""Benchmark component: ``capability/call`` round trips, timed from inside the component.

Input ``{"calls": N, "window": W}``: N calls with at most W on the wire at once. Output:
``{"calls": N, "seconds": S}``. Raw frames, no SDK, so the host is what is measured.
"""

from __future__ import annotations

import json
import os
import time


def main() -> None:
    buffer = b""
    while b"\n" not in buffer:
        buffer += os.read(0, 1 << 16)
    root = json.loads(buffer[: buffer.index(b"\n")])
    calls, window = root["params"]["input"]["calls"], root["params"]["input"]["window"]
    frame = (
        b'{"jsonrpc":"2.0","id":"c:%d","method":"capability/call","params":'
        b'{"operationId":"o:%d","slot":"bench","method":"ping","input":null}}\n'
    )
    started = time.perf_counter()
    sent = answered = 0
    while answered < calls:
        room = min(window - (sent - answered), calls - sent)
        if room:
            os.write(1, b"".join(frame % (i, i) for i in range(sent, sent + room)))
            sent += room
        answered += os.read(0, 1 << 16).count(b"\n")
    seconds = time.perf_counter() - started
    result = {"outcome": "done", "output": {"calls": calls, "seconds": seconds}}
    os.write(1, json.dumps({"jsonrpc": "2.0", "id": root["id"], "result": result}).encode() + b"\n")


if __name__ == "__main__":
    main()
