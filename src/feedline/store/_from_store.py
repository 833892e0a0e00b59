"""`from_store`: a pipeline over a store (its path or URL opened by `_open.open_path`)."""

from __future__ import annotations

from ..pipeline._pipeline import Pipeline
from ._open import open_path

__all__ = ["from_store"]


def from_store(path, *, verify: bool = False, storage_options: dict | None = None, cache_dir=None,
               cache_limit=None, **remote) -> Pipeline:
    """A pipeline over the samples of a store written by ``feedline convert`` or `StoreWriter`.

    Samples come in the structure they were written (e.g. ``{"image": ...,
    "label": ...}``). Without per-sample steps, ``batch()`` gathers rows in
    bulk straight into the batch (shared memory in process workers); with
    ``map``, each worker reads its samples from its own memory map. The
    pipeline pickles as the store's path and manifest, so it works with
    every backend, ``shuffle`` and ``shard``. ``verify=True`` checks what
    each worker reads against the store's checksums (see `open_store`); a
    damaged record batch stops the epoch with an error naming the file
    and its rows.

    A URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, any fsspec
    protocol; ``pip install 'feedline[remote]'``) is read through a local
    cache of its files, fetched ahead in the epoch's order
    (docs/store.md, "Remote stores").

    Args:
        path: the store directory, or its URL.
        verify: check reads against the store's checksums.
        storage_options: for a URL: fsspec filesystem options (credentials,
            ``endpoint_url``...); they travel to workers with the pipeline,
            while credentials from the environment are read by each worker.
        cache_dir: for a URL: the local cache (default
            ``$FEEDLINE_CACHE_DIR`` or ``~/.cache/feedline/stores``).
        cache_limit: for a URL: bytes (or ``"20GiB"``) the cache may take (default 50 GiB).
        **remote: for a URL: ``concurrency`` (downloads in flight, 8),
            ``retries`` (per download, 4), ``read_ahead`` (True).

    Raises:
        StoreError: see `open_store`; for a URL also a download that failed
            after its retries, naming the file (and, in a pipeline, the sample).
        TypeError: remote options given with a local path.

    >>> import numpy as np, tempfile, os, feedline as fl
    >>> from feedline.store import StoreWriter
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> path = os.path.join(tmp.name, "digits.store")
    >>> with StoreWriter(path) as w:
    ...     w.write((np.arange(10, dtype=np.uint8).reshape(5, 2), np.arange(5)))
    >>> [b[1].tolist() for b in fl.from_store(path).batch(2)]
    [[0, 1], [2, 3], [4]]
    """
    return Pipeline(open_path(path, verify, dict(remote, storage_options=storage_options, cache_dir=cache_dir,
                                             cache_limit=cache_limit)))
