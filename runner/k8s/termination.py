"""Exit classes of ``flow-runner job`` and the termination message Kubernetes keeps.

The wrapper's exit statuses are ``exec``'s, plus :data:`EXIT_WRAPPER` for a failure of
the wrapper itself (an unexpected error in flow-runner, not the component's answer nor
bad usage): the one status a Job's ``podFailurePolicy`` counts towards a retry.

The termination message (``/dev/termination-log``) is what ``kubectl get pod -o yaml``
shows under ``state.terminated.message`` without reading the log. The kubelet truncates it
past 4096 bytes, so it is composed to fit: one JSON object, its free text cut first.
"""

from __future__ import annotations

import json
from pathlib import Path

from runner.exits import (
    EXIT_CANCELLED,
    EXIT_CUSTOM_OUTCOME,
    EXIT_DEADLINE,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_INFRASTRUCTURE,
    EXIT_USAGE,
    EXIT_WRAPPER,
)

CLASSES = {
    EXIT_DONE: "done",
    EXIT_USAGE: "usage",
    EXIT_CUSTOM_OUTCOME: "outcome",
    EXIT_FAILED: "failed",
    EXIT_INFRASTRUCTURE: "infrastructure",
    EXIT_WRAPPER: "wrapper",
    EXIT_DEADLINE: "deadline",
    EXIT_CANCELLED: "cancelled",
}
FINAL_EXITS = (EXIT_USAGE, EXIT_CUSTOM_OUTCOME, EXIT_FAILED, EXIT_DEADLINE, EXIT_CANCELLED)
"""Program outcomes and usage errors: the same pod would answer the same again, so a Job
fails (or an Indexed Job's index does) at once, without a retry."""
RETRYABLE_EXITS = (EXIT_WRAPPER,)
MESSAGE_LIMIT = 4096
"""Bytes of a termination message the kubelet keeps."""
NAME_LIMIT = 256
"""Characters kept of a component-chosen name (an outcome, an error code)."""


def exit_class(status: int) -> str:
    """The word for an exit status; any other status (a signal, 137) is ``killed``."""
    return CLASSES.get(status, "killed")


def message(
    status: int,
    *,
    run_id: str | None = None,
    outcome: str | None = None,
    code: str | None = None,
    text: str = "",
    report_digest: str | None = None,
) -> bytes:
    """The termination message: at most :data:`MESSAGE_LIMIT` bytes of one JSON object.

    ``outcome`` and ``code`` come from the component and are cut to :data:`NAME_LIMIT`
    characters; ``text`` (an error message) gets whatever room is left.
    """
    body: dict[str, object] = {"class": exit_class(status), "exit": status}
    if run_id is not None:
        body["run"] = run_id
    if outcome is not None:
        body["outcome"] = outcome[:NAME_LIMIT]
    if code is not None:
        body["code"] = code[:NAME_LIMIT]
    if report_digest is not None:
        body["reportDigest"] = report_digest
    encoded = _encode(body)
    if text:
        # The longest prefix of the text that fits (escapes make the bytes vary per
        # character, so search for it).
        low, high = 0, min(len(text), MESSAGE_LIMIT)
        while low < high:
            mid = (low + high + 1) // 2
            if len(_encode({**body, "message": text[:mid]})) <= MESSAGE_LIMIT:
                low = mid
            else:
                high = mid - 1
        if low:
            encoded = _encode({**body, "message": text[:low]})
    assert len(encoded) <= MESSAGE_LIMIT
    return encoded


def _encode(body: dict[str, object]) -> bytes:
    return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()


def write(path: Path, data: bytes) -> str | None:
    """Write the message; a path that cannot be written is reported, not fatal (the
    verdict is in the log and the exit status anyway). Returns the problem, if any."""
    try:
        with path.open("wb") as file:
            file.write(data)
    except OSError as exc:
        return f"cannot write the termination message to {path}: {exc.strerror}"
    return None
