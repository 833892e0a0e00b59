"""The store (issue 5): decode once, then read. Three measurements.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks.store              # ~2-4 minutes on a shared 2-core host; prints the tables
    python -m benchmarks.store --append     # ... and writes the "Store" section of benchmarks/RESULTS.md
    python -m benchmarks.store --quick      # smoke test, ~30 s

(a) Story 2 end to end (`story2.dataset`: 512x512 RGB PNG photos + RGB
    colour-coded label PNGs; random 384x384 crop; float32 / 255; one-hot of
    6 classes; batch 4; ``backend="thread", workers=2``, the best setting
    in the story 2 benchmark). ``files``: story 2's feedline.vision pipeline
    (`story2.native_sample` + `story2.feedline_batch`): decode both PNGs,
    crop, ``colour_mask_to_index`` per sample, normalise and one-hot per
    batch. ``raw store``: the same after `convert_story2` decoded each pair
    once into a ``raw`` store of ``{"image": 512x512x3, "classes": 512x512,
    "index"}`` (the deterministic part of the work: decode and colour to
    class index); per epoch only the crop (`store_sample`), normalise and
    one-hot remain. Also the read stage alone (no normalise/one-hot). Both
    pipelines' batches are checked bit-identical. Timing: `runner.measure`
    (one epoch, worker start-up included; exactly-once checked), ``--reps``
    rounds alternating, medians.
(b) Random access: a ``raw`` store of ``--samples`` 3x224x224 uint8 rows,
    in the page cache (read once before timing); batches of 256 random
    indices gathered with ``store.gather`` into a preallocated batch, against
    ``np.take`` from the same data in memory into the same batch. Also
    the whole pipeline, ``fl.from_store(path).shuffle().batch(256)``.
(c) Bytes on disk per sample on ImageNet-style JPEG photos
    (`imagedata.jpeg_folder`: 500x375 and 375x500, quality 90, ~70 kB),
    converted with ``feedline convert`` (each image's own size) per encoding,
    and the read speed of each store (one thread, ``store[i]`` in random order).

Last run: see benchmarks/history/undated-store.md (``--append`` writes a new "## Store" section into benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from . import runner, story2
from .imagedata import jpeg_folder
from .workloads import cache_dir

__all__ = ["convert_story2", "main", "store_sample"]

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = {"backend": "thread", "workers": 2}  # story 2's best setting; both pipelines use it


# ----------------------------------------------------------------- (a)
def _decode_pair(sample):
    """``((image path, mask path), index)`` -> the deterministic part of story 2, done once."""
    import feedline.vision as fv

    (image_path, mask_path), index = sample
    return {"image": fv.decode(str(image_path)),
            "classes": fv.colour_mask_to_index(fv.decode(str(mask_path)), story2.LABEL_VALUES),
            "index": np.int64(index)}


def convert_story2(w, path: str) -> float:
    """Write story 2's pairs, decoded, into a ``raw`` store at ``path``; returns the seconds it took."""
    import feedline as fl
    from feedline.store import StoreWriter

    t0 = time.perf_counter()
    pipe = fl.from_arrays(w.data, w.index).map(_decode_pair, **SETTINGS).batch(8)
    with pipe, StoreWriter(path, overwrite=True, meta={"made_by": "benchmarks.store"}) as writer:
        for batch in pipe:
            writer.write(batch)
    return time.perf_counter() - t0


def store_sample(sample):
    """The per-epoch work left after the store: story 2's crop, of the image and of the class map."""
    top, left = story2.crop_offset(sample["index"])
    crop = slice(top, top + story2.CROP), slice(left, left + story2.CROP)
    return sample["image"][crop], sample["classes"][crop], sample["index"]


def read_files(sample):
    """The read stage from files: decode both PNGs, crop, colour to class index."""
    return story2.native_sample(sample)


def _loaders(store_path: str):
    import feedline as fl

    from .loaders import feedline_pipeline

    def files(w, full=True):
        pipe = fl.from_arrays(w.data, w.index).map(story2.native_sample, **SETTINGS).batch(w.batch_size)
        return feedline_pipeline(pipe.map_batch(story2.feedline_batch) if full else pipe, "files")

    def store(w, full=True):
        pipe = fl.from_store(store_path).map(store_sample, **SETTINGS).batch(w.batch_size)
        return feedline_pipeline(pipe.map_batch(story2.feedline_batch) if full else pipe, "raw store")

    return {
        "files": files,
        "raw store": store,
        "files, read stage": lambda w: files(w, False),
        "raw store, read stage": lambda w: store(w, False),
    }


