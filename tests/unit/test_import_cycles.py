"""No import cycle among stragglerlab's modules, counting every import wherever it sits.

A cycle hidden behind a function-level import (or an `if TYPE_CHECKING:` one) still ties
two modules into one: neither can be read, tested or moved without the other, and the
import order decides what works. The graph here is built from the source with `ast`, over
`stragglerlab/` and the folders it links (`analysis/`, `workloads/`, `injectors/`,
`figures/`), with an edge for every `import` and `from ... import` anywhere in a module:
at the top, inside functions, under `TYPE_CHECKING`. Nothing is allow-listed.

Edges go to the module an import names, as import-linter counts them: `from a.b import c`
is an edge to `a.b.c` when that is a module, else to `a.b`; parent packages that Python
initialises on the way are not edges.

The floors: every module sits under an import-linter contract and on one floor of the
floors contract in pyproject.toml, each floor one package (not a list of its modules).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "stragglerlab"


def module_files(root: Path = ROOT / PACKAGE, name: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package, by dotted name, through the linked folders."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(folder).relative_to(root).parts
        if rel and not (Path(folder) / "__init__.py").exists():
            dirs[:] = []  # not a package (e.g. config/): nothing importable below
            continue
        for f in files:
            if not f.endswith(".py"):
                continue
            parts = (name, *rel) + (() if f == "__init__.py" else (f[:-3],))
            found[".".join(parts)] = Path(folder) / f
    return found


def _imported(node: ast.AST, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """The modules of `modules` that one import statement of `module` names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        if sub in modules:
            out.append(sub)
        elif target in modules:
            out.append(target)
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its source."""
    files = module_files()
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        graph[module] = {t for node in ast.walk(tree)
                         for t in _imported(node, module, is_package, modules) if t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _path(graph: dict[str, set[str]], members: list[str]) -> str:
    """One cycle through the component's first module, for the failure message."""
    inside = set(members)
    start = members[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & inside):
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(prev[chain[-1]])
                    return " -> ".join([*reversed(chain), start])
                if child not in prev:
                    prev[child] = node
                    nxt.append(child)
        frontier = nxt
    return " <-> ".join(members)


def test_no_import_cycle_even_behind_a_function_level_import():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles (counting function-level and TYPE_CHECKING imports):\n" \
        + "\n".join(_path(graph, c) for c in found)


def test_the_graph_covers_the_linked_folders_and_every_kind_of_import():
    graph = import_graph()
    for module in ("stragglerlab.cli", "stragglerlab.analysis.whatif",
                   "stragglerlab.workloads.engine", "stragglerlab.injectors.registry",
                   "stragglerlab.figures.registry", "stragglerlab.importers.kineto"):
        assert module in graph, module
    # A function-level import is an edge: stragglerlab.open imports the API when called.
    assert "stragglerlab.api" in graph["stragglerlab"]


def test_the_check_catches_a_cycle_behind_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import helper\n")
    (pkg / "b.py").write_text("def helper():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .d import D\n")
    (pkg / "d.py").write_text("from . import c\nclass D: ...\n")
    files = module_files(pkg, "pkg")
    modules = set(files)
    graph = {m: {t for node in ast.walk(ast.parse(p.read_text()))
                 for t in _imported(node, m, p.name == "__init__.py", modules) if t != m}
             for m, p in files.items()}
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    assert _path(graph, ["pkg.a", "pkg.b"]) == "pkg.a -> pkg.b -> pkg.a"


def contracts() -> list[dict]:
    """pyproject's import-linter contracts."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]


def contract_modules() -> set[str]:
    """Every module or package pyproject's import-linter contracts name."""
    named = set()
    for contract in contracts():
        for key in ("layers", "source_modules", "forbidden_modules", "modules"):
            for entry in contract.get(key, []):
                named |= {part.strip() for part in entry.split("|")}
    return {n for n in named if n.startswith(PACKAGE + ".")}


def uncovered(modules, named: set[str]) -> list[str]:
    """The modules that no contract names, by themselves or through a package above them."""
    return sorted(m for m in modules if m != PACKAGE and m != f"{PACKAGE}.__main__"
                  and not any(m == n or m.startswith(n + ".") for n in named))


def test_every_module_is_under_a_contract():
    """A module no import-linter contract names could import anything: every module of the
    package is held by one (itself or a package above it)."""
    assert uncovered(module_files(), contract_modules()) == []


def test_the_coverage_check_finds_a_module_in_no_contract():
    named = {"stragglerlab.analysis", "stragglerlab.trace.schema"}
    assert uncovered(["stragglerlab.analysis.whatif", "stragglerlab.trace.schema",
                      "stragglerlab.loose", "stragglerlab.analysisx"], named) == [
        "stragglerlab.analysisx", "stragglerlab.loose"]


def floors() -> list[str]:
    """The floors: the packages (or, at the top, root modules) the layers of the floors
    contract name, top to bottom."""
    (floor_contract,) = [c for c in contracts() if c["name"].startswith("Floors:")]
    return [part.strip() for entry in floor_contract["layers"] for part in entry.split("|")]


def not_one_package(named: list[str]) -> list[str]:
    """Floors named below the package's first level: a list of modules, not a floor."""
    return sorted(n for n in named if n.count(".") != 1 or not n.startswith(PACKAGE + "."))


def test_every_module_is_on_a_floor():
    """Every module of the package sits on one floor of the floors contract (its package,
    or itself for the root modules at the top): a new module in no floor's package, say a
    root module beside the floors, fails here until it is given one."""
    assert uncovered(module_files(), set(floors())) == []


def test_each_floor_is_one_package_not_a_list_of_modules():
    assert not_one_package(floors()) == []
    assert {"stragglerlab.util", "stragglerlab.trace", "stragglerlab.scenarios",
            "stragglerlab.method", "stragglerlab.run"} <= set(floors())


def test_the_floor_check_finds_a_floor_given_as_modules():
    assert not_one_package(["stragglerlab.trace", "stragglerlab.trace.schema",
                            "stragglerlab.trace.meta", "other.pkg"]) == [
        "other.pkg", "stragglerlab.trace.meta", "stragglerlab.trace.schema"]
