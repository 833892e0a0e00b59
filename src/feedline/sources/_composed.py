"""`ComposedSource`: the source of ``fl.concatenate``, ``fl.mix`` and ``pipe.repeat(count)``.

A `ComposedSource` is an indexed source over its children (each a pipeline
without ``batch()``). It stays index-based so that every backend, any worker
count and ``resume`` work unchanged:
- the consumer computes the epoch's order from ``(seed, epoch)`` before the
  epoch starts (`ComposedSource.first_order`): which child each position
  draws from, and which of that child's samples, in the child's own order;
- an index names the child and the sample: ``g = (r * n_k + i) * K + k`` for
  sample ``i`` of child ``k`` (of ``K``, with ``n_k`` samples) read in the
  child's epoch ``r`` (a child that is itself composite passes its own index
  instead of ``r * n_k + i``). So ``read(g)`` in any worker reads the sample
  and runs the child's own per-sample steps with the ``rng`` the child would
  give it alone in its epoch ``r``.
Children read in several passes in one epoch (``repeat``, ``mix(stop=
"never")``) use child epochs ``epoch * passes + pass``: each pass has its
own order and its own random draws. See docs/vocabulary.md.
"""

from __future__ import annotations

import copy
import hashlib
import math

import numpy as np

from .._tree import collate_into, flatten, unflatten
from ..pipeline._plan import OrderedSource
from ..worker._kernel import sample_rng
from ._base import Source
from ._input_types import InputTypes

__all__ = ["STOP", "ComposedSource"]

STOP = ("first", "all", "never")
_INT64_MAX = np.iinfo(np.int64).max
_MAX_EPOCH = 1 << 31  # samples in one epoch of a mix: its order is an int64 array (16 GiB at this size)
_MIX_STREAM = 0x6D6978  # spawn key of the mix draws: independent of a shuffle() with the same seed


