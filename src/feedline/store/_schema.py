"""One schema for a source made of several Arrow or Parquet files, checked when the source is made.

Every file's schema comes from its metadata (a Parquet footer, an Arrow
file's schema message), so no data is read. A column must have the same
Arrow type in every file that is read; the one difference accepted is a
column of Arrow's ``null`` type (pandas and pyarrow write one for a column
that is all missing in that file): its rows read as ``None``, which is
what a null reads as in any other file. Any other change of type, and a
column that some files lack, is refused with both files named. Details:
docs/store.md, "Reading what you already have".
"""

from __future__ import annotations

from ._deps import pyarrow
from ._errors import StoreError

__all__ = ["common_columns"]


def _fits(kept, other) -> bool:
    """Whether a column of type ``other`` reads as one of type ``kept`` does: equal, or all-null."""
    pa = pyarrow()
    return kept.equals(other) or pa.types.is_null(other) or pa.types.is_null(kept)


def common_columns(schemas: list, names: list[str], columns, what: str) -> list[str]:
    """The columns to read from files whose Arrow schemas are ``schemas`` (``names[i]`` names file ``i``).

    Args:
        schemas: one `pyarrow.Schema` per file, in the source's order.
        names: the files, as messages show them.
        columns: the columns asked for (a name, a list, or None for all
            columns of the files, which must then all hold the same ones).
        what: the factory's call, for messages (``"from_parquet(...)"``).

    Raises:
        StoreError: a column asked for that no file has; a column that one
            file has and another lacks; a column whose type differs between
            two files (both named, with both types and what to do).
    """
    first = schemas[0]
    if columns is None:
        wanted = list(first.names)
    else:
        wanted = [columns] if isinstance(columns, str) else list(columns)
        missing = [c for c in wanted if c not in first.names and not any(c in s.names for s in schemas)]
        if missing:
            raise StoreError(f"{what} has no column(s) {missing}; its columns are {list(first.names)}")
    typed = {}  # column -> (its type where first not null, the file it is from)
    for schema, name in zip(schemas, names):
        for column in wanted:
            _check_present(schema, name, column, schemas, names, what)
            kind = schema.field(column).type
            seen = typed.get(column)
            if seen is None or (pyarrow().types.is_null(seen[0]) and not pyarrow().types.is_null(kind)):
                typed[column] = (kind, name)
            elif not _fits(seen[0], kind):
                raise StoreError(
                    f"{what}: column {column!r} is {seen[0]} in {seen[1]!r} but {kind} in {name!r}; the files must agree "
                    f"on each column's type: write them with one schema (pyarrow: table.cast(schema) before "
                    f"write_table), or leave the column out with columns=[...]"
                )
        if columns is None:
            extra = [c for c in schema.names if c not in wanted]
            if extra:
                raise StoreError(
                    f"{what}: {name!r} has column(s) {extra} that {names[0]!r} lacks; pass columns=[...] naming the "
                    f"columns every file holds (e.g. columns={wanted}), or write the files with one schema"
                )
    return wanted


def _check_present(schema, name: str, column: str, schemas: list, names: list[str], what: str) -> None:
    if column in schema.names:
        return
    holder = next(n for s, n in zip(schemas, names) if column in s.names)
    raise StoreError(
        f"{what}: column {column!r} is in {holder!r} but not in {name!r}; the files must hold the same columns: write them "
        f"with one schema, or leave the column out with columns=[...]"
    )
