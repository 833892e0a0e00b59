"""Story 4: an audio pipeline that should prepare the next batch while the model trains.

The user reads WAV files and post-processes them (2 s per batch), then the
GPU trains (1 s), then the CPU starts again: nothing overlaps. tf.data with
``py_function`` does not help much, because Python work inside tf.data holds
the GIL.

This script makes 384 one-second WAV files and runs the same training loop
(a ``tf.function`` step on a small model) fed three ways:

- old: prepare a batch, then train on it (the ``input_fn`` with no overlap);
- old: tf.data with ``numpy_function``, parallel map and ``prefetch(1)``;
- new: feedline (``pipe.tf()``): batches prepared in worker processes,
  ahead of the step, shuffled by index (file names, never decoded audio).

This machine has no accelerator, so the accelerator's share of each step
is simulated with ``time.sleep`` (the CPU is idle during it, as it is while
a GPU computes); the model's own CPU step runs for real.

Run (about 30-50 s on 2 CPU cores):

    python examples/story4_audio_overlap.py
"""

from __future__ import annotations

import os
import tempfile
import time
import wave

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

import feedline as fl

COUNT, RATE, BATCH, EPOCHS, CLASSES = 384, 16000, 32, 1, 4
FRAME, HOP, BANDS = 400, 160, 40
ACCELERATOR_SECONDS = 0.18  # simulated device time per step (about half the preparation, as in the story)


def make_wavs(folder: str) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, size=COUNT)
    t = np.arange(RATE) / RATE
    paths = []
    for i in range(COUNT):
        tone = np.sin(2 * np.pi * (220 * (1 + labels[i])) * t) * 0.3 + rng.normal(0, 0.1, RATE)
        path = os.path.join(folder, f"clip{i:04d}.wav")
        with wave.open(path, "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(RATE)
            f.writeframes((np.clip(tone, -1, 1) * 32767).astype("<i2").tobytes())
        paths.append(path)
    return paths, labels


_BANDS = np.array_split(np.arange(FRAME // 2 + 1), BANDS)


def features(path: str) -> np.ndarray:
    """Read a WAV and post-process it: framed FFT, band energies, per-frame normalisation."""
    with wave.open(path, "rb") as f:
        audio = np.frombuffer(f.readframes(f.getnframes()), "<i2").astype(np.float32) / 32768.0
    frames = np.lib.stride_tricks.sliding_window_view(audio, FRAME)[::HOP] * np.hanning(FRAME)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    rows = []
    for frame in power:  # the user's Python post-processing, frame by frame
        bands = np.array([frame[b].sum() for b in _BANDS])
        logged = np.log(bands + 1e-6)
        rows.append((logged - logged.mean()) / (logged.std() + 1e-6))
    return np.asarray(rows, np.float32)


def build_step():
    model = tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(CLASSES)])
    optimizer = tf.keras.optimizers.Adam(1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    def train_step(x, y):
        loss = step(x, y)
        time.sleep(ACCELERATOR_SECONDS)  # the accelerator's share of the step (see the module docstring)
        return loss

    return train_step


def train(batches) -> float:
    train_step = build_step()
    start = time.perf_counter()
    for x, y in batches:
        train_step(x, y)
    return time.perf_counter() - start


def prepare_then_train(paths, labels):
    order = np.random.default_rng(0).permutation(len(paths))
    for k in range(0, len(order), BATCH):
        chosen = order[k : k + BATCH]
        yield np.stack([features(paths[i]) for i in chosen]), labels[chosen]


def tf_data(paths, labels):
    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(paths), seed=0)  # names, not audio
    ds = ds.map(lambda p, y: (tf.numpy_function(lambda s: features(s.decode()), [p], tf.float32), y), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(BATCH).prefetch(1)


def main():
    with tempfile.TemporaryDirectory() as folder:
        paths, labels = make_wavs(folder)
        per_batch = time.perf_counter()
        [features(p) for p in paths[:BATCH]]
        per_batch = time.perf_counter() - per_batch
        steps = -(-COUNT // BATCH) * EPOCHS
        print(f"Story 4: {COUNT} WAV files, batch {BATCH}, {steps} steps; preparing a batch takes {per_batch:.2f} s "
              f"on one core, the (simulated) accelerator {ACCELERATOR_SECONDS:.2f} s per step; {os.cpu_count()} CPUs\n")
        print(f"  old: prepare, then train (no overlap)        {train(prepare_then_train(paths, labels)):6.1f} s")
        print(f"  old: tf.data, numpy_function, prefetch(1)    {train(tf_data(paths, labels)):6.1f} s")
        pipe = fl.from_files(paths, labels=labels).shuffle(seed=0).map(lambda s: (features(s[0]), s[1])).batch(BATCH)
        with pipe:
            fed = train(pipe.tf())
            print(f"  new: feedline, pipe.tf()                     {fed:6.1f} s   (includes starting {pipe.stats().workers} workers)")
            waited = pipe.stats().wait_seconds
            print(f"      the training loop waited {waited:.1f} s of {fed:.1f} s for data; "
                  f"{steps * ACCELERATOR_SECONDS:.1f} s is the accelerator's own time")


main()
