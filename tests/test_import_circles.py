"""No module of the package imports, directly or through others, a module that imports it back.

An import written inside a function counts: it hides a circle from Python's loader (the circle
only bites when that function first runs), not from a reader following the imports.  Read with
``ast`` from the source: every ``import`` / ``from ... import`` anywhere in a file is an edge, and
Tarjan's algorithm finds the strongly connected groups (a circle is a group of two or more).
A package's ``__init__`` re-exports its modules, so an edge to a package counts only when the
name imported is a module of it (``from . import x``)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "allocator_ref"


def _modules() -> dict:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(name: str, path: Path, modules: dict):
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                yield full if full in modules else module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value            # importlib.import_module("a.b"): an import all the same


def import_graph() -> dict:
    modules = _modules()
    return {name: {t for t in _targets(name, path, modules) if t in modules and t != name}
            for name, path in modules.items()}


def circles(graph: dict) -> list:
    """Tarjan's strongly connected components of two or more modules (iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root), on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt), on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_the_finder_finds_a_circle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"x": {"y"}, "y": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    # CachingAllocator opens the course's device inside __init__ when none is given
    assert "allocator_ref.device" in graph["allocator_ref.caching.allocator"]


def test_the_graph_sees_imports_by_importlib():
    source = 'import importlib\nimportlib.import_module("allocator_ref.labs.check")\n'
    path = Path(__file__).with_name("_importlib_probe.py")
    try:
        path.write_text(source)
        assert "allocator_ref.labs.check" in set(_targets("x.y", path, {"allocator_ref.labs.check": path}))
    finally:
        path.unlink()


def test_the_package_has_no_import_circle():
    found = circles(import_graph())
    assert not found, "modules that import each other (function-level imports included):\n" + \
        "\n".join(" <-> ".join(group) for group in found)
