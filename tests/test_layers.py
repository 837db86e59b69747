"""The layer map of ``runner/``: which part may import which, and no import cycles.

Layers point one way. Read from the top::

    launch                              (the console script: a warm runner, else cli)
    cli
    batch  policy  k8s  doctor          (k8s reads batch's store: pod logs into a batch)
    flows  config                       (config: the host configuration the flows run by)
    api
    host   package                      (siblings: package never imports host)
    contracts                           (Schema/1, both contract kinds, port matching)
    sandbox                             (backends: they know images, never FLOW packages)
    protocol                            (Run/1 with no I/O)
    json1

``component/`` is the SDK that component images carry (stdlib only): it stands beside the
map and imports protocol, json1 and itself (images carry those too). ``warm/`` (the warm
runner's client, server and wire, stdlib only) stands beside it too: ``launch`` and
``cli`` use it, it imports only ``runner``. ``runner`` itself (``__version__``),
``report`` (the RunReport model), ``durations`` (``30s``, ``2m``) and ``outputs`` (files
written for the user) are leaves any layer above them may read.

Only ``runner/sandbox/`` speaks to an engine: no other part imports docker-py or requests
(the engine's library and its transport); what they need of an engine is the backend
interface's (``runner.sandbox.base.SandboxEngine``).

Every import counts: top level, inside functions (an import put in a function to dodge a
cycle is still a dependency) and under ``TYPE_CHECKING``. An import of ``a.b.c`` also
runs the ``__init__`` of ``a.b``, so a cycle through a package's ``__init__`` is a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "runner"

_BELOW_API = frozenset(
    {"runner.host", "runner.package", "runner.contracts", "runner.sandbox"}
    | {"runner.protocol", "runner.json1", "runner"}
)
_API = _BELOW_API | {"runner.api", "runner.report"}
_API |= {"runner.durations", "runner.exits", "runner.outputs"}
_FLOWS = _API | {"runner.flows", "runner.config"}

ALLOWED: Mapping[str, frozenset[str]] = {
    # part of runner/ -> the parts it may import (itself always)
    "runner": frozenset(),
    "runner.json1": frozenset(),
    "runner.component": frozenset({"runner.protocol", "runner.json1"}),
    "runner.protocol": frozenset({"runner.json1"}),
    "runner.sandbox": frozenset({"runner.protocol", "runner.json1", "runner"}),
    "runner.contracts": frozenset({"runner.protocol", "runner.json1", "runner"}),
    "runner.package": frozenset(
        {"runner.contracts", "runner.sandbox", "runner.protocol", "runner.json1", "runner"}
    ),
    "runner.host": frozenset(
        {"runner.contracts", "runner.sandbox", "runner.protocol", "runner.json1", "runner"}
    ),
    "runner.report": frozenset({"runner.json1"}),
    "runner.durations": frozenset(),
    "runner.exits": frozenset(),
    "runner.outputs": frozenset(),
    "runner.api": _BELOW_API | {"runner.report"},
    "runner.config": frozenset(
        {"runner.host", "runner.protocol", "runner.json1", "runner", "runner.durations"}
    ),
    "runner.flows": _API | {"runner.config"},
    "runner.batch": _FLOWS,
    "runner.policy": _FLOWS,
    "runner.doctor": _FLOWS,
    "runner.k8s": _FLOWS | {"runner.batch"},
    "runner.cli": _FLOWS
    | {"runner.batch", "runner.policy", "runner.k8s", "runner.doctor", "runner.warm"},
    "runner.warm": frozenset({"runner", "runner.exits"}),
    "runner.launch": frozenset({"runner", "runner.warm", "runner.cli", "runner.exits"}),
}
"""The layer map as data: a part may import only itself and the parts its row names."""

KNOWN_EXCEPTIONS: Mapping[tuple[str, str], str] = {}
"""(importer, imported) pairs that break the map today, each with the fix that ends it."""


class Import(NamedTuple):
    importer: str
    imported: str
    line: int


def module_names(root: Path = RUNNER) -> dict[str, Path]:
    """Every module of the tree under ``root``: dotted name -> file (packages by name)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, source: str, is_package: bool, known: set[str]) -> Iterator[Import]:
    """Every import of a module of ``known`` in ``source``, wherever it stands.

    ``from a import b`` imports the module ``a.b`` when there is one, else ``a``; a
    relative import is resolved against the importer's package.
    """
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target not in known:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield Import(name, submodule if submodule in known else target, node.lineno)


ENGINE_LIBRARIES = frozenset({"docker", "requests"})
"""docker-py and its HTTP transport: imported under ``runner/sandbox/`` and nowhere else."""


