"""The source stays readable in a sitting: no module over FILE_LINES lines, no function over COMPLEXITY.

Complexity is radon's cyclomatic complexity (one plus each branch: ``if``, loop, ``except``, boolean operator,
comprehension). The few that are over today are listed with their size now; an entry may only shrink, and goes
once its function is under budget, so the list is the work left (issue 55).
"""

from __future__ import annotations

import pathlib

from radon.complexity import cc_visit
from radon.visitors import Class

SRC = pathlib.Path(__file__).parent.parent / "src" / "feedline"
FILE_LINES = 600
COMPLEXITY = 20

# module (relative to src/feedline) -> lines now, for modules over FILE_LINES
LONG_MODULES: dict[str, int] = {}

# "module:function" -> complexity now, for functions over COMPLEXITY
COMPLEX_FUNCTIONS: dict[str, int] = {}


def _modules():
    return sorted(SRC.rglob("*.py"))


def _relative(path: pathlib.Path) -> str:
    return path.relative_to(SRC).as_posix()


def function_complexities(source: str) -> dict[str, int]:
    """{"Class.method" or "function": cyclomatic complexity} for every function and method in ``source``."""
    found = {}
    for block in cc_visit(source):
        for function in block.methods if isinstance(block, Class) else [block]:
            found[function.fullname] = max(found.get(function.fullname, 0), function.complexity)
    return found


def test_no_module_grows_past_its_line_budget():
    lines = {_relative(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}
    over = {m: n for m, n in lines.items() if n > LONG_MODULES.get(m, FILE_LINES)}
    assert not over, (f"modules over their budget ({FILE_LINES} lines, or the size listed in LONG_MODULES): {over}; "
                      "split a module by job rather than raise a number")
    done = sorted(m for m, n in LONG_MODULES.items() if lines.get(m, 0) <= FILE_LINES)
    assert not done, f"under {FILE_LINES} lines now (or gone): take them out of LONG_MODULES: {done}"


def test_no_function_grows_past_its_complexity_budget():
    found = {}
    for path in _modules():
        for name, complexity in function_complexities(path.read_text(encoding="utf-8")).items():
            found[f"{_relative(path)}:{name}"] = complexity
    over = {f: c for f, c in found.items() if c > COMPLEX_FUNCTIONS.get(f, COMPLEXITY)}
    assert not over, (f"functions over their complexity budget ({COMPLEXITY}, or the figure in COMPLEX_FUNCTIONS): "
                      f"{over}; extract the parts with a job of their own")
    done = sorted(f for f, c in COMPLEX_FUNCTIONS.items() if found.get(f, 0) <= COMPLEXITY)
    assert not done, f"within {COMPLEXITY} now (or gone): take them out of COMPLEX_FUNCTIONS: {done}"


def test_the_complexity_budget_counts_branches():
    # the counter the budget rests on: a function with three ifs and an `and` is 5
    source = "def f(a, b):\n    if a and b:\n        return 1\n    if a:\n        return 2\n    if b:\n        return 3\n    return 4\n"
    assert function_complexities(source) == {"f": 5}
    assert function_complexities("class C:\n    def m(self):\n        return 1\n") == {"C.m": 1}
