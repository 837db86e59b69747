"""Durations as people write them: ``30s``, ``2m``, ``1h``, ``500ms`` or plain seconds.

One syntax for every deadline; apart from :mod:`runner.config` so that reading a
``--deadline`` does not import pydantic.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


def parse_duration(text: str) -> float:
    """``30s``, ``2m``, ``1h``, ``500ms`` or plain seconds, as seconds (> 0)."""
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration; use e.g. 30s, 2m, 1h or 500ms")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    return float(match.group(1)) * scale
