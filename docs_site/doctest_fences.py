"""Griffe extension: the ``>>>`` examples of a docstring render as code on the site.

Docstrings here hold their examples as bare doctest lines (pytest runs them
with ``--doctest-modules``). Outside an ``Examples:`` section Markdown would
read them as text (``[[0, 1], [2, 3]]`` even as a link reference), so each
run of lines from a ``>>>`` to the next blank line is fenced as ``pycon``.
"""

import griffe


def fence_doctests(text: str) -> str:
    """Wrap every doctest block (a ``>>>`` line up to the next blank line) of ``text`` in a ``pycon`` fence."""
    out, in_block, fenced, indent = [], False, False, ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        if not fenced and not in_block and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            in_block = True
        elif in_block and not stripped:
            out.append(f"{indent}```")
            in_block = False
        out.append(line)
    if in_block:
        out.append(f"{indent}```")
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    """Fence the doctest blocks of every object's docstring (see the module docstring)."""

    def on_instance(self, *, node, obj, agent, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
