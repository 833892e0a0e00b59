"""Audio benchmarks (issue 4): story 4 end to end, and the WAV/FLAC decoders.

Run (from the repository root, in the project's virtualenv, machine quiet):

    python -m benchmarks.audio story4              # ~2 minutes; prints the table
    python -m benchmarks.audio story4 --append     # ... and appends it to benchmarks/RESULTS.md
    python -m benchmarks.audio story4 --quick      # smoke test
    python -m benchmarks.audio decoders            # decoder micro-benchmark (docs/audio.md)

story4: the user of story 4 reads WAV files and post-processes them, 2 s a
batch of 128. Here: 16 kHz mono 16-bit WAV clips of 2 s, a random 1 s crop,
a 64-band log-mel spectrogram (25 ms windows every 10 ms: (1, 64, 101)
float32 a sample), batches of 128. Every loader runs the same per-sample
function, `story4_features` (feedline.audio's `load_random_crop` and
`LogMel`, the same NumPy code in every loader); the crop's generator is
seeded from the sample index, so every loader's output is checked against
the same reference. Timing, repetitions and checks are the shared runner's
(`benchmarks/runner.py`); this module registers its workload and its extra
loader with the shared registries for the run. Extra loader:
``feedline-process-batched``, feedline's idiomatic form: crop per sample in
the workers, log-mel on the whole batch with ``map_batch`` (one FFT call per
batch instead of 128).

decoders: per-file decode time of a 2 s 16 kHz clip by library and reader,
one thread, and the speed-up with two threads (2.0 is perfect on the 2-core
host; ~1.0 means the GIL is held). Best of 5 rounds of ~0.4 s during which
other processes used under 10 % of the cores.

Last results (2026-11-22, 2-core AMD EPYC, Python 3.11.7, numpy 2.4.6, torch
2.13.0+cpu, soundfile 0.14.0; `story4 --reps 2 --max-wait 30`; full tables in
benchmarks/RESULTS.md, section "Audio", and docs/audio.md):

    loader                                 samples/s   steady
    serial loop                                2,911    2,813
    feedline thread x2                         2,363    2,210
    feedline process x2                        4,070    5,122
    feedline process x2, map_batch log-mel     4,765    6,505
    DataLoader fork x2                         3,769    3,889
    DataLoader spawn x2                        1,567    4,934

    decoders, us per 2 s clip: WAV soundfile 121, feedline 31; FLAC soundfile 405,
    feedline 427 (libsndfile); one 60 s FLAC scales x2.00 on two threads.
"""

from __future__ import annotations

import os

# Before NumPy or torch load: one BLAS/OpenMP thread per process, as in `python -m benchmarks`.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402  (after the environment is fixed)
import contextlib  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from feedline.audio import LogMel, load_audio, load_random_crop  # noqa: E402

from .workloads import Workload, cache_dir  # noqa: E402

__all__ = ["LOGMEL", "clip_folder", "speechlike", "story4_batch_logmel", "story4_crop", "story4_features", "story4_workload"]

SEED = 20240917
RATE = 16000
CLIP_SECONDS = 2
CROP = RATE  # 1 s
BATCH = 128
LOGMEL = LogMel(sample_rate=RATE, n_fft=400, hop_length=160, n_mels=64)
HERE = os.path.dirname(os.path.abspath(__file__))


