"""What indexing and reading WebDataset, TFRecord and ArrayRecord files cost (docs/formats.md, "Measured").

Run (from the repository root, in the project's virtualenv, with ``.[test]``):

    python -m benchmarks.shard_formats              # ~1 minute on a shared 2-core host
    python -m benchmarks.shard_formats --scale 0.1  # smoke test

Data, written to a temporary folder (page cache) before timing: 8 tar
shards of 1,000 samples (a 10 kB ``jpg`` of random bytes, ``cls``,
``json``: 24,000 members); 4 TFRecord files of 10,000 ``tf.train.Example``
written by TensorFlow (int64 label, 128 floats, 2 kB of bytes); 2
ArrayRecord files of 20,000 records of 2.6 kB. Medians of ``--reps`` runs;
CPU is this process's CPU time, steadier than wall time on a shared host.

Last run (2026-11-23 18:10 UTC, ``--reps 5``, 2-core AMD EPYC shared with
other jobs, load average 5-6: wall times are rough, CPU times steadier):

    index from_webdataset: 0.38 s wall, 21 us CPU per sample (3 members)
    tar headers, one thread: tarfile 19.7 us CPU per member, feedline's plain-header scan 5.4 us
    index from_tfrecord: 0.19 s wall, 2.3 us CPU per record (length CRC checked)
    serial reads, shuffled: webdataset 11,295/s (40 us CPU); tfrecord Example 12,015/s (39 us CPU),
        bytes 32,805/s (14 us CPU); array_record 11,526/s (45 us CPU)
    tf.train.Example decode, CPU per record: feedline 12.7 us; tf.train.Example.FromString + same
        conversion 12.8 us; tf.io.parse_single_example (eager) 333 us
    tf.data.TFRecordDataset, in order, eager: 10,701 records/s
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import shutil
import statistics
import tarfile
import tempfile
import time

import numpy as np

import feedline as fl
from feedline.sources._tar_index import _tarfile_members, tar_members
from feedline.sources._tf_example import decode_example


def make(folder: str, scale: float) -> None:
    import tensorflow as tf
    from array_record.python.array_record_module import ArrayRecordWriter

    rng = np.random.default_rng(0)
    per_shard, per_file = max(10, int(1000 * scale)), max(10, int(10000 * scale))
    i = 0
    for s in range(8):
        with tarfile.open(f"{folder}/w-{s:03d}.tar", "w") as tar:
            for _ in range(per_shard):
                for ext, data in (("jpg", rng.bytes(10000)), ("cls", str(i % 10).encode()), ("json", json.dumps({"i": i}).encode())):
                    info = tarfile.TarInfo(f"k{i:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                i += 1
    for f in range(4):
        with tf.io.TFRecordWriter(f"{folder}/t-{f}.tfrecord") as w:
            for k in range(per_file):
                w.write(example(tf, rng, f * per_file + k))
    for f in range(2):
        writer = ArrayRecordWriter(f"{folder}/a-{f}.array_record", "group_size:1")
        for _ in range(2 * per_file):
            writer.write(rng.bytes(2600))
        writer.close()


def example(tf, rng, i: int) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
        "emb": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(128, dtype=np.float32))),
        "blob": tf.train.Feature(bytes_list=tf.train.BytesList(value=[rng.bytes(2000)])),
    })).SerializeToString()


def timed(fn, reps: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of ``fn()``."""
    walls, cpus = [], []
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def shuffled_reads(source, reps: int) -> str:
    order = np.random.default_rng(1).permutation(len(source))
    wall, cpu = timed(lambda: [source.read(int(i)) for i in order], reps)
    return f"{len(source) / wall:,.0f}/s ({cpu / len(source) * 1e6:.0f} us CPU)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the default data size (and of the decode timings' records)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="feedline-shards-")
    try:
        make(folder, args.scale)
        report(folder, args.reps, decodes=max(100, round(5000 * args.scale)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(folder: str, reps: int, decodes: int = 5000) -> None:
    """Print the index, header-scan, read and decode costs of the shards in ``folder`` (``decodes``: records per decode timing)."""
    import tensorflow as tf

    tars = sorted(glob.glob(f"{folder}/w-*.tar"))
    wds = fl.from_webdataset(tars).source
    wall, cpu = timed(lambda: fl.from_webdataset(tars), reps)
    print(f"index from_webdataset: {wall:.2f} s wall, {cpu / len(wds) * 1e6:.0f} us CPU per sample (3 members)")

    def headers(fn):
        for path in tars:
            with open(path, "rb") as f:
                fn(f, path) if fn is tar_members else fn(f, path, f.seek(0, os.SEEK_END))

    members = 3 * len(wds)
    _, slow = timed(lambda: headers(_tarfile_members), reps)
    _, fast = timed(lambda: headers(tar_members), reps)
    print(f"tar headers, one thread: tarfile {slow / members * 1e6:.1f} us CPU per member, "
          f"feedline's plain-header scan {fast / members * 1e6:.1f} us")

    records = f"{folder}/t-*.tfrecord"
    tfr = fl.from_tfrecord(records).source
    wall, cpu = timed(lambda: fl.from_tfrecord(records), reps)
    print(f"index from_tfrecord: {wall:.2f} s wall, {cpu / len(tfr) * 1e6:.1f} us CPU per record (length CRC checked)")
    raw = fl.from_tfrecord(records, decode=None).source
    arr = fl.from_array_record(f"{folder}/a-*.array_record").source
    print(f"serial reads, shuffled: webdataset {shuffled_reads(wds, reps)}; tfrecord Example {shuffled_reads(tfr, reps)}, "
          f"bytes {shuffled_reads(raw, reps)}; array_record {shuffled_reads(arr, reps)}")

    data = raw.read(0)
    n = decodes

    def tf_proto():
        m = tf.train.Example.FromString(data)
        out = {}
        for k, v in m.features.feature.items():
            kind = v.WhichOneof("kind")
            out[k] = (np.array(v.int64_list.value, np.int64) if kind == "int64_list" else
                      np.array(v.float_list.value, np.float32) if kind == "float_list" else list(v.bytes_list.value))
        return out

    spec = {"label": tf.io.FixedLenFeature([1], tf.int64), "emb": tf.io.FixedLenFeature([128], tf.float32),
            "blob": tf.io.FixedLenFeature([], tf.string)}
    _, ours = timed(lambda: [decode_example(data) for _ in range(n)], reps)
    _, theirs = timed(lambda: [tf_proto() for _ in range(n)], reps)
    _, parsed = timed(lambda: [tf.io.parse_single_example(data, spec) for _ in range(n // 10)], reps)
    print(f"tf.train.Example decode, CPU per record: feedline {ours / n * 1e6:.1f} us; tf.train.Example.FromString + same "
          f"conversion {theirs / n * 1e6:.1f} us; tf.io.parse_single_example (eager) {parsed / (n // 10) * 1e6:.0f} us")
    dataset = tf.data.TFRecordDataset(sorted(glob.glob(records)))
    wall, _ = timed(lambda: sum(1 for _ in dataset), reps)
    print(f"tf.data.TFRecordDataset, in order, eager: {len(tfr) / wall:,.0f} records/s")


if __name__ == "__main__":
    main()