def _first_batches(loader, w, count=3):
    with loader(w) as run:
        out = []
        for batch in run.batches:
            out.append([np.array(part) for part in batch])
            if len(out) == count:
                break
    return out


def story(quick: bool, reps: int, max_wait: float, log=print) -> dict:
    w = story2.seg_workload(quick)
    path = os.path.join(cache_dir(), f"store-story2-{len(w)}.store")
    seconds = convert_story2(w, path)
    disk = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
    log(f"(a) converted {len(w)} pairs into {path} in {seconds:.1f} s ({disk / len(w) / 1e6:.2f} MB per sample)")
    loaders = _loaders(path)
    for a, b in (("files", "raw store"), ("files, read stage", "raw store, read stage")):
        left, right = _first_batches(loaders[a], w), _first_batches(loaders[b], w)
        same = all(all(np.array_equal(x, y) for x, y in zip(p, q)) for p, q in zip(left, right))
        if not same:
            raise SystemExit(f"benchmarks.store: {a!r} and {b!r} give different batches; fix before timing")
    log("(a) checked: the store pipelines give batches bit-identical to the file pipelines")
    runs = {name: [] for name in loaders}
    names = list(loaders)
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            runner.wait_quiet(max_wait, log=lambda *_: None)
            m = runner.measure(loaders[name], w)
            if m.problem:
                raise SystemExit(f"benchmarks.store: {name}: {m.problem}")
            runs[name].append(m)
            log(f"    {name:24s} rep {rep}: {m.samples / m.seconds:7.1f} samples/s (steady {m.steady:7.1f}), foreign {m.foreign:.0%}")
    return {"workload": w, "convert_seconds": seconds, "disk_per_sample": disk / len(w), "runs": runs}


