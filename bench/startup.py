"""Benchmark: what a fresh ``flow-runner`` process spends on imports, two checkouts side by side.

``--base DIR`` is a second checkout (``git worktree add DIR COMMIT``, the commit before a
change); this checkout is the other. Every figure comes from fresh processes of the same
interpreter with ``PYTHONPATH`` at one checkout, the two interleaved round by round (which
starts first alternates), so that both see the same load:

- the import table: ``python -X importtime`` of a real ``flow-runner exec --quiet IMAGE``.
  A module's own time is charged to the group of its nearest importer outside the
  standard library (``http.client`` imported by urllib3 counts for docker-py), so the
  groups add up to the whole import time; ``interpreter`` is the start-up's own (site,
  encodings, an editable install's finder). Median per group over the rounds.
  ``-X importtime`` does not time a module imported through ``importlib.import_module``
  (the command's module, the sandbox backend's): their own few milliseconds are missing,
  the modules they import are counted.
- whole commands: the wall time of ``flow-runner exec --quiet IMAGE`` (a real run),
  ``exec --help``, ``--help`` and ``--version`` (the console script's entry, ``main()``),
  and of ``docker run --rm -i --network none IMAGE`` fed the same frame, as
  bench/exec_overhead.py's (a): the exec rows also give the median per-round ratio to it.

Both checkouts have their bytecode compiled first (``compileall``), as an installed package
has it: where ``PYTHONDONTWRITEBYTECODE`` is set, every module of a checkout would
otherwise be compiled from source in every process.

    python bench/startup.py --base /work/wt/startup-base [--runs 9] [--image IMAGE]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from rawrun import docker_run

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; sys.argv[0] = 'flow-runner'; from runner.cli.app import main; main()"
COMMANDS: dict[str, tuple[str, ...]] = {
    "exec (a run)": ("exec", "--quiet"),
    "exec --help": ("exec", "--help"),
    "--help": ("--help",),
    "--version": ("--version",),
}
GROUPS = {
    "typer/click": ("typer", "click", "shellingham"),
    "rich (help)": ("rich", "markdown_it", "mdurl", "pygments"),
    "pydantic": ("pydantic", "pydantic_core", "annotated_types", "typing_inspection"),
    "docker-py (requests, urllib3)": (
        *("docker", "requests", "urllib3"),
        *("charset_normalizer", "idna", "certifi"),
    ),
    "anyio (asyncio)": ("anyio", "sniffio"),
    "orjson": ("orjson",),
}
OWN_ROWS = frozenset({"cli", "config", "report", "flows"})
"""Parts of runner/ with a row of their own; the rest (api, host, protocol, sandbox,
package, contracts, json1) is one row."""
SHARED = frozenset({"typing_extensions", "encodings", "site", "sitecustomize"})
"""Not a group of their own: charged to whoever imported them first."""
_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|( *)(\S+)")
Node = tuple[int, str, list["Node"]]
"""One import: its own microseconds, the module, the imports it made (post-order)."""


def group_of(module: str) -> str | None:
    """The group a module's time counts for, or ``None``: its importer's."""
    top, _, rest = module.partition(".")
    if top == "runner":
        part = rest.partition(".")[0]
        return f"runner.{part}" if part in OWN_ROWS else "runner: the run's own modules"
    for group, tops in GROUPS.items():
        if top in tops:
            return group
    if top in sys.stdlib_module_names or top.startswith("_") or top in SHARED:
        return None
    return "other"


def import_groups(report: str) -> dict[str, float]:
    """Milliseconds per group in one ``-X importtime`` report (stderr)."""
    pending: list[tuple[int, Node]] = []  # (depth, node) still waiting for their importer
    for line in report.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        depth = len(match.group(2)) // 2
        children = [node for d, node in pending if d == depth + 1]
        pending = [(d, node) for d, node in pending if d != depth + 1]
        pending.append((depth, (int(match.group(1)), match.group(3), children)))
    totals: dict[str, float] = collections.defaultdict(float)

    def charge(node: Node, inherited: str) -> None:
        micros, module, children = node
        group = group_of(module) or inherited
        totals[group] += micros / 1000
        for child in children:
            charge(child, group)

    for _, node in pending:
        charge(node, "interpreter")
    return dict(totals)


class Ran(NamedTuple):
    wall: float
    """Seconds from start to exit."""
    cpu: float
    """User and system seconds of the process (its own, not the engine's): steadier than
    the wall time on a loaded machine."""
    stderr: str


def run(tree: Path, *args: str, importtime: bool = False) -> Ran:
    """One ``flow-runner ARGS`` with ``tree`` on the path."""
    flags = ["-X", "importtime"] if importtime else []
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *flags, "-c", ENTRY, *args],
        env=env,
        cwd=tree,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{tree}: flow-runner {' '.join(args)}: {stderr[-2000:]}")
    return Ran(elapsed, usage.ru_utime + usage.ru_stime, stderr)


def alternating(trees: list[Path], rounds: int) -> Iterator[list[Path]]:
    for number in range(rounds):
        yield trees if number % 2 == 0 else trees[::-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--runs", type=int, default=9, help="rounds")
    parser.add_argument("--image", default="flow-runner/fake-component:latest")
    args = parser.parse_args()
    trees = [args.base.resolve(), ROOT]
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "runner")], check=True)
    groups: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    walls: dict[tuple[Path, str], list[Ran]] = collections.defaultdict(list)
    docker: list[float] = []
    for tree in trees:  # warm-up: page caches, the image's package cache
        run(tree, *COMMANDS["exec (a run)"], args.image)
    docker_run(args.image, None, ["--network", "none"])
    for order in alternating(trees, args.runs):
        docker.append(docker_run(args.image, None, ["--network", "none"]))
        for tree in order:
            groups[tree].append(
                import_groups(run(tree, "exec", "--quiet", args.image, importtime=True).stderr)
            )
        for name, command in COMMANDS.items():
            extra = (args.image,) if name == "exec (a run)" else ()
            for tree in order:
                walls[tree, name].append(run(tree, *command, *extra))

    base, after = trees
    names = sorted({g for tree in trees for row in groups[tree] for g in row})
    rows = {tree: {g: [row.get(g, 0.0) for row in groups[tree]] for g in names} for tree in trees}
    for tree in trees:
        rows[tree]["total"] = [sum(row.values()) for row in groups[tree]]
    median = {tree: {g: statistics.median(v) for g, v in rows[tree].items()} for tree in trees}
    least = {tree: {g: min(v) for g, v in rows[tree].items()} for tree in trees}
    print(f"{args.runs} rounds; before: {base}, after: {after}\n")
    print("| imports of `exec IMAGE`, ms: median (min) | before | after |")
    print("|---|---:|---:|")
    for g in [*sorted(names, key=lambda g: -median[base][g]), "total"]:
        if max(median[base][g], median[after][g]) >= 0.5:
            cells = [f"{median[tree][g]:.1f} ({least[tree][g]:.1f})" for tree in trees]
            print(f"| {g} | {cells[0]} | {cells[1]} |")

    print("\n| whole command, median ms | wall before | wall after | after ÷ before "
          "| ÷ docker run, before → after | CPU before | CPU after |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    raw = statistics.median(docker) * 1000
    print(f"| `docker run --rm -i --network none` | {raw:.0f} | {raw:.0f} | | 1.00 | | |")
    for name in COMMANDS:
        b, a = walls[base, name], walls[after, name]
        ratio = statistics.median(x.wall / y.wall for x, y in zip(a, b, strict=True))
        vs = ""
        if name == "exec (a run)":
            before_vs = statistics.median(x.wall / d for x, d in zip(b, docker, strict=True))
            after_vs = statistics.median(x.wall / d for x, d in zip(a, docker, strict=True))
            vs = f"{before_vs:.2f} → {after_vs:.2f}"
        wall = [statistics.median(r.wall for r in b), statistics.median(r.wall for r in a)]
        cpu = [statistics.median(r.cpu for r in b), statistics.median(r.cpu for r in a)]
        print(f"| `{name}` | {wall[0] * 1000:.0f} | {wall[1] * 1000:.0f} | {ratio:.2f} | {vs} "
              f"| {cpu[0] * 1000:.0f} | {cpu[1] * 1000:.0f} |")  # fmt: skip
    print("\nRatios are medians of the per-round ratios (runs made moments apart); CPU is the")
    print("process's own user + system time (the engine's work is not in it).")


if __name__ == "__main__":
    main()
