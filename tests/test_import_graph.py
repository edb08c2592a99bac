"""The import graph of rl/ has no cycle, counting imports inside functions too: a module can be read, tested and
changed knowing only the modules below it (one run does not know the searches and copies that run it; a transport does
not know the workers it runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "rl").rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The rl modules that `name` imports anywhere in its text: `from rl.x import y` is rl.x.y where that is a module,
    else rl.x; a package's own __init__ is not counted for its submodules (Python runs it, but it is above them)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imported(name, path, set(mods)) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (a depth-first search that meets a module still on its path)."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_imports_inside_functions_and_from_packages():
    graph = import_graph()
    assert "rl.parallel.learner" in graph["rl.trainer"]  # imported inside make_trainer
    assert "rl.tune.study" in graph["rl.tune.search"]  # `from rl.tune import study`: the module, not the package


def test_the_import_graph_of_rl_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("graph, cyclic", [({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
                                           ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, False)])
def test_find_cycle(graph, cyclic):
    assert (find_cycle(graph) is not None) == cyclic
