"""A scripted, misbehaving Run/1 component (standard library only).

``python3 fake_component.py SCENARIO`` plays one scenario from HOST-CASES.md against the
host on stdin/stdout. It speaks raw frames on purpose, so it can break every rule the host
must catch. Scenarios that behave report what they saw as their Run output, so a test can
check the host's answers from the outside. The same file runs in the fake-component image.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from queue import Queue
from typing import Any

STDOUT = sys.stdout.buffer
ROOT: dict[str, Any] = {}
SCENARIOS: dict[str, Callable[[], None]] = {}
_inbox: Queue[dict[str, Any] | None] = Queue()
_held: list[dict[str, Any]] = []


def scenario(fn: Callable[[], None]) -> Callable[[], None]:
    SCENARIOS[fn.__name__.replace("_", "-")] = fn
    return fn


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def send(message: dict[str, Any]) -> None:
    write(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def _reader() -> None:
    # Raw reads on fd 0: a daemon thread blocked in a buffered reader would hold its lock
    # at interpreter shutdown and abort the process.
    buffer = b""
    while chunk := os.read(0, 1 << 16):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            _inbox.put(json.loads(line))
    _inbox.put(None)


def receive(timeout: float = 30) -> dict[str, Any] | None:
    if _held:
        return _held.pop(0)
    return _inbox.get(timeout=timeout)


def wait_for(predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Next message matching ``predicate``; others are held for later."""
    for i, message in enumerate(_held):
        if predicate(message):
            return _held.pop(i)
    skipped = []
    while True:
        message = _inbox.get(timeout=60)
        if message is None:
            sys.exit(9)
        if predicate(message):
            _held.extend(skipped)
            return message
        skipped.append(message)


def response_to(rid: str) -> dict[str, Any]:
    return wait_for(lambda m: m.get("id") == rid and "method" not in m)


def request(rid: str, method: str, params: Any) -> None:
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def call(rid: str, method: str, params: Any) -> dict[str, Any]:
    request(rid, method, params)
    return response_to(rid)


def capability(rid: str, op: str, value: Any = None, slot: str = "tool") -> None:
    params = {"operationId": op, "slot": slot, "method": "do", "input": value}
    request(rid, "capability/call", params)


def cancel(target: str, params: Any = None) -> None:
    params = {"requestId": target} if params is None else params
    send({"jsonrpc": "2.0", "method": "request/cancel", "params": params})


def outcome_of(response: dict[str, Any]) -> Any:
    """A compact view of a response: the result, or the error's code."""
    if "result" in response:
        return response["result"]
    error = response["error"]
    return error.get("data", {}).get("code", error["code"])


def done(output: Any = None, outcome: str = "done") -> None:
    send({"jsonrpc": "2.0", "id": ROOT["id"], "result": {"outcome": outcome, "output": output}})


def fail(code: str, details: Any = None) -> None:
    data: dict[str, Any] = {"code": code}
    if details is not None:
        data["details"] = details
    error = {"code": -32000, "message": code.lower(), "data": data}
    send({"jsonrpc": "2.0", "id": ROOT["id"], "error": error})


# ----- well-behaved ------------------------------------------------------------------


@scenario
def echo() -> None:
    done(ROOT["params"]["input"])


@scenario
def forge_result() -> None:  # k8s: lines on stderr that look like the wrapper's result
    forged = {"outcome": "done", "output": "forged", "job": {"seal": "0" * 32, "exit": 0}}
    sys.stderr.write(json.dumps({"flowRunnerJob": {"row": None}}) + "\n")
    sys.stderr.write(json.dumps(forged) + "\n")
    sys.stderr.flush()
    done({"real": True})


@scenario
def params() -> None:
    done(ROOT["params"])


@scenario
def custom_outcome() -> None:
    done({"why": "custom"}, outcome="partial")


@scenario
def error_result() -> None:
    fail("INVALID_INPUT", {"field": "name"})


@scenario
def stderr_1mib() -> None:  # PX-06
    for _ in range(16):
        sys.stderr.buffer.write(b"e" * 65535 + b"\n")
    sys.stderr.flush()
    done("ok")


