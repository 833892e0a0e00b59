"""Class folders (the ImageFolder convention): ``root/<class>/.../file`` is of class ``<class>``.

One rule for ``fl.from_files(root, labels="parent")`` and ``feedline
convert``, so a folder gets the same labels from both: the class is the
folder directly under the root; class names are sorted and numbered from
0, unless every name is an integer (``0/``, ``1/``, ``7/``), which is then
the label itself. A file directly in the root has no class:
``from_files(labels="parent")`` refuses it, ``feedline convert`` leaves it
out and lists it (`outside_class_folders` finds them).
"""

from __future__ import annotations

import os

__all__ = ["AUDIO_EXTENSIONS", "IMAGE_EXTENSIONS", "labels_from_folders", "numbered", "outside_class_folders"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
AUDIO_EXTENSIONS = (".wav", ".flac")


def numbered(names: list) -> tuple[list[int], list[str] | None]:
    """Labels as ints: integers stay as they are; names are sorted and numbered.

    >>> numbered(["dog", "cat", "dog"])
    ([1, 0, 1], ['cat', 'dog'])
    >>> numbered(["3", "0"])
    ([3, 0], None)
    """
    try:
        return [int(n) for n in names], None
    except ValueError:
        classes = sorted(set(names))
        index = {name: i for i, name in enumerate(classes)}
        return [index[n] for n in names], classes


def labels_from_folders(files: list[str]) -> tuple[list[int] | None, list[str] | None]:
    """(label of each file, class names) from the first folder of each relative path.

    ``(None, None)`` when some file is not in a class folder.

    >>> labels_from_folders(["cat/1.png", "dog/2.png", "cat/sub/3.png"])
    ([0, 1, 0], ['cat', 'dog'])
    """
    parts = [f.replace(os.sep, "/").split("/") for f in files]
    if not all(len(p) >= 2 for p in parts):
        return None, None  # not every file is in a class folder: no labels
    return numbered([p[0] for p in parts])


def outside_class_folders(files: list[str]) -> list[str]:
    """The relative paths of ``files`` that lie directly in the root, outside any class folder.

    >>> outside_class_folders(["cat/1.png", "cover.jpg", "dog/2.png"])
    ['cover.jpg']
    """
    return [f for f in files if len(f.replace(os.sep, "/").split("/")) < 2]
