"""Decoder micro-benchmark: images/s per core by library, and thread scaling.

Run (from the repository root, in the project's virtualenv, machine quiet):

    python -m benchmarks.decoders --markdown              # ~4 minutes; tables as in benchmarks/history/undated-decoders.md
    python -m benchmarks.decoders --only PNG --rounds 5   # some cases, fewer rounds

Every library decodes the same bytes, held in memory (no file I/O), to the
layout feedline.vision returns: HWC uint8 RGB (16-bit PNG: the high byte).
"per core" is one thread; "x2 threads" is two threads decoding disjoint
halves of the work, as the speed-up over one thread (2.0 is perfect on
the 2-core host; ~1.0 means the library holds the GIL). Libraries take
turns in each of ``--rounds`` rounds (~0.25 s each); a number is the best
round, ignoring rounds during which other processes used more than 5 % of
the cores (``*`` in the table when every round was disturbed). Also
measured: simplejpeg at each of libjpeg-turbo's n/8 scales, and
`feedline.vision.random_resized_crop` with and without decode-time
reduction.

Libraries: Pillow 13.0.0 (its own libjpeg-turbo), simplejpeg 1.9.0
(libjpeg-turbo 3 in the wheel), PyTurboJPEG 1.8.3 (needs a system
libjpeg-turbo: ``apt-get install libturbojpeg0``; skipped when absent),
OpenCV 5.0.0 (opencv-python-headless), pyspng 0.1.4 (libspng).

Last run (2-core AMD EPYC, Python 3.11.7, 2026-11-22; other sessions kept
the cores 50-100 % busy, see benchmarks/history/undated-decoders.md for every table):

    images/s per core (x2 threads)  Pillow      simplejpeg   PyTurboJPEG  OpenCV       pyspng
    JPEG 500x375                    1092        1357         1278         1234
    JPEG 500x375 at 1/4             1362 (1.68) 1626         1605         1637
    PNG 512x512 RGB                 207         -            -            283          360
    PNG 512x512 P                   538 (2.02)  -            -            526 (1.99)   574 (1.10)
    PNG 512x512 RGB16               132         -            -            137          142
    undisturbed 2-thread speed-ups: JPEG 1.93-2.09 for all four; PNG Pillow 1.72-2.09,
    OpenCV 1.92-2.04, pyspng 0.94-1.10 (holds the GIL).
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import time

import numpy as np

from .imagedata import encode_jpeg, encode_png, photo
from .runner import threads_rate

ROUNDS = 7
ROUND_SECONDS = 0.25
FOREIGN_LIMIT = 0.05  # share of the cores other processes may use during a round that counts
PNG_MODES = ("RGB", "L", "P", "RGBA", "RGB16", "L16")


# ---------------------------------------------------------------- libraries
def _pil(data, reduce=1):
    from PIL import Image

    im = Image.open(io.BytesIO(data))
    if reduce > 1:
        im.draft("RGB", (im.width // reduce, im.height // reduce))  # Pillow picks scale = min(size // requested)
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        wide = np.asarray(im)
        return np.repeat((wide >> 8).astype(np.uint8)[..., None], 3, axis=2)
    if im.mode != "RGB":
        im = im.convert("RGB")
    return np.asarray(im)


def _simplejpeg(data, reduce=1):
    import simplejpeg

    if reduce == 1:
        return simplejpeg.decode_jpeg(data, "RGB")
    h, w, _, _ = simplejpeg.decode_jpeg_header(data)
    return simplejpeg.decode_jpeg(data, "RGB", min_height=-(-h // reduce), min_width=-(-w // reduce), min_factor=reduce)


_TURBO = []


def _turbojpeg(data, reduce=1):
    import turbojpeg

    if not _TURBO:
        _TURBO.append(turbojpeg.TurboJPEG())
    scale = None if reduce == 1 else (1, reduce)
    return _TURBO[0].decode(data, pixel_format=turbojpeg.TJPF_RGB, scaling_factor=scale)


def _opencv(data, reduce=1):
    import cv2

    buf = np.frombuffer(data, np.uint8)
    if reduce == 1:
        return cv2.imdecode(buf, cv2.IMREAD_COLOR_RGB)
    flag = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}[reduce]
    return cv2.cvtColor(cv2.imdecode(buf, flag), cv2.COLOR_BGR2RGB)


def _pyspng(data, reduce=1):
    import pyspng

    return pyspng.load(data, format="RGB")


def _feedline(data, reduce=1):
    from feedline import vision

    return vision.decode(data, reduce=reduce)


def _crop_op(size, reduced):
    """``random_resized_crop(data, size)`` with or without decode-time reduction, a new box per call."""
    import itertools

    seeds = itertools.count()

    def op(data, reduce=1):
        from feedline import vision

        return vision.random_resized_crop(data, size, np.random.default_rng(next(seeds)), reduced_decode=reduced)

    return op


def _simplejpeg_eighths(num):
    """simplejpeg at scale num/8 (libjpeg-turbo's other DCT scales)."""

    def op(data, reduce=1):
        import simplejpeg

        h, w, _, _ = simplejpeg.decode_jpeg_header(data)
        return simplejpeg.decode_jpeg(data, "RGB", min_height=-(-h * num // 8), min_width=-(-w * num // 8),
                                      min_factor=8 / num - 1e-9)

    return op


JPEG_LIBS = {"Pillow": _pil, "simplejpeg": _simplejpeg, "PyTurboJPEG": _turbojpeg, "OpenCV": _opencv,
             "feedline.vision": _feedline}
PNG_LIBS = {"Pillow": _pil, "OpenCV": _opencv, "pyspng": _pyspng, "feedline.vision": _feedline}


# ------------------------------------------------------------------ timing
def measure_case(libs: dict, items, reduce: int, rounds: int) -> dict:
    """Best 1-thread and 2-thread rate of each library over ``rounds`` interleaved rounds.

    Libraries take turns within each round, so a burst of load from other
    processes hits one round of each rather than all rounds of one; rounds
    during which other processes used more than `FOREIGN_LIMIT` of the cores
    are ignored unless every round was disturbed (then the row is flagged).
    """
    calls = {name: (lambda d, fn=fn: fn(d, reduce)) for name, fn in libs.items()}
    sizes = {}
    for name, call in calls.items():
        call(items[0])  # warm up: imports, tables
        t0 = time.perf_counter()
        for item in items[:4]:
            call(item)
        per_call = (time.perf_counter() - t0) / min(4, len(items))
        sizes[name] = max(8, int(ROUND_SECONDS / per_call)) // 2 * 2
    seen = {(name, t): [] for name in calls for t in (1, 2)}
    for _ in range(rounds):
        for name, call in calls.items():
            for threads in (1, 2):
                seen[name, threads].append(threads_rate(call, items, threads, sizes[name]))
    out = {}
    for name in calls:
        best = {}
        for threads in (1, 2):
            clean = [rate for rate, foreign in seen[name, threads] if foreign <= FOREIGN_LIMIT]
            best[threads] = max(clean or [rate for rate, _ in seen[name, threads]])
            best[f"clean{threads}"] = len(clean)
        out[name] = best
    return out


def _check(fn, data, reduce=1):
    """The library's output, checked for the contract (HWC uint8, 3 channels)."""
    out = fn(data, reduce)
    if out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] != 3:
        raise RuntimeError(f"{fn.__name__} returned {out.dtype} {out.shape}, not HWC uint8 RGB")
    return out


def _available(libs, sample):
    ok = {}
    for name, fn in libs.items():
        try:
            _check(fn, sample)
        except (ImportError, RuntimeError, OSError) as exc:
            print(f"  {name}: not measured ({type(exc).__name__}: {exc})")
            continue
        ok[name] = fn
    return ok


def run(markdown: bool, rounds: int, only: str | None = None) -> None:
    jpegs = [encode_jpeg(photo(375, 500, seed)) for seed in range(8)]
    pngs = {mode: [encode_png(photo(512, 512, 100 + seed), mode) for seed in range(4)] for mode in PNG_MODES}
    print(f"host: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"JPEG 500x375 q90 4:2:0, mean {np.mean([len(d) for d in jpegs]) / 1e3:.0f} KB; "
          f"PNG 512x512, mean KB: " + ", ".join(f"{m} {np.mean([len(d) for d in v]) / 1e3:.0f}" for m, v in pngs.items()))
    rows = []  # (case, library, per-core rate, 2-thread speed-up, clean rounds)
    cases = [("JPEG 500x375" + ("" if r == 1 else f" at 1/{r}"), JPEG_LIBS, jpegs, r) for r in (1, 2, 4)]
    cases += [(f"PNG 512x512 {mode}", PNG_LIBS, items, 1) for mode, items in pngs.items()]
    eighths = {f"{num}/8": _simplejpeg_eighths(num) for num in (8, 7, 6, 5, 4, 2, 1)}
    cases.append(("simplejpeg scales, JPEG 500x375", eighths, jpegs, 1))
    large = [encode_jpeg(photo(768, 1024, seed)) for seed in range(4)]
    for label, items, size in (("500x375", jpegs, 224), ("500x375", jpegs, 128), ("1024x768", large, 224)):
        ops = {"reduced decode": _crop_op(size, True), "full decode": _crop_op(size, False)}
        cases.append((f"random_resized_crop {label} -> {size}", ops, items, 1))
    for case, libs, items, reduce in cases:
        if only and only not in case:
            continue
        found = measure_case(_available(libs, items[0]), items, reduce, rounds)
        for name, best in found.items():
            flag = "" if best["clean1"] and best["clean2"] else "  (every round disturbed by other processes)"
            rows.append((case, name, best[1], best[2] / best[1], flag))
            print(f"  {case:22s} {name:16s} {best[1]:8.0f}/s  x2 threads {best[2] / best[1]:4.2f}"
                  f"  clean rounds {best['clean1']}/{rounds}, {best['clean2']}/{rounds}{flag}", flush=True)
    if markdown:
        scales = [r for r in rows if r[0].startswith("simplejpeg scales")]
        crops = [r for r in rows if r[0].startswith("random_resized_crop")]
        decoders = [r for r in rows if r not in scales and r not in crops]
        for part in (decoders, scales, crops):
            if part:
                print()
                print(_markdown(part))


def _markdown(rows) -> str:
    cases = list(dict.fromkeys(r[0] for r in rows))
    libs = list(dict.fromkeys(r[1] for r in rows))
    table = {(r[0], r[1]): r for r in rows}
    lines = ["| images/s per core (x2 threads speed-up) | " + " | ".join(libs) + " |",
             "|---|" + "---:|" * len(libs)]
    for case in cases:
        cells = []
        for lib in libs:
            r = table.get((case, lib))
            cells.append("" if r is None else f"{r[2]:.0f} ({r[3]:.2f}){'*' if r[4] else ''}")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.decoders", description=__doc__.splitlines()[0])
    p.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds per case (default {ROUNDS})")
    p.add_argument("--only", default=None, help="measure only the cases whose name contains this (e.g. 'PNG')")
    args = p.parse_args(argv)
    run(args.markdown, args.rounds, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
