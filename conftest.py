"""Pytest settings shared by the tests and the docstring examples under ``src/`` (``tests/conftest.py`` has the rest)."""

import tempfile

import pytest


@pytest.fixture(autouse=True)
def _examples_write_in_a_test_folder(request, monkeypatch):
    """A docstring example's ``tempfile.mkdtemp()`` lands in pytest's own folder, not in /tmp for good.

    The examples make stores the way a reader would (``tempfile.mkdtemp()``);
    run as tests they left a folder in the temporary directory each time.
    """
    if type(request.node).__name__ == "DoctestItem":
        monkeypatch.setattr(tempfile, "tempdir", str(request.getfixturevalue("tmp_path")))
    yield
