"""The package's imports flow one way: no circle, even counting imports inside functions.

The graph is read from the source with `ast`, not by importing: every
``import``/``from ... import`` of a `feedline` module anywhere in a file
(module level, inside functions, methods and ``try`` blocks; not under
``if TYPE_CHECKING:``, which never runs) is an edge. ``from pkg import name``
is an edge to the submodule ``pkg.name`` where there is one, else to the
module a package's lazy table (``_WHERE``, PEP 562) names for ``name``,
else to ``pkg`` itself; ``fl.name`` after ``import feedline as fl`` is an
edge to the module the table names. A package's own ``__getattr__`` is the
table's mechanism, not an edge; nor is the parent package Python imports
before a submodule (every submodule would otherwise close a circle with it).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted((SRC / "feedline").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _absolute(modules: dict, module: str, level: int, name: str | None) -> str:
    """The module a relative import of ``level`` dots names from inside ``module``."""
    base = module.split(".") if modules[module][1] else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


def _lazy_table(modules: dict, module: str, tree: ast.Module) -> dict[str, str]:
    """A package's ``_WHERE = {"name": ".module"}``: where each lazily exported name lives."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_WHERE" for t in node.targets)):
            return {k.value: _absolute(modules, module, 1, v.value.lstrip(".")) if v.value.startswith(".") else v.value
                    for k, v in zip(node.value.keys, node.value.values)}
    return {}


def _where(tables: dict, package: str, name: str) -> str:
    """The module ``from package import name`` loads: followed through lazy tables (``feedline`` -> ``.sources`` -> ...)."""
    while name in tables.get(package, {}):
        package = tables[package][name]
    return package


def _run_time_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def import_graph() -> dict[str, dict[str, int]]:
    """``{module: {module it imports: line of the first such import}}`` over `src/feedline`."""
    modules = _modules()
    trees = {m: ast.parse(path.read_text(encoding="utf-8"), str(path)) for m, (path, _) in modules.items()}
    tables = {m: t for m in trees if (t := _lazy_table(modules, m, trees[m]))}
    graph = {}
    for module, tree in trees.items():
        edges: dict[str, int] = {}
        aliases: dict[str, str] = {}
        nodes = list(_run_time_nodes(tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    edges.setdefault(alias.name, node.lineno)
                    aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(modules, module, node.level, node.module) if node.level else node.module
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        edges.setdefault(f"{source}.{alias.name}", node.lineno)
                    else:
                        edges.setdefault(_where(tables, source, alias.name), node.lineno)
        for node in nodes:
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if node.attr in tables.get(aliases[node.value.id], {}):
                    edges.setdefault(_where(tables, aliases[node.value.id], node.attr), node.lineno)
        graph[module] = {m: line for m, line in edges.items() if m in modules and m != module}
    return graph


def find_circle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One circle of ``graph`` as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (circle := visit(target)):
                return circle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (circle := visit(module)):
            return circle
    return None


def test_imports_form_no_circle_even_inside_functions():
    graph = import_graph()
    assert len(graph) > 100  # the walk found the package
    circle = find_circle(graph)
    if circle is not None:
        steps = [f"{a} -> {b} (line {graph[a][b]})" for a, b in zip(circle, circle[1:])]
        raise AssertionError("import circle in src/feedline:\n  " + "\n  ".join(steps)
                             + "\nMove what both need into a lower module, or have the lower one be told "
                               "(a hook it is given) instead of importing the upper one.")


def test_the_checker_finds_a_circle_through_a_function_level_import():
    graph = {"a": {"b": 1}, "b": {"c": 3}, "c": {"a": 7}, "d": {"a": 2}}
    assert find_circle(graph) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b": 1}, "b": {}}) is None


def _modules_after(code: str, **env: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``code`` (with ``env`` added to its environment)."""
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=120, env=env, check=True)
    return run.stdout.split()


_DESCRIBE = ("import feedline as fl\n"
             "def f(x):\n    return x + 1\n"
             "pipe = fl.from_sequence(range(10)).map(f).batch(2)\n"
             "print(pipe)\n")


def _machinery(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(("feedline.engine", "feedline.backends"))]


def test_describing_a_pipeline_imports_no_engine_and_no_backend():
    """Workers that start as fresh interpreters: nothing to start ahead, on any number of cores."""
    loaded = _modules_after(_DESCRIBE, FEEDLINE_FORKSERVER="0", PYTHON_CPU_COUNT="16")
    assert "feedline.pipeline._pipeline" in loaded
    assert _machinery(loaded) == [], f"describing a pipeline imported {_machinery(loaded)}"


def test_a_start_after_set_up_is_scheduled_without_importing_the_backend():
    """On few cores the automatic choice's fork server is due after the user's set-up: describing imports neither."""
    code = ("from feedline import _startup\n"
            "_startup.speculation = _startup.Speculation(_startup.StartPolicy(after_idle=3600.0), cores=lambda: 2)\n"
            + _DESCRIBE
            + "import threading\n"
              "assert 'feedline-forkserver-ahead' in [t.name for t in threading.enumerate()], 'no start scheduled'\n")
    loaded = _modules_after(code)
    assert _machinery(loaded) == [], f"describing a pipeline imported {_machinery(loaded)}"
