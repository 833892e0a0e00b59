"""The story examples' pipelines with the automatic choice against each backend set by hand (issue 15).

Run (from the repository root, in the project's virtualenv with ``.[test]``):

    python -m benchmarks.stories             # ~8 minutes on a 2-core host
    python -m benchmarks.stories --quick     # smoke test: smaller data, one round, no untimed runs first
    python -m benchmarks.stories --scale 8   # on 16 cores or more: epochs 8x longer (a few tasks per worker)
    python -m benchmarks.stories --only story1 --spans /tmp/spans.jsonl   # and each run's task spans
    python -m benchmarks.stories --settings auto,thread,process              # no serial loop, nothing remembered
    python -m benchmarks.stories --base ../older/src   # another checkout's automatic choice in the same rounds

For each example in ``examples/``, the feedline pipeline it builds, taken
from the example itself: its definitions (imports, constants, functions,
classes) are loaded from the file with its run code left out (every example
runs at import: story 1 has no ``__main__`` guard on purpose), so the
benchmark cannot drift from the examples. The stories:

- ``story1``: the Keras ``Sequence`` with pure-Python augmentation, through
  ``feedline.adapters.keras.from_keras_sequence`` (a batch per item);
- ``story2 PNG``: 512x512 PNG image and mask pairs, decoded, cropped, one-hot;
- ``story2 decoded``: the same, decoded once into memory-mapped arrays;
- ``story3``: PNG files with a corrupt few, decoded, rotated, blurred,
  resized, ``on_error="skip"``;
- ``story4``: WAV files to band energies with per-frame Python.

Each is run with ``backend=None`` (automatic: the first run of a pipeline,
nothing remembered), ``remembered`` (the same, started on the verdict an
earlier run's trial left in a file of its own, `feedline.engine._remembered`:
every later run of a training script), ``"thread"``, ``"process"``
and ``"serial"`` (workers left to feedline), one epoch with start-up
included, every run in a fresh interpreter (its imports not timed:
describing the pipeline, starting workers and the epoch are; ``--setup S``
sleeps S seconds, untimed, between describing and iterating, as a training
script builds its model there), ``--reps`` rounds in a seeded shuffled
order (not a rotation: each setting would always run right after the same
one), medians, after one untimed run per story and two untimed automatic runs whose trials agree on the verdict to remember (the
benchmark's first run was its slowest: story 1's automatic row ran 331
samples/s there against 387-439 after; a cold file cache is the likely
cause, not shown). Every run must deliver the example's
whole epoch (the rows are counted). ``--scale K`` makes each example's
epoch K times longer (story 1's batches, the others' files): as written,
their epochs hold 12-32 tasks, fewer than two per worker on 16 cores,
where a run measures little but start-up and the automatic choice's trial
cannot finish within the epoch. Reported per story: samples/s of each
setting, the automatic choice against the best and the worst hand setting
and against serial, and the automatic choice's ``stats().decision``.
``--base SRC`` (`benchmarks.feedline_sources`) adds a setting "base": the
automatic choice of the feedline in another checkout's ``src``, run in the
same rounds, and two columns: base / best, and auto / base as the median of
each round's own ratio (paired: the two ran minutes apart, not an hour).

Last run: benchmarks/history/2026-11-29-thirty-eighth-session-where-the-automatic-choice.md
(and benchmarks/history/undated-story-examples-automatic-choice-vs-hand-settings.md).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types

from .feedline_sources import compile_sources, environment
from .tables import markdown_table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")
SETTINGS = ("auto", "remembered", "thread", "process", "serial")
SPANS_VAR = "FEEDLINE_STORIES_SPANS"  # set by `--spans` for the timed runs' children


def load_definitions(path: str, name: str, overrides: dict | None = None) -> types.ModuleType:
    """The example at ``path`` as a module of its definitions only: nothing of what it runs at import.

    Kept: imports, function and class definitions, and assignments that
    call nothing the example itself defines (constants, a lambda, NumPy
    tables); dropped: bare calls (``main()``), ``if``/``with`` blocks and
    assignments that run the example's own code (``plain = timed_fit(...)``).
    ``overrides`` replace constants (smaller data for ``--quick``). The
    module's name is not importable, so its functions are registered to
    travel to process workers by value, as a script's do. An import of a
    module this machine lacks is left out with a line on stderr (story 4
    imports TensorFlow for its tf.data comparison, which the benchmark does
    not run; a machine without TensorFlow still runs its feedline rows).
    """
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}

    def runs_own_code(node) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined for n in ast.walk(node))

    kept = [node for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
            or (isinstance(node, (ast.Assign, ast.AnnAssign)) and not runs_own_code(node))]
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # to workers by value, as a script's functions go
    for node in kept:
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), module.__dict__)
        except ModuleNotFoundError as e:
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                raise
            print(f"{os.path.basename(path)}: line {node.lineno} left out ({e}); what needs it is not run here", file=sys.stderr)
    for key, value in (overrides or {}).items():
        setattr(module, key, value)
    return module


SCALED = {"story1": "BATCHES", "story2": "COUNT", "story3": "COUNT", "story4": "COUNT"}  # sets the epoch's length (--scale)
QUICK = {  # smaller data for --quick (the smoke test)
    "story1": {"BATCHES": 3, "BATCH_SIZE": 4, "SIZE": 16},
    "story2": {"COUNT": 12},
    "story3": {"COUNT": 40, "CORRUPT": {3, 17}},
    "story4": {"COUNT": 48},
}
FILES = {"story1": "story1_keras_sequence_spawn.py", "story2": "story2_png_segmentation.py",
         "story3": "story3_larger_than_memory.py", "story4": "story4_audio_overlap.py"}


def definitions(story: str, size: str) -> types.ModuleType:
    """The example's definitions at ``size``: "quick" (the smoke test's data), or "xK" (its epoch K times as long)."""
    ex = load_definitions(os.path.join(EXAMPLES, FILES[story]), f"_story_{story}", QUICK[story] if size == "quick" else None)
    if size != "quick":
        setattr(ex, SCALED[story], getattr(ex, SCALED[story]) * int(size[1:]))
    return ex


def prepare(story: str, folder: str, size: str) -> dict:
    """Write the example's data (outside the clock); what a run needs to find it."""
    ex = definitions(story, size)
    if story == "story2":
        import numpy as np
        from PIL import Image

        images, masks = ex.make_dataset(folder)
        for kind, paths in (("images", images), ("masks", masks)):
            stored = np.lib.format.open_memmap(os.path.join(folder, f"{kind}.npy"), "w+", np.uint8,
                                               (ex.COUNT, ex.SIDE, ex.SIDE, 3))
            for i, p in enumerate(paths):
                stored[i] = np.asarray(Image.open(p).convert("RGB"))
            stored.flush()
        return {"images": images, "masks": masks, "folder": folder}
    if story == "story3":
        paths, labels = ex.make_folder(folder)
        return {"paths": paths, "labels": [int(v) for v in labels]}
    if story == "story4":
        paths, labels = ex.make_wavs(folder)
        return {"paths": paths, "labels": [int(v) for v in labels]}
    return {}


