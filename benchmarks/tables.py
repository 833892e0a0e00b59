"""Markdown tables for the benchmark scripts' output, so every script prints the same layout.

A script gives the header, the rows (already formatted cells) and one
letter per column for the alignment; the text goes to stdout and, pasted,
into RESULTS.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["markdown_table"]

_RULES = {"l": "---", "r": "---:", "c": ":---:"}


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A markdown table: ``header``, a rule, then one line per row.

    Args:
        header: the column titles.
        rows: the cells of each row, already formatted (``str()`` is applied).
        align: one letter per column, ``l`` (left), ``r`` (right) or ``c``
            (centre); missing letters mean left.

    Raises:
        ValueError: a row has another number of cells than the header, or
            ``align`` is longer than the header or has another letter.

    >>> print(markdown_table(["loader", "samples/s"], [["serial", "1,200"]], "lr"))
    | loader | samples/s |
    |---|---:|
    | serial | 1,200 |
    """
    if len(align) > len(header) or set(align) - set(_RULES):
        raise ValueError(f"markdown_table(align={align!r}): give at most {len(header)} letters of l, r, c")
    rule = "|" + "|".join(_RULES[a] for a in align.ljust(len(header), "l")) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    for row in rows:
        cells = [str(c) for c in row]
        if len(cells) != len(header):
            raise ValueError(f"markdown_table: row {cells} has {len(cells)} cells, the header {len(header)}; give one cell per column")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