class ComposedSource(Source, OrderedSource):
    """Samples of child pipelines, in an order computed per epoch (see the module docstring).

    ``len()`` is the number of samples of one epoch (the same for every
    epoch); indices themselves range wider, since they name the child's pass.
    """

    def __init__(self, kind: str, children, *, weights=None, seed: int = 0, seeded: bool | None = None,
                 stop: str | None = None, count: int | None = 1, limit: int | None = None):
        self.kind, self.children = kind, tuple(children)
        self.weights = None if weights is None else tuple(float(w) for w in weights)
        self.seed, self.stop = seed, stop
        self.seeded = kind == "mix" if seeded is None else seeded  # a mix always has a seed (given or drawn)
        self.order_seed = seed if kind == "mix" else None
        self.count = count  # repeat: passes per epoch; None: endless (or as many as `limit` needs)
        self.limit = limit  # repeat().take(n): samples per epoch of an endless repeat
        self.endless = kind == "repeat" and count is None and limit is None
        self.batch_size = None  # endless repeat: its epochs group passes to fill whole batches of this size
        self._sizes = None  # each child's source length, once its source is prepared
        self._readers = None  # what read() needs of each child, looked up once
        self._types = None  # the inputs' dtypes seen in this process (`InputTypes`)
        self._identities = None  # `input_identities`, computed once
        self._length = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_readers": None, "_types": None, "_identities": None}  # rebuilt where it is read

    # -------------------------------------------------------- capabilities
    @property
    def user_code(self) -> bool:
        return any(child.plan.runs_user_code for child in self.children)

    @property
    def needs_ray(self) -> bool:
        return any(child.source.needs_ray for child in self.children)

    def work_identity(self) -> tuple:
        return (self.kind, [(child.source.work_identity(), [op.work_identity() for op in child.plan.part.ops])
                            for child in self.children])

    @property
    def gather(self):
        # Inputs read in bulk and without per-sample steps of their own: so is the composite.
        if all(not child.plan.part.ops and child.source.gather is not None for child in self.children):
            return self._gather
        return None

    def _gather(self, indices, alloc):
        """Each input's rows with its own bulk read, then put in batch order with one ``take`` per field."""
        indices = np.asarray(indices, dtype=np.int64)
        count = len(self.children)
        which = indices % count
        if count == 1 or (len(which) and (which == which[0]).all()):  # one input only (concatenate, mostly): read in place
            k = int(which[0]) if len(which) else 0
            return self._checked(k, self.children[k].source.gather(self._locals(k, indices // count), alloc))
        grouped = np.argsort(which, kind="stable")  # the batch's rows, input by input
        bounds = np.searchsorted(which[grouped], np.arange(count + 1))
        staging = _Staging(len(indices))
        skeletons = []
        for k in range(count):
            rows = grouped[bounds[k]:bounds[k + 1]]
            if len(rows):
                staging.at = int(bounds[k])
                tree = self._checked(k, self.children[k].source.gather(self._locals(k, indices[rows] // count), staging.alloc))
                skeletons.append(repr(flatten(tree)[0]))
        if staging.mismatch or len(set(skeletons)) > 1:
            # Inputs whose samples differ in layout: the sample-by-sample collation names the misfit.
            return collate_into([self.read(int(g)) for g in indices], indices.tolist(), alloc)
        tree = flatten(tree)[0]
        outs = alloc([(a.shape, a.dtype) for a in staging.arrays])
        back = np.argsort(grouped)  # row j of the batch is row back[j] of the staging arrays
        for out, a in zip(outs, staging.arrays):
            np.take(a, back, axis=0, out=out, mode="clip")  # mode="clip": the fast path (see ArraySource.gather)
        return unflatten(tree, outs)

    def _locals(self, k: int, inner: np.ndarray) -> np.ndarray:
        """Indices into child ``k``'s source, from the child part of composite indices."""
        if isinstance(self.children[k].source, OrderedSource):
            return inner
        return inner % self._sizes_now()[k]

    def prepare(self) -> None:
        for child in self.children:
            child._prepare_source()

    # ------------------------------------------------------------- reading
    def _sizes_now(self) -> list:
        if self._sizes is None:
            self.prepare()
            self._sizes = [len(child.source) for child in self.children]
        return self._sizes

    def _inputs(self) -> list:
        """Per child: ``(source, per-sample steps, rng seed, source length or None for a composite)``."""
        if self._readers is None:
            sizes = self._sizes_now()
            self._readers = [(c.source, c.plan.part.ops, c.plan.part.seed, None if isinstance(c.source, OrderedSource) else n)
                             for c, n in zip(self.children, sizes)]
        return self._readers

    def _locate(self, g: int):
        """``(child number, round or None, index in the child's source)`` of index ``g``."""
        k, inner = g % len(self.children), g // len(self.children)
        size = self._inputs()[k][3]
        if size is None:
            return k, None, inner
        r, i = divmod(inner, size)
        return k, r, i

    def read(self, index: int):
        k, r, i = self._locate(int(index))
        source, ops, seed, _ = self._readers[k]
        sample = source.read(i)
        for stage, op in enumerate(ops):
            rng = sample_rng(seed, 0 if r is None else r, i, stage) if op.rng else None
            sample, _ = op.apply(sample, i, rng)
        return self._checked(k, sample)

    def _checked(self, k: int, sample):
        """``sample`` of input ``k``, once its dtypes were compared with the other inputs' (`InputTypes`)."""
        if len(self.children) > 1:
            if self._types is None:
                self._types = InputTypes(self.kind)
            self._types.check(k, sample)
        return sample

    def where(self, index: int) -> str:
        k, r, i = self._locate(int(index))
        inner = self.children[k].source.where(i)
        return f"{self._child_name(k)}, sample {i}" + (f" ({inner})" if inner else "")

    def file_of(self, index: int) -> str | None:
        k, _, i = self._locate(int(index))
        return self.children[k].source.file_of(i)

    def __len__(self) -> int:
        if self._length is None:
            self._length = len(self.first_order(0))
        return self._length

    # ------------------------------------------------------------ ordering
    def _child_lengths(self) -> list:
        """Samples in one epoch of each child (after its own take, skip, shard)."""
        return [len(child.plan.epoch_indices(0)) for child in self.children]

    def quotas(self) -> tuple[np.ndarray, int]:
        """Samples of each child in one epoch, and passes per epoch (the same for every epoch)."""
        lengths = np.asarray(self._child_lengths(), dtype=np.int64)
        if self.kind == "repeat" and self.limit is not None:
            passes = max(1, -(-self.limit // int(lengths[0]))) if lengths[0] else 1
            return np.minimum(lengths * passes, self.limit), passes
        if self.kind == "repeat":
            passes = self.count or self._passes_to_fill(int(lengths[0]))
            return lengths * passes, passes
        if self.kind == "concatenate" or self.stop == "all":
            return lengths, 1
        share = np.asarray(self.weights) / sum(self.weights)
        limits = lengths / share
        total = int(np.floor(limits.min())) if self.stop == "first" else int(np.ceil(limits.max()))
        if total > _MAX_EPOCH:
            k = int(np.argmax(limits))
            raise ValueError(f"mix(stop={self.stop!r}) would make epochs of {total} samples: {self._child_name(k)} has "
                             f"{int(lengths[k])} samples at a share of {share[k]:.3g}; give it a larger weight, or use stop='first'")
        quotas = _apportion(total, share)
        if self.stop == "first":
            quotas = np.minimum(quotas, lengths)
        if (quotas > 0).any() and (lengths[quotas > 0] == 0).any():
            empty = int(np.flatnonzero((quotas > 0) & (lengths == 0))[0])
            raise ValueError(f"mix(stop='never'): {self._child_name(empty)} has no samples, so it cannot be read "
                             "over and over; leave it out")
        passes = int(max([-(-int(q) // int(n)) for q, n in zip(quotas, lengths) if n] or [1]))
        return quotas, max(1, passes)

    def _passes_to_fill(self, length: int) -> int:
        """Endless repeat: the fewest passes that make whole batches (the iterator runs these groups one after another)."""
        if not self.batch_size or not length:
            return 1
        return self.batch_size // math.gcd(length, self.batch_size)

    def for_batches(self, size: int) -> "ComposedSource":
        grouped = copy.copy(self)
        grouped.batch_size, grouped._length = size, None
        return grouped

    def first_order(self, epoch: int) -> np.ndarray:
        quotas, passes = self.quotas()
        sequences = [self._child_sequence(k, int(q), epoch, passes) for k, q in enumerate(quotas)]
        if self.kind != "mix":
            return np.concatenate(sequences) if sequences else np.zeros(0, dtype=np.int64)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(epoch, _MIX_STREAM))))
        labels = _draw(quotas, np.asarray(self.weights), rng)
        order = np.empty(len(labels), dtype=np.int64)
        for k, sequence in enumerate(sequences):
            order[labels == k] = sequence
        return order

    def _child_sequence(self, k: int, quota: int, epoch: int, passes: int) -> np.ndarray:
        """The ``quota`` indices child ``k`` contributes to ``epoch``: its passes' orders, one after another."""
        child, count = self.children[k], len(self.children)
        composite = isinstance(child.source, OrderedSource)
        size = 1 if composite else self._sizes_now()[k]
        parts, have, step = [], 0, 0
        while have < quota:
            r = epoch * passes + step
            local = child.plan.epoch_indices(r).astype(np.int64)
            if not len(local):
                break
            top = int(local.max()) + (0 if composite else r * size)
            if top > (_INT64_MAX - k) // count:
                raise ValueError(f"epoch {epoch} of {self.kind}() needs sample numbers beyond 64 bits "
                                 f"({self._child_name(k)}, pass {step}); use smaller epoch numbers")
            inner = local if composite else r * size + local
            parts.append(inner * count + k)
            have += len(local)
            step += 1
        sequence = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return sequence[:quota]

    # ------------------------------------------------------------- describe
    def _child_name(self, k: int) -> str:
        return "the repeated pipeline" if self.kind == "repeat" else f"{self.kind}() input {k}"

    def settings(self) -> str:
        """How the inputs are combined: kind, weights, seed, stop, count, limit."""
        return "|".join([self.kind, repr(self.weights), str(self.seed), str(self.stop), str(self.count), str(self.limit)])

    def input_identities(self) -> list:
        """Per input, a digest of its fingerprint (kind, length, steps, seeds) and of its data (`Source.identity`).

        Inputs of the same kind and length differ by their data, so a state
        of ``concatenate([a, b])`` is refused by ``concatenate([b, a])``.
        """
        if self._identities is None:
            self._identities = [_short(f"{child._fingerprint()}|{child.source.identity()}") for child in self.children]
        return self._identities

    def order_fingerprint(self) -> str:
        return _short("|".join([self.settings()] + self.input_identities()))

    def describe(self) -> str:
        if self.kind == "repeat":
            head = f"repeat({self.count or ''})" + (f".take({self.limit})" if self.limit is not None else "")
        elif self.kind == "mix":
            weights = ", ".join(f"{w:g}" for w in self.weights)
            head = f"mix(weights=[{weights}], seed={self.seed}, stop={self.stop!r})"
        else:
            head = "concatenate()"
        inner = ["    " + repr(child).replace("\n", "\n    ") for child in self.children]
        return "\n".join([head + " of:"] + inner)


class _Staging:
    """Where the inputs of one composite batch are gathered, each into its own block of rows."""

    def __init__(self, rows: int):
        self.rows, self.at = rows, 0
        self.arrays = None
        self.mismatch = False

    def alloc(self, specs: list) -> list:
        """The ``alloc`` an input's ``gather`` writes through: views of the rows from ``at``."""
        if self.arrays is None:
            self.arrays = [np.empty((self.rows,) + tuple(shape[1:]), dtype) for shape, dtype in specs]
        fits = len(specs) == len(self.arrays) and all(
            tuple(shape[1:]) == a.shape[1:] and np.dtype(dtype) == a.dtype for (shape, dtype), a in zip(specs, self.arrays))
        if not fits:
            self.mismatch = True
            return [np.empty(shape, dtype) for shape, dtype in specs]
        return [a[self.at : self.at + shape[0]] for (shape, _), a in zip(specs, self.arrays)]


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _apportion(total: int, share: np.ndarray) -> np.ndarray:
    """``total`` split by ``share`` into integers (largest remainder first)."""
    exact = share * total
    counts = np.floor(exact).astype(np.int64)
    left = total - int(counts.sum())
    if left > 0:
        counts[np.argsort(-(exact - counts), kind="stable")[:left]] += 1
    return counts


def _draw(quotas: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Which child each position reads: weighted draws among the children with samples left.

    Every child contributes exactly its quota; a child that has none left
    drops out and the weights of the others are renormalised (what tf.data's
    ``sample_from_datasets`` does). Drawn in a few vectorised rounds, one per
    child that runs out.
    """
    remaining = quotas.astype(np.int64).copy()
    out = []
    while remaining.sum() > 0:
        live = remaining > 0
        p = np.where(live, weights, 0.0)
        draws = rng.choice(len(p), size=int(remaining.sum()), p=p / p.sum())
        cut = len(draws)
        for k in np.flatnonzero(live):
            hits = np.flatnonzero(draws == k)
            if len(hits) >= remaining[k]:
                cut = min(cut, int(hits[remaining[k] - 1]) + 1)
        kept = draws[:cut]
        out.append(kept)
        remaining -= np.bincount(kept, minlength=len(p))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