def build(story: str, variant: str, ex, data: dict, backend):
    """The pipeline the example builds (the same calls), with ``backend`` for its map; and the rows it must deliver."""
    import numpy as np

    import feedline as fl

    kw = {} if backend is None else {"backend": backend}
    if story == "story1":
        from feedline.adapters.keras import from_keras_sequence

        return from_keras_sequence(ex.DummySequence(), **kw), ex.BATCHES * ex.BATCH_SIZE
    if story == "story2" and variant == "PNG":
        pipe = fl.from_files(data["images"], labels=data["masks"]).shuffle(seed=0).map(ex.load_pair, **kw)
        return pipe.batch(ex.BATCH, drop_remainder=True), ex.COUNT // ex.BATCH * ex.BATCH
    if story == "story2":
        stored = fl.from_arrays(np.load(os.path.join(data["folder"], "images.npy"), mmap_mode="r"),
                                np.load(os.path.join(data["folder"], "masks.npy"), mmap_mode="r"))
        crop = ex.crop_and_encode
        pipe = stored.shuffle(seed=0).map(lambda pair, rng: crop(pair[0], pair[1], rng), **kw)
        return pipe.batch(ex.BATCH, drop_remainder=True), ex.COUNT // ex.BATCH * ex.BATCH
    if story == "story3":
        load = ex.load
        pipe = fl.from_files(data["paths"], labels=np.asarray(data["labels"])).shuffle(seed=42)
        pipe = pipe.map(lambda s, rng: (load(s[0], rng), s[1]), on_error="skip", **kw).batch(ex.BATCH)
        return pipe, ex.COUNT - len(ex.CORRUPT)
    features = ex.features
    pipe = fl.from_files(data["paths"], labels=np.asarray(data["labels"])).shuffle(seed=0)
    return pipe.map(lambda s: (features(s[0]), s[1]), **kw).batch(ex.BATCH), ex.COUNT


