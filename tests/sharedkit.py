"""Where the read-only spec and conformance corpus are: ``../shared`` beside the checkout.

``FLOW_SHARED_DIR`` points elsewhere. A missing file is an error, never a skip: the
conformance vectors are part of what the tests check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SHARED = Path(
    os.environ.get("FLOW_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared"
)


def shared_path(relative: str) -> Path:
    """The path of a shared file, which must exist."""
    path = SHARED / relative
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: point FLOW_SHARED_DIR at the shared/ checkout")
    return path


def load_shared(relative: str) -> Any:
    """A shared JSON file, decoded."""
    return json.loads(shared_path(relative).read_text(encoding="utf-8"))