# ----------------------------------------------------------------- (b)
def random_access(samples: int, rounds: int, log=print) -> dict:
    import feedline as fl
    from feedline.store import StoreWriter, open_store

    rng = np.random.default_rng(0)
    data = rng.integers(0, 255, (samples, 3, 224, 224), dtype=np.uint8)
    path = os.path.join(tempfile.mkdtemp(prefix="feedline-store-bench-"), "random.store")
    try:
        with StoreWriter(path) as writer:
            for start in range(0, samples, 256):
                writer.write(data[start : start + 256])
        store = open_store(path)
        store.gather(np.arange(samples))  # into the page cache, and every record batch opened once
        batch, out = 256, np.empty((256, 3, 224, 224), np.uint8)

        def into_out(specs):
            return [out]

        def timed(fn) -> float:
            best = []
            for r in range(rounds):
                order = np.random.default_rng(r).permutation(samples)
                t0 = time.perf_counter()
                for start in range(0, samples - batch + 1, batch):
                    fn(order[start : start + batch])
                best.append(time.perf_counter() - t0)
            return (samples // batch) * batch * data[0].nbytes / min(best)

        numpy_rate = timed(lambda idx: np.take(data, idx, axis=0, out=out, mode="clip"))
        numpy_new_rate = timed(lambda idx: np.take(data, idx, axis=0))
        store_rate = timed(lambda idx: store.gather(idx, into_out))
        pipeline_best = []
        pipe = fl.from_store(path).shuffle(seed=0).batch(batch, drop_remainder=True)
        with pipe:
            for _ in range(rounds):
                t0 = time.perf_counter()
                n = sum(len(b) for b in pipe)
                pipeline_best.append(time.perf_counter() - t0)
        pipeline_rate = n * data[0].nbytes / min(pipeline_best)
        chunks = len(store.manifest["files"][0]["batches"])
        log(f"(b) numpy {numpy_rate / 1e9:.2f} GB/s, store.gather {store_rate / 1e9:.2f} GB/s "
            f"({store_rate / numpy_rate:.2f}), pipeline {pipeline_rate / 1e9:.2f} GB/s ({pipeline_rate / numpy_rate:.2f})")
        return {"samples": samples, "numpy": numpy_rate, "numpy_new": numpy_new_rate, "gather": store_rate, "pipeline": pipeline_rate,
                "record_batches": chunks, "rows_per_batch": store.manifest["files"][0]["batches"][0]}
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


# ----------------------------------------------------------------- (c)
ENCODINGS = ("raw", "zstd", "lz4", "jpeg:90", "png")


def sizes(count: int, log=print) -> dict:
    from feedline.store import open_store
    from feedline.store._convert import convert

    paths = jpeg_folder(count)
    folder = os.path.dirname(paths[0])
    source = os.path.join(tempfile.mkdtemp(prefix="feedline-store-bench-"), "photos")
    os.makedirs(source)
    for p in paths:
        os.symlink(p, os.path.join(source, os.path.basename(p)))
    rows = [("original JPEG files", np.mean([os.path.getsize(p) for p in paths]), float("nan"), float("nan"))]
    try:
        for encoding in ENCODINGS:
            dst = os.path.join(os.path.dirname(source), encoding.replace(":", "-") + ".store")
            summary = convert(source, dst, encodings={"image": encoding}, backend="thread", workers=2, progress=False)
            store = open_store(dst)
            order = np.random.default_rng(0).permutation(len(store))
            for i in order[:8]:
                store[int(i)]  # warm: open the record batches
            t0 = time.perf_counter()
            for i in order:
                store[int(i)]
            rate = len(store) / (time.perf_counter() - t0)
            rows.append((encoding, summary.bytes / summary.samples, rate, summary.seconds))
            log(f"(c) {encoding:8s} {summary.bytes / summary.samples / 1e3:8.1f} kB/sample, read {rate:8.0f} samples/s, "
                f"convert {summary.seconds:.1f} s")
    finally:
        shutil.rmtree(os.path.dirname(source), ignore_errors=True)
    return {"count": count, "folder": folder, "rows": rows}


# ----------------------------------------------------------------- report
def _median(values):
    return statistics.median(values) if values else float("nan")


def render(a: dict, b: dict, c: dict, command: str, seconds: float) -> str:
    from .report import machine

    info = machine()
    w = a["workload"]
    lines = [
        "## Store",
        "",
        f"The store (issue 5). Command (from the repository root): `{command}`",
        "",
        (f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; total {seconds:.0f} s. Host: {info['cores']} cores, "
        f"{info['cpu']}, {info['memory']}, Python {info['python']}, numpy {info['numpy']}, feedline {info['feedline']}."),
        "",
        "### (a) Story 2 end to end: PNG files vs a raw store (target: >= 10x samples/s)",
        "",
        (f"{len(w)} pairs of 512x512 PNGs (story 2's data); converted once into a raw store in {a['convert_seconds']:.1f} s "
        f"({a['disk_per_sample'] / 1e6:.2f} MB per sample: image + class map, uncompressed). Both pipelines use "
        f"`map(..., backend='thread', workers=2)`, batch {w.batch_size}; their batches were checked bit-identical. "
        "One epoch per run, worker start-up included; median (min-max) of the runs."),
        "",
        "| pipeline | samples/s median (min-max) | steady samples/s | vs files | foreign load median |",
        "|---|---:|---:|---:|---:|",
    ]
    rates = {name: [m.samples / m.seconds for m in runs] for name, runs in a["runs"].items()}
    for name, runs in a["runs"].items():
        base = "files" if "read stage" not in name else "files, read stage"
        ratio = _median(rates[name]) / _median(rates[base])
        lines.append(f"| {name} | {_median(rates[name]):.1f} ({min(rates[name]):.1f}-{max(rates[name]):.1f}) | "
                     f"{_median([m.steady for m in runs]):.1f} | {ratio:.2f}x | {_median([m.foreign for m in runs]):.0%} |")
    full = _median(rates["raw store"]) / _median(rates["files"])
    stage = _median(rates["raw store, read stage"]) / _median(rates["files, read stage"])
    lines += [
        "",
        (f"Target (>= 10x): end to end {full:.1f}x ({'met' if full >= 10 else 'NOT met'}); the read stage alone "
        f"(decode + crop + colour to class index, against read + crop from the store) {stage:.1f}x "
        f"({'met' if stage >= 10 else 'not met'})."),
        "",
        "### (b) Random access from the page cache: batch 256 of 3x224x224 uint8 (target: >= 0.7 of NumPy)",
        "",
        (f"{b['samples']} samples ({b['samples'] * 150528 / 1e6:.0f} MB) in a raw store, {b['rows_per_batch']} rows per "
        "record batch (so a random batch of 256 touches many record batches and is copied row by row); every "
        "byte read once before timing. Best of the rounds, each a full random permutation in batches of 256."),
        "",
        "| read | GB/s | vs NumPy |",
        "|---|---:|---:|",
        f"| `np.take(array_in_memory, idx, axis=0, out=batch)` | {b['numpy'] / 1e9:.2f} | 1.00 |",
        f"| `store.gather(idx, alloc)` into the same batch | {b['gather'] / 1e9:.2f} | {b['gather'] / b['numpy']:.2f} |",
        (f"| `np.take(array_in_memory, idx, axis=0)` (a new batch each time) | {b['numpy_new'] / 1e9:.2f} | "
        f"{b['numpy_new'] / b['numpy']:.2f} |"),
        (f"| `fl.from_store(path).shuffle(seed=0).batch(256)` (a new batch each time) | {b['pipeline'] / 1e9:.2f} | "
        f"{b['pipeline'] / b['numpy']:.2f} |"),
        "",
        (f"Target (>= 0.7): store.gather {b['gather'] / b['numpy']:.2f} "
        f"({'met' if b['gather'] / b['numpy'] >= 0.7 else 'NOT met'}); the whole pipeline, which allocates each batch, "
        f"{b['pipeline'] / b['numpy_new']:.2f} of NumPy allocating each batch."),
        "",
        "### (c) Bytes per sample by encoding: ImageNet-style JPEG photos",
        "",
        (f"{c['count']} photos (500x375 and 375x500, quality 90, `benchmarks/imagedata.py`), each stored at its own "
        "size by `feedline convert` (thread x2); read speed: `store[i]` in random order, one thread, decode included."),
        "",
        "| encoding | kB per sample | read samples/s | convert s |",
        "|---|---:|---:|---:|",
    ]
    for name, per, rate, secs in c["rows"]:
        lines.append(f"| {name} | {per / 1e3:.1f} | {'-' if math.isnan(rate) else f'{rate:,.0f}'} | "
                     f"{'-' if math.isnan(secs) else f'{secs:.1f}'} |")
    return "\n".join(lines) + "\n"


def _write_section(text: str) -> str:
    """Replace (or add, at the end) the "## Store" section of RESULTS.md; other sections are kept."""
    from .report import _sections

    target = os.path.join(HERE, "RESULTS.md")
    existing = ""
    if os.path.exists(target):
        with open(target, encoding="utf-8") as f:
            existing = f.read()
    parts = _sections(existing)
    if any(heading == "Store" for heading, _ in parts):
        body = "".join(text.rstrip("\n") + "\n\n" if heading == "Store" else chunk for heading, chunk in parts)
    else:
        body = existing.rstrip("\n") + "\n\n" + text
    with open(target + ".part", "w", encoding="utf-8") as f:
        f.write(body.rstrip("\n") + "\n")
    os.replace(target + ".part", target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument("--reps", type=int, default=3, help="timed rounds for (a) (default 3)")
    parser.add_argument("--samples", type=int, default=2048, help="rows of the random-access store in (b) (default 2048)")
    parser.add_argument("--photos", type=int, default=200, help="JPEG photos for (c) (default 200)")
    parser.add_argument("--max-wait", type=float, default=5.0, help="seconds to wait for a quiet machine before each run")
    parser.add_argument("--append", action="store_true", help="write the Store section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    reps = 1 if args.quick else args.reps
    t0 = time.perf_counter()
    a = story(args.quick, reps, 0.0 if args.quick else args.max_wait)
    b = random_access(512 if args.quick else args.samples, 2 if args.quick else 5)
    c = sizes(24 if args.quick else args.photos)
    command = "python -m benchmarks.store" + ("".join(f" {x}" for x in (argv if argv is not None else sys.argv[1:])))
    text = render(a, b, c, command, time.perf_counter() - t0)
    print()
    print(text)
    if args.append:
        print(f"written to {_write_section(text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
