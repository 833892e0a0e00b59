"""``feedline inspect``: what a store holds, from its manifest and a few samples; ``--verify`` checks every byte."""

from __future__ import annotations

import json

import numpy as np

from ._checksum import ALGORITHM, has_checksums
from ._convert import human_bytes
from ._errors import StoreError
from ._reader import Store
from ._structure import describe
from ._verify import verify_store

__all__ = ["inspect_store", "run_inspect"]


def _value(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, (bytes, str)):
        shown = value[:24]
        return f"{type(value).__name__}[{len(value)}] {shown!r}{'...' if len(value) > 24 else ''}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_value(v) for v in value) + ")"
    return f"{type(value).__name__} {value!r}"


def inspect_store(path, samples: int = 3) -> str:
    """A readable description of the store at ``path``: manifest, fields, sizes and the first samples.

    Raises:
        StoreError: see `feedline.store.open_store`.

    >>> import numpy as np, tempfile, os
    >>> from feedline.store import StoreWriter
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> path = os.path.join(tmp.name, "s.store")
    >>> with StoreWriter(path) as w:
    ...     w.write({"x": np.zeros((3, 2, 2), np.float32), "y": [1, 2, 3]})
    >>> text = inspect_store(path, samples=1)
    >>> "samples:   3" in text, "[0] {'x': float32[2, 2], 'y': int 1}" in text
    (True, True)
    """
    store = Store(path)
    m = store.manifest
    on_disk = sum(entry["bytes"] for part in m["files"] for entry in part["files"].values())
    n = len(store)
    lines = [
        f"store:     {store.path}",
        f"format:    {m['format']} version {m['format_version']}, created {m.get('created', '?')} by {m.get('created_by', '?')}",
        f"samples:   {n}",
        f"on disk:   {human_bytes(on_disk)} in {len(m['files'])} part(s) x {len(m['groups'])} group(s) "
        f"({', '.join(m['groups'])}); {human_bytes(on_disk / max(n, 1))} per sample",
        f"structure: {describe(m['structure']) if m['structure'] else 'none (empty store)'}",
        f"checksums: {ALGORITHM} per record batch (check them with feedline inspect --verify)" if has_checksums(m) else
        f"checksums: none (format version {m['format_version']}, written before feedline recorded them; "
        "write the store again to add them)",
        "fields:",
    ]
    for spec in store.fields.values():
        lines.append(f"  {spec.name:<16} {spec.describe()}")
    meta = {k: v for k, v in (m.get("meta") or {}).items() if k != "skipped"}
    skipped = (m.get("meta") or {}).get("skipped")
    if meta:
        lines.append("meta:")
        for key, value in meta.items():
            text = json.dumps(value)
            lines.append(f"  {key}: {text if len(text) <= 100 else text[:97] + '...'}")
    if skipped:
        lines.append(f"  skipped: {len(skipped)} files (first: {skipped[0][0]}: {skipped[0][1]})")
    if n and samples:
        lines.append(f"first {min(samples, n)} samples:")
        for i in range(min(samples, n)):
            lines.append(f"  [{i}] {_value(store[i])}")
    return "\n".join(lines)


def run_inspect(args) -> int:
    """The ``feedline inspect`` command: prints `inspect_store` (or the manifest as JSON with ``--json``).

    With ``--verify``, checks every file against the store's checksums first
    (`verify_store`), prints what it found, and exits with status 1 if
    anything is damaged or the store has no checksums to check; the
    description follows only for an intact store.
    """
    try:
        if args.verify:
            report = verify_store(args.store)
            print(report)
            if not report.ok:
                return 1
        if args.json:
            store = Store(args.store)
            print(json.dumps(store.manifest, indent=2))
        else:
            print(inspect_store(args.store, samples=args.samples))
    except StoreError as e:
        raise SystemExit(f"feedline inspect: {e}") from e
    return 0
