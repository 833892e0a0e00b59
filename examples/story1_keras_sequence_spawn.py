"""Story 1: a Keras Sequence with CPU-bound augmentation, under the ``spawn`` start method.

The user (Keras on Windows) augments images in plain Python inside a
``keras.utils.Sequence``. Keras's threads give no speed-up (the GIL), and
Keras's processes under ``spawn`` (Windows, macOS, notebooks) freeze when the
script has no ``if __name__ == "__main__":`` guard. feedline runs the very
same Sequence in worker processes, under ``spawn``, with a lambda in it and
no guard.

Run (any OS; about 30-60 s on 2 CPU cores; Keras's backend from KERAS_BACKEND):

    python examples/story1_keras_sequence_spawn.py           # all four runs
    python examples/story1_keras_sequence_spawn.py --quick   # skip the 15 s freeze demonstration

This script deliberately has no ``__main__`` guard.
"""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras

from feedline.adapters.keras import from_keras_sequence

multiprocessing.set_start_method("spawn", force=True)  # what Windows and macOS use

BATCHES, BATCH_SIZE, EPOCHS, SIZE = 12, 16, 3, 64
FREEZE_TIMEOUT = 15  # seconds before the Keras-processes run is declared frozen

jitter = lambda value, amount: value + amount  # noqa: E731 - story 1 writes a module-level lambda: what plain pickle under spawn cannot send


class DummySequence(keras.utils.Sequence):
    """Random images with a per-pixel Python augmentation (holds the GIL, as such code does)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def __len__(self):
        return BATCHES

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        images = rng.integers(0, 256, size=(BATCH_SIZE, SIZE, SIZE, 3)).tolist()
        for image in images:  # pure-Python augmentation: brightness jitter and clipping, pixel by pixel
            shift = int(rng.integers(-20, 21))
            for row in image:
                for pixel in row:
                    for c in range(3):
                        pixel[c] = min(255, max(0, jitter(pixel[c], shift)))
        x = np.asarray(images, dtype="float32") / 255.0
        y = (x.mean(axis=(1, 2, 3)) > 0.5).astype("float32")[:, None]
        return x, y


def build_model():
    model = keras.Sequential([
        keras.Input((SIZE, SIZE, 3)),
        keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


def timed_fit(data):
    model = build_model()
    start = time.perf_counter()
    model.fit(data, epochs=EPOCHS, verbose=0)
    return time.perf_counter() - start


if "--keras-processes" in sys.argv:
    # Keras's own process pool, under spawn, in a script without a __main__ guard:
    # every worker re-runs this file and fails while starting, and fit() waits forever.
    timed_fit(DummySequence(workers=2, use_multiprocessing=True))
    print("finished")
    sys.exit(0)


def keras_processes_under_spawn() -> str:
    """Run the Keras-processes variant in a child; report whether it finished or froze."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--keras-processes"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=hasattr(os, "setsid"),
    )
    start = time.perf_counter()
    try:
        out, _ = child.communicate(timeout=FREEZE_TIMEOUT)
    except subprocess.TimeoutExpired:
        if hasattr(os, "killpg"):
            os.killpg(child.pid, signal.SIGKILL)  # the child and the pool workers it keeps restarting
        else:
            child.kill()
        child.communicate()
        return f"froze: no batch after {FREEZE_TIMEOUT} s (killed)"
    if "finished" in out:
        return f"{time.perf_counter() - start:6.1f} s (finished)"
    last = [line for line in out.splitlines() if "Error" in line]
    return "failed: " + (last[-1].strip() if last else out.strip()[-200:])


print(f"Story 1: {EPOCHS} epochs x {BATCHES} batches of {BATCH_SIZE} images, Python augmentation, "
      f"start method '{multiprocessing.get_start_method()}', Keras backend {keras.backend.backend()}, "
      f"{os.cpu_count()} CPUs\n")
plain = timed_fit(DummySequence())
print(f"  old: Keras Sequence, no workers          {plain:6.1f} s")
threads = timed_fit(DummySequence(workers=2))
print(f"  old: Keras Sequence, 2 worker threads    {threads:6.1f} s   (the GIL: little or no gain)")
if "--quick" in sys.argv:
    print("  old: Keras Sequence, 2 worker processes  (skipped with --quick)")
else:
    print(f"  old: Keras Sequence, 2 worker processes  {keras_processes_under_spawn()}")

pipe = from_keras_sequence(DummySequence())  # the same Sequence, unchanged
with pipe:
    fed = timed_fit(pipe.keras())
    print(f"  new: feedline, same Sequence             {fed:6.1f} s   ({plain / fed:.1f}x the plain run; "
          "includes starting the workers)\n")
    print(pipe)