# -------------------------------------------------------------------- data
def speechlike(frames: int, seed: int) -> np.ndarray:
    """``(frames,)`` int16: voiced harmonics under a syllable-rate envelope, plus noise.

    Compresses in FLAC about as speech does (~55-60 % of WAV), unlike white noise.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(frames) / RATE
    f0 = rng.uniform(90, 220) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.5, 2) * t))
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = np.clip(np.sin(2 * np.pi * rng.uniform(3, 5) * t + rng.uniform(0, 6)), 0, None) ** 2
    signal = 0.25 * voiced * envelope + 0.01 * rng.standard_normal(frames)
    return np.clip(signal * 32767 / max(1.0, np.abs(signal).max() * 1.05), -32768, 32767).astype(np.int16)


def clip_folder(count: int, fmt: str = "WAV") -> list[str]:
    """Paths of ``count`` 2 s 16 kHz mono PCM-16 clips, written once under `cache_dir`."""
    import soundfile as sf

    folder = os.path.join(cache_dir(), f"audio-{fmt.lower()}-{CLIP_SECONDS}s-{count}")
    ext = fmt.lower()
    paths = [os.path.join(folder, f"clip_{i:05d}.{ext}") for i in range(count)]
    if not all(os.path.exists(p) for p in paths):
        os.makedirs(folder, exist_ok=True)
        for i, p in enumerate(paths):
            tmp = p + ".part"
            sf.write(tmp, speechlike(CLIP_SECONDS * RATE, SEED + i), RATE, format=fmt, subtype="PCM_16")
            os.replace(tmp, p)
    return paths


# ------------------------------------------------------------ story 4 work
def story4_features(sample):
    """``(path, index) -> (log-mel (1, 64, 101) float32, index)``: the per-sample work of every loader."""
    path, index = sample
    rng = np.random.default_rng((SEED, int(index)))
    clip = load_random_crop(str(path), CROP, rng, sample_rate=RATE)
    return LOGMEL(clip), index


def story4_crop(sample):
    """The first half of `story4_features`: the crop only (for the batched variant)."""
    path, index = sample
    rng = np.random.default_rng((SEED, int(index)))
    return load_random_crop(str(path), CROP, rng, sample_rate=RATE), index


def story4_batch_logmel(batch):
    """The second half, on a whole batch: ``(clips (B, 1, 16000), idx) -> (log-mel (B, 1, 64, 101), idx)``."""
    clips, index = batch
    return LOGMEL(clips), index


def story4_workload(quick: bool) -> Workload:
    n = 512 if quick else 5120
    paths = clip_folder(n)
    return Workload(
        name="story4",
        data=np.array(paths),
        index=np.arange(n, dtype=np.int64),
        batch_size=BATCH,
        fn=story4_features,
        description=f"{n} WAV clips (16 kHz mono PCM-16, {CLIP_SECONDS} s) -> random 1 s crop (seek, decode 1 s) -> "
        f"64-band log-mel (n_fft 400, hop 160: (1, 64, 101) float32); batch {BATCH}",
    )


@contextlib.contextmanager
def feedline_process_batched(w: Workload):
    """feedline, idiomatic: crop per sample on 2 process workers, log-mel per batch (``map_batch``)."""
    import feedline as fl

    from .loaders import Run

    pipe = fl.from_arrays(w.data, w.index).map(story4_crop, backend="process", workers=2).batch(w.batch_size)
    with pipe.map_batch(story4_batch_logmel) as pipe:
        it = iter(pipe)
        stats = it.stats()
        try:
            yield Run(it, f"{stats.backend} x{stats.workers}, log-mel in map_batch", stats.decision)
        finally:
            it.close()


STORY4_LOADERS = ["serial-loop", "feedline-thread", "feedline-process", "feedline-process-batched", "feedline-auto",
                  "torch-fork", "torch-spawn"]


def _register() -> None:
    """Add the story-4 workload and loader to the shared registries, for this run only."""
    from . import loaders, workloads

    workloads.WORKLOADS.setdefault("story4", story4_workload)
    loaders.LOADERS.setdefault("feedline-process-batched", feedline_process_batched)
    loaders.NOTES.setdefault("feedline-process-batched", "map(crop, backend='process', workers=2), batch, "
                             "map_batch(log-mel of the whole batch)")


def _section(results, command: str, reps: int, quick: bool, seconds: float) -> str:
    from . import report
    from .loaders import NOTES
    from .runner import cores

    info = report.machine()
    r = results["story4"]
    s = r["summaries"]
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = [
        "## Audio",
        "",
        f"Story 4 (issue 4). Command (from the repository root): `{command}`",
        "",
        (
            f"Date: {date}. {'Quick smoke test, indicative only' if quick else 'Full run'}: {reps} timed repetitions "
            f"per loader after a checked warm-up, loaders alternating, by the shared runner (see \"How to read the "
            f"tables\" above). Total {seconds:.0f} s. Host: {info['cores']} cores, {info['cpu']}, Python "
            f"{info['python']}, numpy {info['numpy']}, torch {info['torch']}, soundfile {_soundfile_version()}."
        ),
        "",
        r["workload"].description + ".",
        f"Per-sample function measured at {r['per_sample'] * 1e3:.2f} ms (median of 40 calls, in the parent).",
        "",
    ]
    out += report._table(r, cores())
    out.append("")
    ratios = []
    for fl_name in ("feedline-process", "feedline-thread", "feedline-process-batched", "feedline-auto"):
        f = s.get(fl_name)
        if not (f and f.runs):
            continue
        for dl in ("torch-fork", "torch-spawn"):
            t = s.get(dl)
            if t and t.runs:
                ratio = f.sps / t.sps
                steady = f.steady / t.steady if t.steady == t.steady and t.steady else float("nan")
                ratios.append(f"| {fl_name} / DataLoader ({dl.split('-')[1]}) | {ratio:.2f}x | {steady:.2f}x | "
                              f"{'yes' if ratio >= 1.5 else 'NO'} |")
    out += ["| ratio (target: >= 1.5x DataLoader) | samples/s | steady | met |", "|---|---:|---:|:---:|"] + ratios
    out.append("")
    auto = s.get("feedline-auto")
    if auto and auto.why:
        out += [f"feedline-auto ran as {auto.detail}: \"{auto.why}\".", ""]
    out += [f"- `{name}`: {NOTES.get(name, '')}" for name in s]
    problems = [f"- {name}: {p}" for name, x in s.items() for p in x.problems]
    if problems:
        out += ["", "Problems found by the checks:", ""] + problems
    out.append("")
    return "\n".join(out)


def _soundfile_version() -> str:
    import soundfile as sf

    return f"{sf.__version__} (libsndfile {sf.__libsndfile_version__})"


def run_story4(args, argv) -> int:
    from . import runner

    _register()
    loaders = args.loader or STORY4_LOADERS
    if "serial-loop" not in loaders:
        loaders = ["serial-loop"] + loaders
    reps = args.reps if args.reps is not None else (1 if args.quick else 5)
    max_wait = args.max_wait if args.max_wait is not None else (0.0 if args.quick else 120.0)
    start = time.perf_counter()
    results = runner.run_suite(["story4"], loaders, quick=args.quick, reps=reps, warmup=True, max_wait=max_wait,
                               retries=0 if args.quick else runner.RETRIES)
    command = "python -m benchmarks.audio " + shlex.join(argv)
    text = _section(results, command, reps, args.quick, time.perf_counter() - start)
    print()
    print(text)
    if args.append:
        path = os.path.join(HERE, "RESULTS.md")
        with open(path, "a") as f:
            f.write("\n" + text)
        print(f"appended to {path}")
    s = results["story4"]["summaries"]
    return 0 if all(x.exactly_once and not x.problems for x in s.values() if x.runs or x.error) else 1


# ----------------------------------------------------------------- decoders
ROUNDS = 5
ROUND_SECONDS = 0.4
ROUND_BUDGET = 60.0  # seconds to find ROUNDS rounds without foreign load


def _rate(fn, items, threads: int) -> float:
    """Files/s of ``fn`` over ``items`` (cycled) with ``threads`` threads: best of `ROUNDS` clean rounds.

    A round during which other processes used more than `runner.FOREIGN_LIMIT`
    of the cores is discarded (this host is shared); after `ROUND_BUDGET`
    seconds the best round seen so far is kept.
    """
    from .runner import FOREIGN_LIMIT, _cpu_seconds, _machine_busy_seconds, cores

    fn(items[0])
    t0 = time.perf_counter()
    for item in items[:8]:
        fn(item)
    per_call = (time.perf_counter() - t0) / min(8, len(items))
    n = max(16, int(ROUND_SECONDS / per_call))
    n -= n % threads
    clean, best_any = [], 0.0
    deadline = time.monotonic() + ROUND_BUDGET
    while len(clean) < ROUNDS and time.monotonic() < deadline:
        share = n // threads
        barrier = threading.Barrier(threads + 1)

        def work(offset, barrier=barrier, share=share):
            barrier.wait()
            for k in range(share):
                fn(items[(offset + k) % len(items)])

        pool = [threading.Thread(target=work, args=(t * share,)) for t in range(threads)]
        for t in pool:
            t.start()
        busy0, cpu0 = _machine_busy_seconds(), _cpu_seconds()
        barrier.wait()
        t0 = time.perf_counter()
        for t in pool:
            t.join()
        seconds = time.perf_counter() - t0
        rate = n / seconds
        best_any = max(best_any, rate)
        if busy0 is None:
            clean.append(rate)
            continue
        foreign = max(0.0, (_machine_busy_seconds() - busy0) - (_cpu_seconds() - cpu0)) / (seconds * cores())
        if foreign <= FOREIGN_LIMIT:
            clean.append(rate)
    return max(clean) if clean else best_any


def _readers():
    """name -> (function of a path, which files): the readers compared."""
    import wave

    import soundfile as sf

    def sf_read(path):
        return sf.read(path, dtype="float32", always_2d=True)[0]

    def wave_full(path):  # the standard library: PCM WAV only, no FLAC, no float WAV
        with wave.open(path) as w:
            data = w.readframes(w.getnframes())
        return np.frombuffer(data, "<i2").astype(np.float32) * np.float32(1 / 32768)

    def wave_window(path):
        with wave.open(path) as w:
            w.setpos(RATE // 2)
            data = w.readframes(CROP)
        return np.frombuffer(data, "<i2").astype(np.float32) * np.float32(1 / 32768)

    rng = np.random.default_rng(0)
    readers = {
        "soundfile sf.read (whole file)": (sf_read, "both"),
        "feedline load_audio (whole file)": (load_audio, "both"),
        "feedline load_random_crop (1 s of 2 s)": (lambda p: load_random_crop(p, CROP, rng), "both"),
        "stdlib wave + numpy (whole file)": (wave_full, "wav"),
        "stdlib wave + numpy (1 s of 2 s)": (wave_window, "wav"),
    }
    try:
        from scipy.io import wavfile

        readers["scipy.io.wavfile (whole file)"] = (lambda p: wavfile.read(p)[1], "wav")
    except ImportError:
        pass
    return readers


def _mean_kb(paths) -> float:
    return float(np.mean([os.path.getsize(p) for p in paths])) / 1e3


def run_decoders(max_wait: float) -> int:
    import platform

    import soundfile as sf

    wavs, flacs = clip_folder(64, "WAV"), clip_folder(64, "FLAC")
    long_flac = os.path.join(cache_dir(), "audio-long-60s.flac")
    if not os.path.exists(long_flac):
        sf.write(long_flac, np.concatenate([speechlike(RATE * 2, SEED + k) for k in range(30)]), RATE, subtype="PCM_16")
    print(f"host: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"soundfile {_soundfile_version()}")
    print(f"clips: 2 s 16 kHz mono PCM-16; WAV {_mean_kb(wavs):.0f} KB, FLAC {_mean_kb(flacs):.0f} KB on average")
    from .runner import wait_quiet

    rows = []
    for name, (fn, which) in _readers().items():
        for fmt, items in (("WAV", wavs), ("FLAC", flacs)):
            if which not in ("both", fmt.lower()):
                continue
            wait_quiet(max_wait)
            one, two = _rate(fn, items, 1), _rate(fn, items, 2)
            rows.append((name, fmt, one, two / one))
            print(f"  {name:40s} {fmt:5s} {1e6 / one:7.0f} us/file  {one:7.0f} files/s  x2 threads {two / one:4.2f}", flush=True)
    wait_quiet(max_wait)
    one, two = _rate(load_audio, [long_flac], 1), _rate(load_audio, [long_flac], 2)
    rows.append(("feedline load_audio, one 60 s file", "FLAC", one, two / one))
    print(f"  {'feedline load_audio, one 60 s file':40s} FLAC  {1e6 / one:7.0f} us/file  x2 threads {two / one:4.2f}")
    print()
    print("| reader | format | us per file (1 thread) | files/s per core | x2 threads |")
    print("|---|---|---:|---:|---:|")
    for name, fmt, one, scale in rows:
        print(f"| {name} | {fmt} | {1e6 / one:.0f} | {one:.0f} | {scale:.2f} |")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m benchmarks.audio", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s4 = sub.add_parser("story4", help="WAV -> 1 s crop -> log-mel, batch 128: feedline vs DataLoader vs serial")
    s4.add_argument("--loader", action="append", help=f"repeatable; default: {', '.join(STORY4_LOADERS)}")
    s4.add_argument("--quick", action="store_true", help="512 clips, 1 repetition, no waiting: a smoke test")
    s4.add_argument("--reps", type=int, default=None, help="timed repetitions per loader (default 5; quick: 1)")
    s4.add_argument("--max-wait", type=float, default=None, help="seconds to wait for a quiet machine before each run")
    s4.add_argument("--append", action="store_true", help="append the section to benchmarks/RESULTS.md")
    dec = sub.add_parser("decoders", help="per-file decode time and thread scaling by reader")
    dec.add_argument("--max-wait", type=float, default=120.0, help="seconds to wait for a quiet machine before each row")
    args = p.parse_args(argv)
    if args.command == "decoders":
        return run_decoders(args.max_wait)
    return run_story4(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
