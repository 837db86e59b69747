"""The names of Run/1 and their grammar: methods, request ids, LocalNames, and the bounds.

The lowest protocol module (it imports nothing of runner), read by all that must agree on
a name. Regexes are anchored with ``\\A``/``\\Z``: Python's ``$`` matches before a final
newline, ECMA-262's (the schema's) does not.
"""

from __future__ import annotations

import re
from typing import Final, TypeGuard

JSONRPC_VERSION: Final = "2.0"
RUN_PROTOCOL: Final = "run/1"

FLOW_RUN: Final = "flow/run"
FLOW_RUN_CHILD: Final = "flow/run-child"
CAPABILITY_CALL: Final = "capability/call"
REQUEST_CANCEL: Final = "request/cancel"
CHANNEL_CREATE: Final = "channel/create"
CHANNEL_SUBSCRIBE: Final = "channel/subscribe"
CHANNEL_SEND: Final = "channel/send"
CHANNEL_NEXT: Final = "channel/next"
CHANNEL_CLOSE: Final = "channel/close"
CHANNEL_RELEASE: Final = "channel/release"

CHANNEL_METHODS: Final[frozenset[str]] = frozenset(
    {
        CHANNEL_CREATE,
        CHANNEL_SUBSCRIBE,
        CHANNEL_SEND,
        CHANNEL_NEXT,
        CHANNEL_CLOSE,
        CHANNEL_RELEASE,
    }
)
COMPONENT_TO_HOST_METHODS: Final[frozenset[str]] = (
    frozenset({FLOW_RUN_CHILD, CAPABILITY_CALL}) | CHANNEL_METHODS
)
"""Request methods a component may send; anything else from it is answered ``-32601``."""

WIRE_ID_PATTERN: Final = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:/-]*\Z")
"""Request ids, ``operationId``, endpoint and source references (plus ≤128 bytes)."""
LOCAL_NAME_PATTERN: Final = re.compile(r"\A[a-z0-9]+(?:-[a-z0-9]+)*\Z")
"""Package/1 LocalName: slots, capability methods, error names, outcomes (plus ≤64)."""

MAX_WIRE_ID_BYTES: Final = 128
MAX_LOCAL_NAME_CHARS: Final = 64
MAX_ATTACHMENTS: Final = 256
MAX_CHANNEL_ENTRIES: Final = 256
MAX_INTENT_SCALARS: Final = 16_384
MAX_CONTRACT_PATH_CHARS: Final = 4_096


def is_wire_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a request id / operationId / endpoint reference."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_WIRE_ID_BYTES
        and WIRE_ID_PATTERN.match(value) is not None
    )


def is_local_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a Package/1 LocalName."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_LOCAL_NAME_CHARS
        and LOCAL_NAME_PATTERN.match(value) is not None
    )