def run_once(argv) -> None:
    """In a fresh interpreter: one epoch of one story with one setting; prints a JSON line."""
    story, variant, setting, size, data_file, setup = argv[0], argv[1], argv[2], argv[3], argv[4], float(argv[5])
    import warnings

    warnings.filterwarnings("ignore")
    with open(data_file) as f:
        data = json.load(f)
    ex = definitions(story, size)
    import feedline  # imported before the clock, as the example's own imports are

    start = time.perf_counter()
    pipe, expected = build(story, variant, ex, data, None if setting in ("auto", "remembered", "base") else setting)
    time.sleep(setup)  # a training script's set-up between describing and iterating (building the model): not timed
    rows = 0
    with pipe:
        for item in pipe:
            rows += len(item[1]) if isinstance(item, tuple) else len(item)
        seconds = time.perf_counter() - start - setup
        stats = pipe.stats()
    if os.environ.get(SPANS_VAR):  # `--spans`: where the run's time went, task by task
        with open(os.environ[SPANS_VAR], "a") as f:
            f.write(json.dumps({"story": story, "variant": variant, "setting": setting, "seconds": seconds,
                                "feedline": os.path.dirname(os.path.abspath(feedline.__file__)),
                                "ran_as": f"{stats.backend} x{stats.workers}", "decision": stats.decision,
                                "spans": [[w, a - start, b - start, n, r] for w, a, b, n, r in stats.task_spans],
                                "waits": [[a - start, b - start, r] for a, b, r in stats.waits]}) + "\n")
    print(json.dumps({"rows": rows, "expected": expected, "seconds": seconds,
                      "ran_as": f"{stats.backend} x{stats.workers}", "decision": stats.decision}))


