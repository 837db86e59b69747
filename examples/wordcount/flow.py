#!/usr/bin/env python3
"""wordcount: count lines, words and bytes of the text files under the ``source`` attachment.

The totals go into the output and, as a report, into scratch. The flow also tries to
write into ``source`` (declared read-only) and reports the outcome instead of hiding it.
"""

import asyncio
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from runner.component import OperationError, RunContext, RunResult, handle

REPORT_NAME = "wordcount-report.txt"
PROBE_NAME = ".wordcount-write-probe"


@dataclass
class Figures:
    lines: int = 0
    words: int = 0
    bytes: int = 0

    def add(self, other: "Figures") -> None:
        self.lines += other.lines
        self.words += other.words
        self.bytes += other.bytes


@dataclass
class Tree:
    per_file: dict[str, Figures]
    skipped: list[str]

    def total(self) -> Figures:
        total = Figures()
        for figures in self.per_file.values():
            total.add(figures)
        return total


async def count(ctx: RunContext) -> RunResult:
    source = ctx.attachments.get("source")
    if source is None:
        raise OperationError("EXECUTION_FAILED", "the host granted no attachment named source")
    tree = await asyncio.to_thread(count_tree, Path(source.path))
    report = Path(ctx.scratch) / REPORT_NAME
    report.write_text(render(tree), encoding="utf-8")
    output = {
        "files": len(tree.per_file),
        **asdict(tree.total()),
        "per_file": {name: asdict(figures) for name, figures in tree.per_file.items()},
        "skipped": tree.skipped,
        "report": str(report),
        "source_write": try_write(Path(source.path)),
    }
    return RunResult("done", output)


def count_tree(root: Path) -> Tree:
    tree = Tree({}, [])
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        for name in sorted(files):
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            figures = count_file(path)
            if figures is None:
                tree.skipped.append(relative)
            else:
                tree.per_file[relative] = figures
    return tree


def count_file(path: Path) -> Figures | None:
    """Lines, words and bytes of a regular UTF-8 text file; ``None`` for anything else."""
    if path.is_symlink() or not path.is_file():
        return None
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\0" in text:
        return None
    return Figures(lines=len(text.splitlines()), words=len(text.split()), bytes=len(data))


def render(tree: Tree) -> str:
    def row(name: str, figures: Figures) -> str:
        return f"{name:40} {figures.lines:>7} {figures.words:>7} {figures.bytes:>9}"

    lines = [f"{'file':40} {'lines':>7} {'words':>7} {'bytes':>9}"]
    lines.extend(row(name, figures) for name, figures in tree.per_file.items())
    lines.append(row("total", tree.total()))
    lines.extend(f"skipped (not text): {name}" for name in tree.skipped)
    return "\n".join(lines) + "\n"


def try_write(source: Path) -> str:
    """Try to create a file in the read-only source and say exactly what happened."""
    probe = source / PROBE_NAME
    try:
        probe.write_text("wordcount was here\n", encoding="utf-8")
    except OSError as error:
        return f"refused: {error}"
    probe.unlink()
    return f"allowed: created and removed {probe}"


handle(count)
