"""`open_store`: a store's path or URL opened as a `Store` (local) or a `RemoteStore` (a URL), for random access.

Apart from the readers so that both sit below it (`_remote` subclasses
`_reader.Store`), and apart from `from_store` so that `pipe.cache()` opens
a store without importing the pipeline facade that `from_store` returns.
"""

from __future__ import annotations

from ._reader import Store
from ._remote import RemoteStore
from ._remote_fs import is_url

__all__ = ["open_path", "open_store"]


def open_store(path, *, verify: bool = False, storage_options: dict | None = None, cache_dir=None,
               cache_limit=None, **remote) -> Store:
    """Open the store at ``path`` (a directory, or a URL: see `from_store`) for random access.

    Checks the manifest and that every file is present with its recorded
    size (a `stat` per file; no data is read).

    Args:
        path: the store directory.
        verify: check every record batch against the checksum its writer
            recorded, the first time this process reads from it (and each
            file's header and footer when it is opened): about the cost of
            reading the batch once more (docs/store.md, "Checksums").

    Raises:
        StoreError: no store there, an incomplete store (no manifest: the
            writer was interrupted), a newer format version, or a missing
            or truncated file; with ``verify``, a store without checksums, and
            (when read) a record batch that does not match its checksum,
            naming the file and the rows. The message says what to do.
        ImportError: pyarrow is missing (``pip install 'feedline[store]'``).
    """
    return open_path(path, verify, dict(remote, storage_options=storage_options, cache_dir=cache_dir, cache_limit=cache_limit))


def open_path(path, verify: bool, remote: dict) -> Store:
    """A `Store` for a local path, a `RemoteStore` for a URL."""
    if is_url(path):
        return RemoteStore(path, verify=verify, **remote)
    given = sorted(k for k, v in remote.items() if v is not None)
    if given:
        raise TypeError(f"{', '.join(given)} apply only to a remote store (a URL such as 's3://bucket/train.store'); "
                        f"{path!r} is a local path: drop them")
    return Store(path, verify=verify)
