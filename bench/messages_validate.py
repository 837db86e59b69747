"""Message validation throughput: the hand-written Run/1 checks against jsonschema.

Every frame a host reads is classified and its params or result checked, so this is on
the hot path. The comparison is with ``jsonschema``'s Draft 2020-12 validator on
the repository's ``spec/run-1.schema.json``, compiled once, on the same already-decoded
frames. Both sides answer the same question, "is this a valid Run/1 frame of some kind": ours
classifies the envelope, then checks params of the request method or the result against
every result shape (the host, knowing the method, does less than that).

Run: ``.venv/bin/python bench/messages_validate.py``. Numbers are recorded in
bench/README.md, "Message validation".
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from runner.protocol import builders
from runner.protocol.builders import cancel_notification, operational_error, result_response
from runner.protocol.codes import ProtocolViolation
from runner.protocol.envelope import Notification, Request, Success, classify
from runner.protocol.names import (
    CHANNEL_METHODS,
    COMPONENT_TO_HOST_METHODS,
    REQUEST_CANCEL,
)
from runner.protocol.params import validate_params
from runner.protocol.results import (
    validate_capability_result,
    validate_channel_result,
    validate_run_result,
)

SPEC = Path(__file__).resolve().parents[1] / "spec"
RESULT_METHODS = ("flow/run", "capability/call", *sorted(CHANNEL_METHODS))
REQUEST_METHODS = {"flow/run"} | COMPONENT_TO_HOST_METHODS  # the host sends only flow/run


def validate_result(method: str, result: Any) -> str | None:
    """The success ``result`` of a Run/1 request method, by the method it answers."""
    if method == "flow/run":
        return validate_run_result(result)
    if method == "capability/call":
        return validate_capability_result(result)
    return validate_channel_result(method, result)


def hand_written(frame: Any) -> bool:
    try:
        message = classify(frame)
    except ProtocolViolation:
        return False
    if isinstance(message, Request):
        return (
            message.method in REQUEST_METHODS
            and validate_params(message.method, message.params) is None
        )
    if isinstance(message, Notification):
        return message.method == REQUEST_CANCEL
    if isinstance(message, Success):
        return any(validate_result(method, message.result) is None for method in RESULT_METHODS)
    return True


def realistic_mix() -> list[tuple[Any, str, str | None]]:
    """A channel-heavy session: sends and reads dominate, calls and results are rarer.

    Each entry is ``(frame, schema definition, method a response answers)``.
    """
    send = builders.request(
        "component:41",
        "channel/send",
        {"endpoint": "updates:w", "value": {"sample": "room", "celsius": 21.5, "seq": 41}},
    )
    nxt = builders.request("component:42", "channel/next", {"endpoint": "updates:r"})
    item = result_response(
        "component:42", {"item": {"sequence": 41, "value": {"sample": "room", "celsius": 21.5}}}
    )
    accepted = result_response("component:41", None)
    call = builders.request(
        "component:43",
        "capability/call",
        {
            "operationId": "artifact-write:7",
            "slot": "artifacts",
            "method": "write",
            "input": {"path": "report.md", "text": "# Report\n" * 20},
            "channels": {"events": "updates:w"},
        },
    )
    child = builders.request(
        "component:44",
        "flow/run-child",
        {
            "operationId": "research:1",
            "slot": "research",
            "intent": "Find a useful comparison target.",
            "input": {"subject": "football", "limit": 5},
        },
    )
    root = builders.request(
        "host:1",
        "flow/run",
        {
            "protocol": "run/1",
            "input": {"subject": "football"},
            "settings": {"model": "small", "temperature": 0.2},
            "attachments": {
                f"source-{i}": {"path": f"/workspace/source/{i}", "access": "read"}
                for i in range(8)
            },
            "scratch": "/workspace/scratch",
            "deadlineUnixMs": 1_787_558_400_000,
            "channels": {
                "updates": {
                    "endpoint": "grant:1",
                    "direction": "receive",
                    "delivery": "broadcast",
                    "startSequence": 3,
                    "contract": {
                        "id": "https://example.com/contracts/updates",
                        "version": "1.2.0",
                        "digest": "sha256:" + "0f" * 32,
                    },
                }
            },
        },
    )
    result = result_response("host:1", {"outcome": "done", "output": {"rows": 3}})
    value = result_response("component:43", {"value": {"written": 181}})
    failed = operational_error("component:44", "UNAVAILABLE", "no provider")
    cancel = cancel_notification("component:42")
    streaming: list[tuple[Any, str, str | None]] = [
        (send, "channelSendRequest", None),
        (nxt, "channelNextRequest", None),
        (item, "channelSuccessResponse", "channel/next"),
        (accepted, "channelSuccessResponse", "channel/send"),
    ]
    return streaming * 8 + [
        (call, "capabilityCallRequest", None),
        (value, "capabilitySuccessResponse", "capability/call"),
        (child, "childFlowRequest", None),
        (failed, "errorResponse", None),
        (root, "flowRunRequest", None),
        (result, "runSuccessResponse", "flow/run"),
        (cancel, "requestCancelNotification", None),
    ]


def host_path(frame: Any, method: str | None) -> bool:
    """What the host does: classify, then the params, or the result of the known method."""
    try:
        message = classify(frame)
    except ProtocolViolation:
        return False
    if isinstance(message, Request):
        return validate_params(message.method, message.params) is None
    if isinstance(message, Success):
        assert method is not None
        return validate_result(method, message.result) is None
    return True


def frames_per_second(check: Callable[[], object], count: int, seconds: float) -> float:
    """Best of 5 rounds of ``check()`` (which validates ``count`` frames once)."""
    best = 0.0
    for _ in range(5):
        done = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 5:
            check()
            done += count
        best = max(best, done / elapsed)
    return best


def main() -> None:
    schema = json.loads((SPEC / "run-1.schema.json").read_text())
    whole = Draft202012Validator(schema)
    by_definition = {
        name: Draft202012Validator({**schema, "oneOf": [{"$ref": f"#/$defs/{name}"}]})
        for name in schema["$defs"]
    }
    mix = realistic_mix()
    pairs = [(frame, method) for frame, _, method in mix]
    chosen = [(frame, by_definition[definition]) for frame, definition, _ in mix]
    frames = [frame for frame, _, _ in mix]
    for frame, definition, method in mix:  # all must agree before anything is timed
        assert hand_written(frame) and host_path(frame, method), frame
        assert whole.is_valid(frame) and by_definition[definition].is_valid(frame), frame

    rows = (
        (
            "hand-written, host path",
            lambda: [host_path(frame, method) for frame, method in pairs],
            1.0,
        ),
        (
            "hand-written, any frame kind",
            lambda: [hand_written(frame) for frame in frames],
            1.0,
        ),
        (
            "jsonschema, definition known",
            lambda: [validator.is_valid(frame) for frame, validator in chosen],
            3.0,
        ),
        (
            "jsonschema, top-level oneOf",
            lambda: [whole.is_valid(frame) for frame in frames],
            3.0,
        ),
    )
    rates = [(name, frames_per_second(check, len(mix), seconds)) for name, check, seconds in rows]
    print(f"python {platform.python_version()}, a mix of {len(mix)} frames")
    print(f"{'validator':<32}{'frames/s':>12}{'µs/frame':>11}")
    for name, rate in rates:
        print(f"{name:<32}{rate:>12,.0f}{1e6 / rate:>11.2f}")
    known = rates[0][1] / rates[2][1]
    print(f"ratio, host path vs jsonschema with the definition known: {known:,.0f}x")
    anything = rates[1][1] / rates[3][1]
    print(f"ratio, any frame kind vs jsonschema top-level oneOf: {anything:,.0f}x")


if __name__ == "__main__":
    main()