def engine_imports(source: str) -> Iterator[tuple[str, int]]:
    """Every import of an :data:`ENGINE_LIBRARIES` module in ``source``, wherever it stands."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if name.partition(".")[0] in ENGINE_LIBRARIES:
                yield name, node.lineno


def all_imports() -> list[Import]:
    modules = module_names()
    known = set(modules)
    found: set[Import] = set()
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        found.update(imports_of(name, path.read_text(encoding="utf-8"), is_package, known))
    return sorted(found)


def part_of(module: str) -> str:
    """The row of :data:`ALLOWED` a module falls under: ``runner.<first name>``."""
    return ".".join(module.split(".")[:2])


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(imports: list[Import]) -> dict[str, set[str]]:
    """Module -> the modules importing it runs: the module and each ``__init__`` above it.

    The importer's own packages are left out: they are running already, and an
    ``__init__`` that imports its own submodules is no cycle.
    """
    graph: dict[str, set[str]] = {}
    for item in imports:
        running = {item.importer, *_ancestors(item.importer)}
        targets = {item.imported, *_ancestors(item.imported)} - running
        graph.setdefault(item.importer, set()).update(targets)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(_a_cycle(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _a_cycle(graph: Mapping[str, set[str]], members: set[str]) -> list[str]:
    """A path that closes on itself inside one strongly connected component."""
    start = min(members)
    path, seen = [start], {start}
    while True:
        nxt = min(m for m in graph[path[-1]] if m in members)
        if nxt in seen:
            return [*path[path.index(nxt) :], nxt]
        path.append(nxt)
        seen.add(nxt)


def breaches(imports: list[Import]) -> list[str]:
    found = []
    for item in imports:
        importer, imported = part_of(item.importer), part_of(item.imported)
        if importer == imported or imported in ALLOWED[importer]:
            continue
        if (item.importer, item.imported) in KNOWN_EXCEPTIONS:
            continue
        allowed = ", ".join(sorted(ALLOWED[importer])) or "nothing"
        found.append(
            f"{item.importer} (line {item.line}) imports {item.imported}: "
            f"{importer} may import only {allowed}"
        )
    return found


# ----- the tests -------------------------------------------------------------------------


def test_every_part_of_runner_is_on_the_map() -> None:
    parts = {part_of(name) for name in module_names()}
    assert parts - ALLOWED.keys() == set(), "add a row to ALLOWED for the new part"
    assert ALLOWED.keys() - parts == set(), "a row of ALLOWED names no part of runner/"


def test_every_import_follows_the_layer_map() -> None:
    assert breaches(all_imports()) == []


def test_runner_has_no_import_cycle() -> None:
    found = cycles(import_graph(all_imports()))
    assert [" -> ".join(cycle) for cycle in found] == []


def test_only_the_sandbox_imports_the_engines_library() -> None:
    found = [
        f"{name} (line {line}) imports {library}: ask runner.sandbox's backend interface"
        for name, path in module_names().items()
        if part_of(name) != "runner.sandbox"
        for library, line in engine_imports(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_engine_import_scanner_sees_every_kind_of_import() -> None:
    source = (
        "import docker\n"
        "from docker.types import Mount\n"
        "def late():\n"
        "    import requests.exceptions\n"
        "import dockerfile, runner.docker\n"
        "from . import docker\n"
    )
    assert list(engine_imports(source)) == [
        ("docker", 1),
        ("docker.types", 2),
        ("requests.exceptions", 4),
    ]


def test_every_known_exception_still_happens() -> None:
    """An exception that no longer happens is removed, so the map is the whole truth."""
    pairs = {(item.importer, item.imported) for item in all_imports()}
    assert set(KNOWN_EXCEPTIONS) - pairs == set()


def test_the_scanner_sees_every_kind_of_import() -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import runner.json1\n"
        "from . import sibling\n"
        "from ..other import thing\n"
        "if TYPE_CHECKING:\n"
        "    from runner.api import Execution\n"
        "def late():\n"
        "    from runner.host import channels\n"
    )
    known = {"runner", "runner.json1", "runner.a", "runner.a.sibling", "runner.other"}
    known |= {"runner.api", "runner.host", "runner.host.channels"}
    found = [(i.imported, i.line) for i in imports_of("runner.a.b", source, False, known)]
    assert sorted(found) == [
        ("runner.a.sibling", 4),
        ("runner.api", 7),
        ("runner.host.channels", 9),
        ("runner.json1", 3),
        ("runner.other", 5),
    ]


def test_a_cycle_through_a_package_init_is_found() -> None:
    """The shape of ``host.capabilities -> binding -> host.channels -> schema1`` (issue 13)."""
    imports = [
        Import("runner.h.cap", "runner.h.cap.binding", 1),
        Import("runner.h.cap.binding", "runner.h.channels", 1),
        Import("runner.h.channels", "runner.h.cap.schema1", 1),
        Import("runner.b", "runner.b.x", 1),  # an __init__ importing its own submodule
    ]
    assert cycles(import_graph(imports)) == [
        ["runner.h.cap", "runner.h.cap.binding", "runner.h.channels", "runner.h.cap"]
    ]
