"""No circle in the kit's import graph: a module never needs, directly or through others, a module
that needs it. A circle is what let the metrics, the comm maths, the breakdown and the serving
aggregates each import the others late, inside functions; each stage now has one home
(kit/measure/) that imports the shared maths, never the reverse; and the packages are layers
(LAYERS below), each importing only those beneath it.

The graph is read from the source with `ast`, without importing anything. Every import counts,
at the top of a module, inside a function (an import run late is still a dependency) or under
`if TYPE_CHECKING:` (a type a module names is a dependency too, though it never runs: a loop of
those is the same tangle, hidden). `from a.b import c` depends on the module a.b.c
where there is one, else on a.b; importing a module also runs the `__init__` of each package
around it, so it depends on those packages too, but for the importer's own packages (already
being imported when it runs), unless it imports one of them by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kit

PACKAGE_DIR = Path(kit.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def imported_names(tree: ast.AST, importer: str, is_package: bool) -> set[str]:
    """Every module named by an import in `tree` (relative imports resolved against `importer`)."""
    found: set[str] = set()
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = importer.split(".")[: len(importer.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        pending += ast.iter_child_nodes(node)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the kit modules it depends on."""
    known = modules()
    graph = {}
    for name, path in known.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        if path.name == "__init__.py":
            own.add(name)
        needed = set()
        for imported in imported_names(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py"):
            if imported not in known:
                continue
            parts = imported.split(".")
            needed |= {imported} | ({".".join(parts[:i]) for i in range(1, len(parts))} - own)
        graph[name] = needed & set(known) - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each group of modules that need one another (Tarjan's strongly connected
    components), as the path module -> ... -> module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [path_around(graph, group) for group in groups]


def path_around(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest circle from the group's first module back to it, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for other in sorted(graph[node] & group):
                if other == start:
                    return paths[node] + [start]
                if other not in paths:
                    paths[other] = paths[node] + [other]
                    following.append(other)
        frontier = following
    raise AssertionError(f"no circle through {sorted(group)}")


def test_the_import_graph_has_no_circle():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(circle) for circle in found)


def test_a_circle_is_found_and_shown():
    graph = {"kit.a": {"kit.b"}, "kit.b": {"kit.c"}, "kit.c": {"kit.a"}, "kit.d": {"kit.a"}}
    assert circles(graph) == [["kit.a", "kit.b", "kit.c", "kit.a"]]


def test_imports_inside_functions_and_type_checking_ones_count():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from kit.report.loaded_run import LoadedRun\n"
        "def f():\n    from kit.measure.metrics import summarize\n"
    )
    found = imported_names(tree, "kit.x", False)
    assert found == {
        "typing",
        "typing.TYPE_CHECKING",
        "kit.report.loaded_run",
        "kit.report.loaded_run.LoadedRun",
        "kit.measure.metrics",
        "kit.measure.metrics.summarize",
    }


def test_a_module_depends_on_the_packages_around_what_it_imports():
    graph = import_graph()
    assert {"kit.rundir", "kit.rundir.schema"} <= graph["kit.measure.training"]
    assert "kit.measure" not in graph["kit.measure.training"]  # its own package


# The kit's packages (and its loose modules) from the bottom up: each imports only from its own
# layer or those below it. Records and their definitions sit low (the run directory's schema is
# read by everything above); measuring (kit.measure) sits below the code that runs workloads,
# serves and places processes, which sits below the runner; the report reads runs and sits above
# the runner, which therefore never loads it; the command line is on top.
LAYERS = (
    ("kit.units", "kit.credentials", "kit.child_process", "kit.output", "kit.files"),
    ("kit.manifest", "kit.cache"),
    ("kit.theory",),
    ("kit.host",),
    ("kit.comm",),
    ("kit.plan",),
    ("kit.rundir",),
    ("kit.measure",),
    ("kit.reference",),
    ("kit.images",),
    ("kit.workloads",),
    ("kit.serve",),
    ("kit.execute",),
    ("kit.runner",),
    ("kit.console",),
    ("kit.report",),
    ("kit.cli", "kit.__main__"),
)


def layer_of(module: str) -> int | None:
    """The layer a module belongs to: that of the package (or loose module) it is, or is in."""
    for depth, layer in enumerate(LAYERS):
        if any(module == name or module.startswith(name + ".") for name in layer):
            return depth
    return None


def test_every_module_is_in_a_layer():
    assert not sorted(module for module in import_graph() if module != "kit" and layer_of(module) is None)


def test_no_layer_imports_one_above_it():
    graph = import_graph()
    upward = sorted(
        f"{module} -> {needed}"
        for module, needs in graph.items()
        for needed in needs
        if module != "kit" and needed != "kit" and (layer_of(needed) or 0) > (layer_of(module) or 0)
    )
    assert not upward, "imports of a layer above:\n" + "\n".join(upward)


def test_importing_the_runner_loads_nothing_of_the_report():
    graph = import_graph()
    reached, pending = set(), ["kit.runner"]
    while pending:
        module = pending.pop()
        if module not in reached:
            reached.add(module)
            pending += graph[module]
    assert not {module for module in reached if module.startswith("kit.report")}


def test_an_upward_import_is_found():
    assert layer_of("kit.report.page_one") > layer_of("kit.measure.training") > layer_of("kit.rundir.schema")


def test_the_host_checks_know_the_workloads_without_importing_them():
    assert not {name for name in import_graph()["kit.plan.fit"] if name.startswith("kit.workloads")}
