"""The feedline store: decode once, read many times.

A store is a directory of Apache Arrow IPC files plus a JSON manifest
(format: `feedline.store._format`). Fixed-shape arrays are read back as
read-only NumPy views of the memory-mapped files (no decode, no copy);
variable-size fields come back as arrays, bytes or str; per-field encodings
(``raw``, ``zstd``, ``lz4``, ``jpeg:Q``, ``png``) are chosen when writing.
Other tools (pyarrow, Polars, DuckDB, Hugging Face ``datasets``) read the
files directly. pyarrow is imported on first use: ``pip install
'feedline[store]'``. See docs/store.md.

>>> import numpy as np, tempfile, os, feedline as fl
>>> from feedline.store import StoreWriter, open_store
>>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
>>> path = os.path.join(tmp.name, "train.store")
>>> with StoreWriter(path, meta={"made_by": "doctest"}) as w:
...     w.write({"image": np.zeros((6, 8, 8, 3), np.uint8), "label": np.arange(6)})
>>> store = open_store(path)
>>> store[2]["image"].shape, int(store[2]["label"]), store.meta
((8, 8, 3), 2, {'made_by': 'doctest'})
>>> [b["label"].tolist() for b in fl.from_store(path).batch(4)]
[[0, 1, 2, 3], [4, 5]]
"""

from ._errors import StoreError
from ._fields import FieldSpec
from ._foreign import from_hf_dataset, from_parquet
from ._format import FORMAT_VERSION
from ._from_store import from_store
from ._images import EncodedImage
from ._open import open_store
from ._reader import Store
from ._verify import VerifyReport, verify_store
from ._writer import StoreWriter

__all__ = [
    "FORMAT_VERSION",
    "EncodedImage",
    "FieldSpec",
    "Store",
    "StoreError",
    "StoreWriter",
    "VerifyReport",
    "from_hf_dataset",
    "from_parquet",
    "from_store",
    "open_store",
    "verify_store",
]
