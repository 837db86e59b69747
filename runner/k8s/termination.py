"""Exit classes of ``flow-runner job`` and the termination message Kubernetes keeps.

The wrapper's exit statuses are ``exec``'s, plus ``EXIT_WRAPPER`` for a failure of the
wrapper itself: the one status a Job's ``podFailurePolicy`` counts towards a retry.
The termination message is what ``kubectl get pod`` shows without reading the log; the
kubelet truncates it past 4096 bytes, so it is composed to fit.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

from runner import exits

CLASSES = {
    exits.EXIT_DONE: "done",
    exits.EXIT_USAGE: "usage",
    exits.EXIT_CUSTOM_OUTCOME: "outcome",
    exits.EXIT_FAILED: "failed",
    exits.EXIT_INFRASTRUCTURE: "infrastructure",
    exits.EXIT_WRAPPER: "wrapper",
    exits.EXIT_DEADLINE: "deadline",
    exits.EXIT_CANCELLED: "cancelled",
}
FINAL_EXITS = (
    exits.EXIT_USAGE,
    exits.EXIT_CUSTOM_OUTCOME,
    exits.EXIT_FAILED,
    exits.EXIT_DEADLINE,
    exits.EXIT_CANCELLED,
)
"""Outcomes and usage errors: the same pod would answer the same again, so the Job (or
the Indexed Job's index) fails at once, without a retry."""
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
    # the longest prefix of text that fits: escapes make the bytes per character vary
    fits = bisect.bisect_left(
        range(1, min(len(text), MESSAGE_LIMIT) + 1),
        True,
        key=lambda size: len(_encode({**body, "message": text[:size]})) > MESSAGE_LIMIT,
    )
    encoded = _encode({**body, "message": text[:fits]} if fits else body)
    assert len(encoded) <= MESSAGE_LIMIT
    return encoded


def _encode(body: dict[str, object]) -> bytes:
    return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()


def write(path: Path, data: bytes) -> str | None:
    """Write the message; returns the problem instead of raising, since the verdict is in
    the log and the exit status anyway."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        return f"cannot write the termination message to {path}: {exc.strerror}"
    return None
