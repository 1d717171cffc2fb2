"""No import cycles in the package: a static import graph over the source, read with `ast`.

Every import counts, wherever it stands: at module level, inside a function (a "late"
import), under ``TYPE_CHECKING`` or in a ``try``. A cycle broken by a late import is still
a cycle: the two modules cannot be read, tested or split apart one at a time. The graph's
nodes are modules (``wtwin.daemon.config``), mapped to files by pyproject's package-dir.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"wtwin.compiled": "compiled", "wtwin.daemon": "daemon", "wtwin.detect": "detect",
            "wtwin.emitters": "emitters", "wtwin.offline": "offline", "wtwin.sinks": "sinks"}


def _modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    out = {}
    for package, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import mod`` imports the module pkg.mod where there is one (pkg's
            # __init__ has run by then: a parent package is no edge); a name: pkg itself
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # wtwin.x.y.Name -> wtwin.x.y
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
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
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


class TestImportGraph:
    def test_no_module_is_reentered(self):
        """No import cycle, late imports included."""
        assert _cycles(_graph()) == []

    def test_the_emitters_never_import_the_daemon(self):
        """The trainer side owns the wire format; the daemon depends on it, not back."""
        graph = _graph()
        wrong = {(m, t) for m, ts in graph.items() if _package_of(m) == "wtwin.emitters"
                 for t in ts if _package_of(t) in ("wtwin.daemon", "wtwin.offline", "wtwin.sinks")}
        assert wrong == set()

    def test_detect_imports_no_daemon_store_or_sink(self):
        graph = _graph()
        wrong = {(m, t) for m, ts in graph.items() if _package_of(m) == "wtwin.detect"
                 for t in ts if _package_of(t) in ("wtwin.daemon", "wtwin.sinks", "wtwin.offline")}
        assert wrong == set()


class TestTheCheckItself:
    def test_a_late_import_cycle_is_found(self):
        """Two modules that import each other, one of them inside a function."""
        assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]

    def test_a_longer_cycle_is_one_component(self):
        assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]

    def test_a_function_level_import_counts(self, tmp_path):
        source = tmp_path / "m.py"
        source.write_text("def f():\n    from .other import g\n    return g\n")
        assert _imported("wtwin.sinks.m", source, {"wtwin.sinks.other": source}) == {"wtwin.sinks.other"}


if __name__ == "__main__":
    for cycle in _cycles(_graph()):
        print(" <-> ".join(cycle))
    sys.exit(0)
