"""The documentation site builds in strict mode, and every public name has a documented reference entry.

The site is mkdocs.yml at the repository root: the user guide from docs/*.md,
the API reference generated from the docstrings (docs/reference/*.md).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_MODULES = [
    "feedline",
    "feedline.vision",
    "feedline.audio",
    "feedline.adapters.torch",
    "feedline.adapters.keras",
    "feedline.adapters.jax",
    "feedline.adapters.tf",
    "feedline.adapters.stats_callbacks",
    "feedline.testing",
]
# Public names whose docstring has no `>>>` example yet: this list may only shrink (a new name comes with one).
WITHOUT_EXAMPLE = {
    "feedline.from_ray_dataset",  # an example would start a Ray cluster inside the doctest run
    "feedline.vision.from_torchvision",  # torchvision is not among the test dependencies
    # Constants: doctest runs no attribute docstring, so an example there could drift unchecked.
    "feedline.vision.IMAGENET_MEAN", "feedline.vision.IMAGENET_STD", "feedline.vision.MODES",
    "feedline.adapters.keras.LoaderCheckpoint",  # needs Keras on JAX or PyTorch, set before Keras is first imported
    "feedline.testing.read_ahead",  # needs a remote store (tests/test_remote_store.py runs one on a local S3 server)
}
DIRECTIVE = re.compile(r"^::: (\S+)", re.MULTILINE)


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def reference_entries() -> set[str]:
    """The objects the reference pages document (``::: path`` lines)."""
    return {m for page in (ROOT / "docs" / "reference").glob("*.md") for m in DIRECTIVE.findall(page.read_text())}


def public_names() -> dict[str, str]:
    """Every public name (``module.name``) -> the path of the object it is (where it is defined)."""
    names = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) or callable(value):
                names[f"{module_name}.{name}"] = f"{value.__module__}.{value.__qualname__}"
            else:  # a constant: documented where it is assigned (an attribute docstring)
                found = [e for e in reference_entries() if e.endswith(f".{name}") and e.startswith(module_name)]
                names[f"{module_name}.{name}"] = found[0] if found else f"{module_name}.{name}"
    return names


def docstrings() -> dict[str, str]:
    """The docstring of every reference entry, as the site reads it (statically, with griffe)."""
    griffe = pytest.importorskip("griffe", reason="needs mkdocstrings[python] (pip install -e '.[test]')")
    package = griffe.load("feedline", search_paths=[str(ROOT / "src")], resolve_aliases=False)
    out = {}
    for entry in reference_entries():
        obj = package[entry.removeprefix("feedline.")]
        out[entry] = obj.docstring.value if obj.docstring is not None else ""
    return out


def test_the_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python", reason="needs mkdocstrings[python] (pip install -e '.[test]')")
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "feedline" / "index.html").exists()
    assert (tmp_path / "site" / "benchmarks" / "RESULTS" / "index.html").exists()  # the report, linked from the guide


@pytest.mark.parametrize("page, complaint", [
    ("See [the store](no_such_page.md).", "no_such_page.md"),
    ("See [a heading](other.md#no-such-heading).", "no-such-heading"),
    ("::: feedline.sources._arrays.no_such_function", "no_such_function"),
])
def test_a_broken_link_or_reference_fails_the_strict_build(tmp_path, page, complaint):
    pytest.importorskip("mkdocstrings_handlers.python", reason="needs mkdocstrings[python] (pip install -e '.[test]')")
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())  # the site's own settings, on a two-page site
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n{page}\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n")
    python = config["plugins"][1]["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(ROOT / "src")]
    python["options"]["extensions"] = [str(ROOT / e) for e in python["options"]["extensions"]]
    config.update(docs_dir=str(docs), nav=["index.md", "other.md"], hooks=[str(ROOT / h) for h in config["hooks"]])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert complaint in done.stdout + done.stderr


def test_every_public_name_has_a_reference_entry():
    missing = sorted(name for name, path in public_names().items() if path not in reference_entries())
    assert not missing, f"add a '::: <path>' line for each to docs/reference/*.md: {missing}"


def test_every_public_name_has_a_docstring_and_new_ones_an_example():
    text = docstrings()
    names = public_names()
    undocumented = sorted(name for name, path in names.items() if not text.get(path, "").strip())
    assert not undocumented, f"public names without a docstring: {undocumented}"
    without = {name for name, path in names.items() if ">>>" not in text[path]}
    assert without <= WITHOUT_EXAMPLE, f"give these a '>>>' example in their docstring: {sorted(without - WITHOUT_EXAMPLE)}"
    gained = sorted(WITHOUT_EXAMPLE & (set(names) - without))
    assert not gained, f"these now have an example: take them off WITHOUT_EXAMPLE: {gained}"
