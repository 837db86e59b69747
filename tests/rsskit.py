"""Peak RSS of a command the tests start: through tests/peak.py (see there for why)."""

from __future__ import annotations

import sys
from pathlib import Path

PEAK = Path(__file__).with_name("peak.py")


def measured(argv: list[str], report: Path) -> list[str]:
    """``argv`` run under the launcher that writes its peak RSS to ``report``."""
    return [sys.executable, str(PEAK), str(report), "--", *argv]


def peak_kib(report: Path) -> int:
    """The peak RSS, in KiB, that the launcher wrote for the command it ran."""
    return int(report.read_text())