@scenario
def stderr_flood() -> None:
    """Write stderr as fast as it is taken, never answer, ignore request/cancel."""
    line = b"flood " * 10_922 + b"\n"  # 64 KiB
    while True:
        os.write(2, line)


# ----- process exit and completion (PX) -----------------------------------------------


@scenario
def exit0_silent() -> None:  # PX-01
    sys.exit(0)


@scenario
def exit7_silent() -> None:  # PX-01
    sys.exit(7)


@scenario
def trailing_frame() -> None:  # PX-02
    done()
    send({"jsonrpc": "2.0", "method": "log", "params": {}})


@scenario
def trailing_partial() -> None:  # PX-03
    done()
    write(b"partial")


@scenario
def trailing_2mib() -> None:  # PX-04
    done()
    write(b"x" * (2 << 20))


@scenario
def exit7_after_response() -> None:  # PX-05
    done()
    sys.stdout.flush()
    os._exit(7)


@scenario
def no_exit() -> None:  # PX-07
    done()
    time.sleep(3600)


@scenario
def frame_after_root() -> None:  # PX-08
    done()
    done()


# ----- framing and JSON/1 (FR, JS) ----------------------------------------------------


def _padded(total: int) -> bytes:
    """A root response whose payload is exactly ``total`` bytes.

    The padding is four strings, since one JSON/1 string holds at most 8 MiB.
    """
    head = b'{"jsonrpc":"2.0","id":' + json.dumps(ROOT["id"]).encode()
    head += b',"result":{"outcome":"done","output":["'
    tail = b'"]}}'
    room = total - len(head) - len(tail) - 3 * len(b'","')
    sizes = [room // 4] * 3 + [room - 3 * (room // 4)]
    return head + b'","'.join(b"p" * size for size in sizes) + tail


@scenario
def pad_16mib() -> None:  # FR-14
    write(_padded(16_777_216) + b"\n")


@scenario
def pad_16mib_plus1() -> None:  # FR-14
    write(_padded(16_777_217) + b"\n")


def _raw(payload: bytes) -> Callable[[], None]:
    def play() -> None:
        write(payload + b"\n")
        time.sleep(5)  # the host must close on its own

    return play


for _name, _payload in {
    "bad-json": b'{"jsonrpc":"2.0",',
    "duplicate-member": b'{"jsonrpc":"2.0","jsonrpc":"2.0","method":"x"}',
    "lone-surrogate": b'{"jsonrpc":"2.0","method":"\\ud800"}',
    "unsafe-integer": b'{"jsonrpc":"2.0","method":"x","params":{"n":9007199254740992}}',
    "nan": b'{"jsonrpc":"2.0","method":"x","params":{"n":NaN}}',
    "bom": b'\xef\xbb\xbf{"jsonrpc":"2.0","method":"x"}',
    "invalid-utf8": b'{"jsonrpc":"2.0","method":"\xff"}',
    "empty-frame": b"",
    "batch": b'[{"jsonrpc":"2.0","method":"x"}]',
    "non-object": b'"hello"',
    # EN-05: envelopes that are JSON/1 but not Run/1
    "numeric-id": b'{"jsonrpc":"2.0","id":7,"method":"capability/call","params":{}}',
    "null-params": b'{"jsonrpc":"2.0","id":"c:1","method":"capability/call","params":null}',
    "extra-member": b'{"jsonrpc":"2.0","id":"c:1","method":"x","params":{},"extra":1}',
    "wrong-version": b'{"jsonrpc":"1.0","id":"c:1","method":"x","params":{}}',
    "result-and-error": b'{"jsonrpc":"2.0","id":"host:1","result":{},"error":{}}',
}.items():
    SCENARIOS[_name] = _raw(_payload)


@scenario
def incomplete_frame() -> None:
    write(b'{"jsonrpc":"2.0"')


# ----- direction, params, correlation (DI, CO, RL) ------------------------------------


@scenario
def wrong_direction() -> None:  # DI-04
    seen = {
        "flow/run": outcome_of(call("c:1", "flow/run", ROOT["params"])),
        "unknown": outcome_of(call("c:2", "no/such-method", {})),
        "cancel-as-request": outcome_of(call("c:3", "request/cancel", {"requestId": "c:1"})),
    }
    send({"jsonrpc": "2.0", "method": "capability/call", "params": {}})  # ignored
    send({"jsonrpc": "2.0", "method": "progress/update", "params": [1]})  # ignored
    done(seen)


@scenario
def invalid_call_params() -> None:
    seen = {
        "empty": outcome_of(call("c:1", "capability/call", {})),
        "bad-slot": outcome_of(
            call(
                "c:2",
                "capability/call",
                {"operationId": "o", "slot": "Bad Slot", "method": "do", "input": 1},
            )
        ),
        "extra": outcome_of(
            call("c:3", "flow/run-child", {"operationId": "o", "slot": "s", "input": 1, "x": 2})
        ),
    }
    done(seen)


@scenario
def unavailable() -> None:  # no configuration: nothing is admitted
    child = {"operationId": "c", "slot": "research", "input": 1}
    done(
        {
            "child": outcome_of(call("c:1", "flow/run-child", child)),
            "capability": outcome_of(
                call(
                    "c:2",
                    "capability/call",
                    {"operationId": "k", "slot": "kv", "method": "get", "input": 1},
                )
            ),
        }
    )


@scenario
def channel_wire() -> None:  # CH-08, BC-03 shapes as the host answers them
    pair = call("c:1", "channel/create", {})["result"]
    send_ref, receive_ref = pair["send"]["endpoint"], pair["receive"]["endpoint"]
    sent = outcome_of(call("c:2", "channel/send", {"endpoint": send_ref, "value": {"n": 1}}))
    closed = outcome_of(call("c:3", "channel/close", {"endpoint": send_ref}))
    item = outcome_of(call("c:4", "channel/next", {"endpoint": receive_ref}))
    end = outcome_of(call("c:5", "channel/next", {"endpoint": receive_ref}))
    released = outcome_of(call("c:6", "channel/release", {"endpoint": receive_ref}))
    broadcast = call("c:7", "channel/create", {"delivery": "broadcast"})["result"]
    source = broadcast["source"]
    reader = outcome_of(call("c:8", "channel/subscribe", {"source": source}))
    forged = outcome_of(call("c:9", "channel/send", {"endpoint": "ep-" + "0" * 32, "value": 1}))
    not_endpoint = outcome_of(call("c:10", "channel/next", {"endpoint": source}))
    wrong_way = outcome_of(call("c:11", "channel/send", {"endpoint": receive_ref, "value": 1}))
    done(
        {
            "pair": pair,
            "sent": sent,
            "closed": closed,
            "item": item,
            "end": end,
            "released": released,
            "broadcast": broadcast,
            "reader": reader,
            "forged": forged,
            "notEndpoint": not_endpoint,
            "wrongWay": wrong_way,
        }
    )


@scenario
def channel_abandoned() -> None:  # §7.6: a receiver read from and left unfinished
    pair = call("c:1", "channel/create", {})["result"]
    call("c:2", "channel/send", {"endpoint": pair["send"]["endpoint"], "value": 1})
    call("c:3", "channel/next", {"endpoint": pair["receive"]["endpoint"]})
    done("returned with a live receiver")


def deep_wide_frame() -> bytes:
    """16.6 MB: 127 nested arrays, each with 65,535 more items (far over 262,144 values)."""
    return b"[" * 127 + b"0" + (b",0" * 65_535 + b"]") * 127


@scenario
def deep_wide() -> None:  # once took the host 46 s and 6 GiB to refuse
    write(deep_wide_frame() + b"\n")
    time.sleep(60)  # the host must end the run on its own


@scenario
def big_child_input() -> None:
    """A flow/run-child frame of exactly 16 MiB: its input fits, the child's frame cannot."""
    head = b'{"jsonrpc":"2.0","id":"c:1","method":"flow/run-child",'
    head += b'"params":{"operationId":"o","slot":"next","input":["'
    tail = b'"]}}'
    room = 16_777_216 - len(head) - len(tail) - len(b'","')
    write(head + b"p" * (room // 2) + b'","' + b"p" * (room - room // 2) + tail + b"\n")
    done(outcome_of(response_to("c:1")))


@scenario
def reuse_id() -> None:  # CO-01
    call("c:1", "capability/call", {"operationId": "a", "slot": "t", "method": "do", "input": 1})
    request("c:1", "capability/call", {"operationId": "b", "slot": "t", "method": "do", "input": 1})
    time.sleep(5)


@scenario
def unknown_response_id() -> None:
    send({"jsonrpc": "2.0", "id": "host:99", "result": {"outcome": "done", "output": None}})
    time.sleep(5)


@scenario
def wrong_root_id() -> None:  # CO-04
    send({"jsonrpc": "2.0", "id": "host:2", "result": {"outcome": "done", "output": None}})
    time.sleep(5)


@scenario
def bad_root_result() -> None:  # RL-05
    send({"jsonrpc": "2.0", "id": ROOT["id"], "result": {"outcome": "Done!", "output": None}})
    time.sleep(5)


@scenario
def standard_error_root() -> None:  # the message is the input, if it is a string
    message = ROOT["params"]["input"] if isinstance(ROOT["params"]["input"], str) else "boom"
    send({"jsonrpc": "2.0", "id": ROOT["id"], "error": {"code": -32603, "message": message}})
    time.sleep(5)


@scenario
def response_while_pending() -> None:
    capability("c:1", "slow:1", "slow")
    done()
    time.sleep(5)


# ----- bounds (RB) --------------------------------------------------------------------


@scenario
def simultaneous_65() -> None:  # RB-02
    write(
        b"".join(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": f"c:{i}",
                    "method": "capability/call",
                    "params": {"operationId": f"op:{i}", "slot": "tool", "method": "do",
                               "input": i},
                }
            ).encode()
            + b"\n"
            for i in range(65)
        )
    )  # fmt: skip
    codes = [outcome_of(response_to(f"c:{i}")) for i in range(65)]
    rejected = sum(1 for c in codes if c == "RESOURCE_EXHAUSTED")
    done({"accepted": 65 - rejected, "rejected": rejected})


@scenario
def lifetime_65537() -> None:  # RB-05
    sent = 0
    window = 64
    while sent < 65_535:
        batch = range(sent + 1, min(sent + window, 65_535) + 1)
        write(
            b"".join(
                b'{"jsonrpc":"2.0","id":"c:%d","method":"capability/call","params":'
                b'{"operationId":"o:%d","slot":"tool","method":"do","input":null}}\n' % (i, i)
                for i in batch
            )
        )
        for i in batch:
            response_to(f"c:{i}")
        sent = batch[-1]
    last = outcome_of(call("c:65536", "capability/call", {}))
    sys.stderr.write(f"#65536 answered {last}\n")
    request("c:65537", "capability/call", {"operationId": "x", "slot": "t", "method": "do",
                                           "input": None})  # fmt: skip
    time.sleep(5)


@scenario
def many_calls() -> None:
    """``input["calls"]`` capability calls, each with a new operationId and the input
    ``{"prefix": <input["bytes"] bytes>}``, ``input["window"]`` at a time, to slot ``kv``
    and the methods ``input["methods"]`` in turn (default ``list``). Output: how many
    succeeded, and the error codes of the rest with their counts."""
    plan = ROOT["params"]["input"]
    methods = [name.encode() for name in plan.get("methods", ["list"])]
    head = b'{"jsonrpc":"2.0","id":"c:%d","method":"capability/call","params":{"operationId":'
    body = b'"op:%d","slot":"kv","method":"%s","input":{"prefix":"%s"}}}\n'
    prefix = b"p" * plan.get("bytes", 0)
    codes: dict[str, int] = {}
    succeeded = 0
    for start in range(0, plan["calls"], plan.get("window", 1)):
        batch = range(start, min(start + plan.get("window", 1), plan["calls"]))
        for i in batch:
            write(head % i + body % (i, methods[i % len(methods)], prefix))
        for i in batch:
            answer = response_to(f"c:{i}")
            if "result" in answer:
                succeeded += 1
            else:
                code = outcome_of(answer)
                codes[code] = codes.get(code, 0) + 1
    done({"succeeded": succeeded, "failed": codes})


# ----- cancellation -------------------------------------------------------------------


@scenario
def component_cancels() -> None:
    capability("c:1", "held:1", "held")
    cancel("c:1")
    first = outcome_of(response_to("c:1"))
    cancel("c:1")  # duplicate: no-op
    cancel("c:999")  # unknown: no-op
    after = outcome_of(call("c:2", "capability/call", {"operationId": "after", "slot": "tool",
                                                       "method": "do", "input": 2}))  # fmt: skip
    done({"cancelled": first, "after": after})


@scenario
def malformed_cancel() -> None:
    cancel("", params={"requestId": 7})
    time.sleep(5)


@scenario
def ignore_cancel() -> None:
    time.sleep(3600)


@scenario
def cooperative_cancel() -> None:
    wait_for(lambda m: m.get("method") == "request/cancel")
    after = outcome_of(call("c:1", "capability/call", {"operationId": "late", "slot": "tool",
                                                       "method": "do", "input": 1}))  # fmt: skip
    fail("CANCELLED", {"afterCancel": after})


@scenario
def record_stdin() -> None:
    """Append every frame read to the file ``input["record"]``; stop cooperatively on the
    root's ``request/cancel`` (answer CANCELLED), or ignore it with ``input["ignore"]``."""
    plan = ROOT["params"]["input"]
    with open(plan["record"], "a", encoding="utf-8") as record:
        record.write(json.dumps(ROOT) + "\n")
        record.flush()
        while (message := receive(timeout=3600)) is not None:
            record.write(json.dumps(message) + "\n")
            record.flush()
            if message.get("method") == "request/cancel" and not plan.get("ignore"):
                fail("CANCELLED")
                return
    sys.exit(9)


@scenario
def provider_raises() -> None:  # EN-06 guard
    done({"raised": outcome_of(call("c:1", "capability/call", {"operationId": "boom",
          "slot": "tool", "method": "raise", "input": None}))})  # fmt: skip


# ----- operation identity (OP) --------------------------------------------------------


@scenario
def operation_join_replay_conflict() -> None:  # OP-01
    capability("c:1", "shared:1", {"x": 1})
    capability("c:2", "shared:1", {"x": 1.0})
    first, second = outcome_of(response_to("c:1")), outcome_of(response_to("c:2"))
    capability("c:3", "shared:1", {"x": 1})
    replay = outcome_of(response_to("c:3"))
    capability("c:4", "shared:1", {"x": 2})
    conflict = outcome_of(response_to("c:4"))
    done({"first": first, "second": second, "replay": replay, "conflict": conflict})


@scenario
def joined_waiter_cancellation() -> None:  # OP-02
    capability("c:1", "shared-cancel:1", "held")
    capability("c:2", "shared-cancel:1", "held")
    cancel("c:1")
    cancelled = outcome_of(response_to("c:1"))
    call("c:3", "capability/call", {"operationId": "release", "slot": "tool", "method": "do",
                                    "input": "release"})  # fmt: skip
    survivor = outcome_of(response_to("c:2"))
    done({"cancellation": cancelled, "survivor": survivor})


@scenario
def uncertain_replay() -> None:  # OP-03
    seen = []
    plan = (("c:1", "uncertain:1", "uncertain"), ("c:2", "uncertain:1", "uncertain"),
            ("c:3", "uncertain:2", "fine"))  # fmt: skip
    for rid, op, value in plan:
        capability(rid, op, value)
        seen.append(outcome_of(response_to(rid)))
    done(seen)


# ----- resources ----------------------------------------------------------------------


@scenario
def memory_hog() -> None:  # grows until the memory limit kills it (OOM)
    hoard: list[bytes] = []
    while True:
        hoard.append(b"m" * (8 << 20))  # filled, so every page is really used
        sys.stderr.write(f"holding {8 * len(hoard)} MiB\n")


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "echo"
    threading.Thread(target=_reader, daemon=True).start()
    root = _inbox.get()
    if root is None:
        sys.exit(8)
    ROOT.update(root)
    try:
        SCENARIOS[name]()
    except SystemExit as exc:
        sys.stderr.flush()
        os._exit(int(exc.code or 0))
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
