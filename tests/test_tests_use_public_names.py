"""Tests talk to feedline through its public names and `feedline.testing`, never through private modules or attributes.

A private module (a path segment starting with ``_``, as in ``feedline.engine._trial``), a private name imported
from feedline, or an attribute starting with ``_`` read on anything but the test's own ``self``/``cls`` ties a test
to the inside, so the inside cannot change without breaking it. A test that needs a window into the machinery adds
a small documented function to `feedline.testing` instead.
"""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).parent

# Files not checked at all until they are converted (issue 55: no one is converting them now); each goes once it is.
BEING_CONVERTED: set[str] = set()

# Not converted yet (issue 55): the private uses each file still has, which may only shrink. Each needs what these
# tests cannot make on their own: rules tested alone on private values (the tail's cut, task size, the depth tuner,
# the store's GIL-free pieces, the batch-array pool's contents), the process-executor split under way (the
# listener), the store's disk-full test (a full disk cannot be made without root), the GPU resampler's weights, or a
# decision on testing a private codec directly (the worker wire format). The backend trial's hand-over test settles a trial by hand (`_settle`, in
# the threads' alone phase, on processes three times as fast): reaching that verdict through `submit`/`wait` needs
# real thread tasks measured alone against faster scripted processes, or a decision on settling a trial from a test.
NOT_CONVERTED_YET = {
    "test_backend_trial.py": 1,
    "test_batch_memory.py": 2,
    "test_gpu_paths.py": 2,
    "test_profiler.py": 2,
    "test_scale.py": 2,
    "test_store.py": 5,
    "test_tail_pieces.py": 3,
    "test_task_size.py": 2,
    "test_wire.py": 3,
}

# Private names of the standard library and of namedtuples, which are theirs, not feedline's; and Lightning's own
# `_is_dataloader_shuffled`, the check its trainer runs on a loader, which tests/test_checkpoints_loader_attributes.py
# calls to show that Lightning reads the loader as shuffled or not.
NOT_FEEDLINES = {"_asdict", "_current_frames", "_exit", "_fields", "_getframe", "_is_dataloader_shuffled", "_make",
                 "_replace"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _feedline_module(module: str | None) -> bool:
    return module is not None and module.split(".")[0] == "feedline"


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each private feedline module or name imported, and each private attribute read, in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and _feedline_module(node.module):
            if any(_private(part) for part in node.module.split(".")):
                found.append((node.lineno, f"imports the private module {node.module}"))
            found += [(node.lineno, f"imports the private name {node.module}.{a.name}") for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"imports the private module {a.name}") for a in node.names
                      if _feedline_module(a.name) and any(_private(part) for part in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in NOT_FEEDLINES:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, f"reads the private attribute {ast.unparse(node)}"))
    return sorted(set(found))


def test_no_test_imports_a_private_feedline_module_or_reads_a_private_attribute():
    offences = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name in BEING_CONVERTED:
            continue
        uses = private_uses(path.read_text(encoding="utf-8"))
        if len(uses) > NOT_CONVERTED_YET.get(path.name, 0):
            offences += [f"tests/{path.name}:{line}: {what}" for line, what in uses]
    assert not offences, ("tests must use public names and feedline.testing (add a documented window there if one is "
                          "missing):\n" + "\n".join(offences))


def test_the_files_not_converted_yet_are_listed_with_what_they_still_use():
    counts = {name: len(private_uses((TESTS / name).read_text(encoding="utf-8"))) for name in NOT_CONVERTED_YET}
    assert counts == NOT_CONVERTED_YET, "a file has fewer private uses now: lower its count (or drop it from the list)"


def test_the_check_finds_each_kind_of_private_use():
    source = (
        "import feedline.engine._trial\n"
        "from feedline.store._convert import convert\n"
        "from feedline.store import _writer\n"
        "x = pipe._source\n"
        "self._mine = 1\n"
        "os._exit(0)\n"
        "from feedline import testing\n"
        "y = pipe.source.__class__\n"
    )
    assert [line for line, _ in private_uses(source)] == [1, 2, 3, 4]
