"""A store on S3: write it once, upload it, train from its URL.

``feedline.store.StoreWriter`` writes decoded samples (here small images and
labels) into a store folder; the folder is uploaded as it is; then
``fl.from_store("s3://...")`` reads it by URL. Each of the store's files is
downloaded once into a local cache that every worker and process on the
machine shares (bounded by ``cache_limit``), read ahead in the order the
epoch reads it, then memory-mapped like a local store.

Run against any S3 API (AWS, MinIO, Ceph, a moto server); credentials come
from the usual places (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, a
profile, an instance role). ``pip install 'feedline[remote,store]'``:

    python examples/s3_store.py s3://my-bucket/feedline-example/train.store
    python examples/s3_store.py s3://bucket/train.store --endpoint-url http://127.0.0.1:9000   # MinIO, moto
"""

import argparse
import os
import tempfile

import fsspec
import numpy as np

import feedline as fl
from feedline.store import StoreWriter


def write_store(path: str, samples: int) -> None:
    """A store of ``samples`` 32x32 RGB images (PNG-encoded) with integer labels."""
    rng = np.random.default_rng(0)
    with StoreWriter(path, encodings={"image": "png"}) as writer:
        for start in range(0, samples, 64):
            n = min(64, samples - start)
            writer.write({"image": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                          "label": np.arange(start, start + n, dtype=np.int64)})


def upload(folder: str, url: str, storage_options: dict) -> None:
    """Put every file of ``folder`` under ``url``, making the bucket if it does not exist."""
    fs, root = fsspec.core.url_to_fs(url, **storage_options)
    bucket = root.split("/", 1)[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for here, _, names in os.walk(folder):
        for name in names:
            local = os.path.join(here, name)
            fs.put_file(local, f"{root}/{os.path.relpath(local, folder).replace(os.sep, '/')}")


def augment(sample, rng):
    image = sample["image"]
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return image.astype(np.float32) / 255.0, sample["label"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="where the store goes, e.g. s3://bucket/prefix/train.store")
    parser.add_argument("--endpoint-url", help="an S3-compatible server other than AWS (MinIO, moto)")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    storage_options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}

    with tempfile.TemporaryDirectory() as tmp:
        write_store(os.path.join(tmp, "train.store"), args.samples)
        upload(os.path.join(tmp, "train.store"), args.url, storage_options)
        print(f"uploaded {args.samples} samples to {args.url}")

        pipe = (
            fl.from_store(args.url, storage_options=storage_options, cache_dir=os.path.join(tmp, "cache"), cache_limit="1GiB")
            .shuffle(seed=0)
            .map(augment)
            .batch(64)
        )
        with pipe:
            for epoch in range(args.epochs):
                seen, pixels = [], 0.0
                for images, labels in pipe:  # images: (64, 32, 32, 3) float32 in [0, 1]
                    seen.extend(labels.tolist())  # a training step would go here
                    pixels += float(images.sum())
                if sorted(seen) != list(range(args.samples)):
                    raise RuntimeError(f"epoch {epoch} did not read every sample exactly once")
                print(f"epoch {epoch}: {len(seen)} samples, each once, first labels {seen[:4]}, mean pixel {pixels / (len(seen) * 32 * 32 * 3):.3f}")
            print(pipe)


if __name__ == "__main__":
    main()
