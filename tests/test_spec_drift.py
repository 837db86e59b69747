"""The spec data copied into this repository still equals its upstream originals.

Upstream is the read-only ``shared/`` checkout beside this one (``FLOW_SHARED_DIR``
points elsewhere). A clone with nothing beside it has no upstream to compare with: then
this is the one test that skips, and it says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from speckit import COPIES, ROOT

SHARED = Path(os.environ.get("FLOW_SHARED_DIR") or ROOT.parent / "shared")


def test_every_spec_copy_equals_upstream() -> None:
    if not SHARED.is_dir():
        pytest.skip(f"no upstream spec at {SHARED} (set FLOW_SHARED_DIR to compare)")
    differ = [
        f"{copy.relative_to(ROOT)} differs from {SHARED / upstream}"
        for copy, upstream in COPIES.items()
        if not (SHARED / upstream).is_file()
        or copy.read_bytes() != (SHARED / upstream).read_bytes()
    ]
    assert not differ, "; ".join(differ) + ": copy the upstream file over the repository's"


def test_every_copy_is_there() -> None:
    missing = [str(copy.relative_to(ROOT)) for copy in COPIES if not copy.is_file()]
    assert not missing
