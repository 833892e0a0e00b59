"""The global random generators of a worker process, seeded per batch from ``(seed, epoch, first sample)``.

User code often draws from the generators each library keeps per process
(`random`, NumPy's legacy ``np.random.*``, torch's default CPU generator)
instead of the ``rng`` a map function can take. Process workers fork from
one zygote and Ray actors start alike, so without this they would draw the
same values as each other and again in every epoch. A worker of its own
(process, Ray actor) therefore reseeds them before each batch (each task,
without ``batch()``): draws are distinct across workers, batches and
epochs, and a run with the same seed and the same task grid repeats them.
Only process-wide state of a feedline worker is touched: threads and the
calling thread run in the user's process, whose generators feedline
leaves alone (docs/vocabulary.md, "Augmentation that is the same every time").
"""

from __future__ import annotations

import hashlib
import random
import sys

import numpy as np

__all__ = ["seed_global_generators"]

_TAG = b"feedline globals"  # blake2b's personalisation (16 bytes): these seeds apart from other uses of the seed


def seed_global_generators(seed: int, epoch: int, phase: int, index) -> None:
    """Seed `random`, ``np.random`` and (if this process imported it) torch from ``(seed, epoch, phase, index)``.

    ``index``: the first sample of the batch (an int, or a stream's
    ``(shard, position)``); ``phase``: 0 before its samples are read, 1
    before its ``map_batch`` steps. torch is never imported here, and only
    its CPU generator is seeded (``torch.manual_seed`` also queues every
    device's, at many times the cost, for workers that rarely use one).

    >>> seed_global_generators(7, 0, 0, 5); a = (random.random(), float(np.random.rand()))
    >>> seed_global_generators(7, 0, 0, 5); a == (random.random(), float(np.random.rand()))
    True
    """
    index = tuple(int(i) for i in index) if isinstance(index, tuple) else int(index)
    key = repr((int(seed), int(epoch), phase, index)).encode()
    words = hashlib.blake2b(key, digest_size=16, person=_TAG).digest()  # stable across runs, cheaper than a SeedSequence
    random.seed(int.from_bytes(words[:8], "little"))
    np.random.seed(np.frombuffer(words, dtype="<u4"))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.manual_seed(int.from_bytes(words[8:], "little"))
