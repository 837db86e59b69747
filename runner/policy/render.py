"""Rows out: a table for a terminal (rich), JSON for policy-as-code tools, JUnit for CI."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from xml.etree import ElementTree

from runner.policy.battery import Finding

_STYLE = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow", "ERROR": "bold magenta"}


WIDE = 160
"""Terminal columns from which the table shows every view in a column of its own."""


def table(title: str, rows: Sequence[Finding], width: int | None = None) -> None:
    """The rows as a table on standard output, fitted to ``width`` columns (default: the
    terminal's). From :data:`WIDE` on every view has a column; below, the guarantee, what
    was seen, and for a row that did not pass its reason and evidence share one column.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    width = width or shutil.get_terminal_size().columns
    grid = Table(title=title, show_lines=False, expand=False)
    if width >= WIDE:
        for column in ("row", "guarantee", "declared", "engine", "observed", "verdict"):
            grid.add_column(column, overflow="fold")
        grid.add_column("evidence / reason", overflow="fold", ratio=2)
        for row in rows:
            detail = row.evidence + (f" — {row.reason}" if row.reason else "")
            grid.add_row(
                *map(escape, (row.id, row.guarantee, row.declared, row.engine, row.observed)),
                f"[{_STYLE[row.verdict]}]{row.verdict}[/]", escape(detail),
            )  # fmt: skip
    else:
        grid.add_column("verdict", no_wrap=True)
        grid.add_column("row", overflow="fold")
        grid.add_column("guarantee; what was seen", overflow="fold")
        for row in rows:
            lines = [f"{row.guarantee}; seen: {row.observed}"]
            if row.verdict != "PASS":
                lines += [f"reason: {row.reason}"] if row.reason else []
                lines += [f"evidence: {row.evidence}"] if row.evidence else []
            grid.add_row(
                f"[{_STYLE[row.verdict]}]{row.verdict}[/]", escape(row.id),
                escape("\n".join(lines)),
            )  # fmt: skip
    console = Console(width=width, soft_wrap=False)
    console.print(grid)
    console.print(summary(rows), markup=False)
    if width < WIDE:
        console.print("(declared and engine views: --json, or a terminal of 160 columns)")


def summary(rows: Iterable[Finding]) -> str:
    counts = Counter(row.verdict for row in rows)
    return ", ".join(f"{counts[v]} {v}" for v in ("PASS", "FAIL", "SKIP", "ERROR") if v in counts)


def as_json(rows: Sequence[Finding]) -> str:
    """A JSON array with one object per row, its keys always the same and in one order."""
    return json.dumps([row.as_json() for row in rows], indent=1) + "\n"


def junit(suite: str, rows: Sequence[Finding], seconds: float) -> bytes:
    """A JUnit XML report: one testcase per row; FAIL a failure, ERROR an error, SKIP skipped."""
    counts = Counter(row.verdict for row in rows)
    root = ElementTree.Element("testsuites")
    element = ElementTree.SubElement(
        root, "testsuite", name=suite, tests=str(len(rows)), failures=str(counts["FAIL"]),
        errors=str(counts["ERROR"]), skipped=str(counts["SKIP"]), time=f"{seconds:.3f}",
    )  # fmt: skip
    for row in rows:
        case = ElementTree.SubElement(
            element, "testcase", classname=f"{suite}.{row.group}", name=row.id, time="0"
        )
        text = f"guarantee: {row.guarantee}\ndeclared: {row.declared}\nengine: {row.engine}\n"
        text += f"observed: {row.observed}\nevidence: {row.evidence}"
        if row.verdict in ("FAIL", "ERROR"):
            tag = "failure" if row.verdict == "FAIL" else "error"
            ElementTree.SubElement(case, tag, message=row.reason).text = text
        elif row.verdict == "SKIP":
            ElementTree.SubElement(case, "skipped", message=row.reason)
        ElementTree.SubElement(case, "system-out").text = text
    data: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return data