def main(argv=None) -> None:
    from feedline.engine.choice import DEFAULT_POLICY  # (here: a run's fresh interpreter may import another checkout's)

    parser = argparse.ArgumentParser(prog="python -m benchmarks.stories", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="rounds (each setting once per round, seeded shuffled order)")
    parser.add_argument("--quick", action="store_true", help="small data, one round and no untimed runs: a smoke test")
    parser.add_argument("--only", action="append", help="run only these stories (e.g. --only story4)")
    parser.add_argument("--scale", type=int, default=1, help="each example's epoch this many times as long (default 1)")
    parser.add_argument("--spans", metavar="FILE",
                        help="append each timed run's task spans (worker, start, end, task, rows; seconds from "
                             "describing the pipeline), the consumer's waits and the feedline it imported to FILE, "
                             "one JSON line a run")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help="which of auto,remembered,thread,process,serial to run (auto and one hand setting at "
                             "least; on a big machine the serial loop and the remembered runs take minutes)")
    parser.add_argument("--base", metavar="SRC", help="the src folder of another feedline checkout: its automatic "
                        "choice runs in the same rounds (setting 'base'), with base / best and auto / base columns")
    parser.add_argument("--setup", type=float, default=0.0,
                        help="seconds of set-up between describing the pipeline and iterating it, as a training script "
                             "builds its model there (not timed; default 0)")
    args = parser.parse_args(argv)
    reps = 1 if args.quick else args.reps
    if args.scale < 1:
        parser.error(f"--scale must be a whole number of 1 or more, not {args.scale}")
    size = "quick" if args.quick else f"x{args.scale}"
    settings = tuple(s for s in SETTINGS if s in args.settings.split(",")) + (("base",) if args.base else ())
    unknown = set(args.settings.split(",")) - set(SETTINGS)
    if unknown or "auto" not in settings or not {"thread", "process", "serial"} & set(settings):
        parser.error(f"--settings takes auto and at least one of thread, process, serial from {','.join(SETTINGS)}; "
                     f"got {args.settings}")
    cases = [("story1", "Sequence"), ("story2", "PNG"), ("story2", "decoded"), ("story3", "files"), ("story4", "WAV")]
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    spans = {SPANS_VAR: os.path.abspath(args.spans)} if args.spans else {}
    environment({}, args.base)  # (an error now, not after the first story's data is written)
    compile_sources(args.base)
    env = {**os.environ, **spans, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")]),
           "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "numpy")}
    print(f"load average at the start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {os.cpu_count()} CPUs; "
          f"{reps} round(s); {args.setup:g} s of set-up between describing and iterating; epochs x{args.scale}")
    rows_out = []
    with tempfile.TemporaryDirectory(prefix="feedline-stories-") as work:
        for story, variant in cases:
            folder = os.path.join(work, story)
            os.makedirs(folder, exist_ok=True)
            data_file = os.path.join(folder, "data.json")
            if not os.path.exists(data_file):
                with open(data_file, "w") as f:
                    json.dump(prepare(story, folder, size), f)
            runs = {s: [] for s in settings}
            decisions = []
            memory = {**env, "FEEDLINE_REMEMBER": os.path.join(folder, f"choices-{variant}.json")}
            forget = {**env, "FEEDLINE_REMEMBER": "0"}
            envs = {"remembered": memory, "base": environment(forget, args.base)}
            untimed = [("process", forget)] if not args.quick else []  # the benchmark's first run was its slowest (see the docstring)
            agree = [("auto", memory)] * DEFAULT_POLICY.remember.agree if "remembered" in settings and not args.quick else []  # ... the
            # trials whose verdict the remembered runs start on (not in --quick: its epochs are too short for a
            # verdict to remember, and the smoke test ran 10 more Keras-importing interpreters for them)
            for setting, setting_env in untimed + agree:
                subprocess.run([sys.executable, "-m", "benchmarks.stories", "--one", story, variant, setting,
                                size, data_file, "0"], cwd=ROOT, env=dict(setting_env, **{SPANS_VAR: ""}),
                               capture_output=True, text=True, timeout=600)
            for rep in range(reps):
                for setting in random.Random(rep).sample(settings, len(settings)):
                    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--one", story, variant, setting,
                                           size, data_file, str(args.setup)],
                                          cwd=ROOT, env=envs.get(setting, forget),
                                          capture_output=True, text=True, timeout=600)
                    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                    if done.returncode != 0 or not lines:
                        raise SystemExit(f"benchmarks.stories: {story} {variant} {setting} failed:\n{done.stderr[-3000:]}")
                    m = json.loads(lines[-1])
                    if m["rows"] != m["expected"]:
                        raise SystemExit(f"benchmarks.stories: {story} {variant} {setting} delivered {m['rows']} rows "
                                         f"where the epoch has {m['expected']}")
                    runs[setting].append(m)
                    if setting in ("auto", "remembered", "base"):
                        decisions.append(f"{setting}, {m['ran_as']}: {m['decision']}")
                    print(f"    {story} {variant:9s} {setting:8s} rep {rep}: {m['rows'] / m['seconds']:8.1f} samples/s "
                          f"({m['ran_as']})", flush=True)
            rate = {s: statistics.median(m["rows"] / m["seconds"] for m in runs[s]) for s in settings}
            hand = {s: rate[s] for s in ("thread", "process", "serial") if s in rate}
            best, worst = max(hand, key=hand.get), min(hand, key=hand.get)
            ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"  # noqa: E731 - "-" for a setting not run
            rows_out.append([f"{story} {variant}", *(f"{rate[s]:.1f}" if s in rate else "-" for s in SETTINGS), best,
                             ratio(rate["auto"], hand[best]), ratio(rate.get("remembered"), hand[best]),
                             ratio(rate["auto"], hand[worst]), ratio(rate["auto"], rate.get("serial"))])
            if args.base:
                paired = statistics.median((a["rows"] / a["seconds"]) / (b["rows"] / b["seconds"])
                                           for a, b in zip(runs["auto"], runs["base"]))
                rows_out[-1][9:9] = [ratio(rate["base"], hand[best]), f"{paired:.2f}"]
            print(f"  {story} {variant}: automatic choice, each round: " + " | ".join(decisions), flush=True)
    header = ["story", "auto", "remembered", "thread", "process", "serial", "best hand", "auto / best", "remembered / best",
              "auto / worst", "auto / serial"]
    if args.base:
        header[9:9] = ["base / best", "auto / base (paired)"]
    print("\nsamples/s, one epoch with start-up, medians:\n")
    print(markdown_table(header, rows_out, "lrrrrrlrrrr" + "rr" * bool(args.base)))
    print(f"\nload average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        run_once(sys.argv[2:])
    else:
        main()
