"""The ``feedline convert`` and ``feedline inspect`` subcommands, registered on the main parser.

``feedline.cli`` calls `add_commands` with its subparsers; the work lives
in `feedline.store._convert` and `feedline.store._inspect`, so nothing here
imports pyarrow until a command runs.
"""

from __future__ import annotations

import argparse

__all__ = ["add_commands"]


def _count(low: int):
    """An argparse type: an integer >= ``low`` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    return parse


def add_commands(commands) -> None:
    """Add ``convert`` and ``inspect`` to ``commands`` (the result of ``parser.add_subparsers()``)."""
    from ._convert import run_convert
    from ._inspect import run_inspect

    run = commands.add_parser(
        "convert",
        help="decode a folder of images or audio, or WebDataset/TFRecord/ArrayRecord shards, once into a store (Arrow files), on every core",
        description="Decodes every image (JPEG, PNG) or audio file (WAV, FLAC) under SRC once, in parallel, into a "
        "feedline store at DST (read it with fl.from_store(DST)). Labels come from sub-folder names "
        "(train/cat/1.jpg is class 'cat') or from --labels. SRC may also be WebDataset tar shards, TFRecord or "
        "ArrayRecord files (files, a glob pattern, or a folder of them): their samples become rows, JPEG/PNG fields "
        "decoded. Unreadable files or records (truncated, damaged, not an image) are skipped "
        "and listed. Ctrl-C stops it with exit status 130 and leaves DST as it was.",
    )
    run.add_argument("src", help="folder of images or audio files (searched recursively), or shard files (.tar, .tfrecord, .array_record)")
    run.add_argument("dst", help="the store to create (a directory)")
    run.add_argument("--size", default=None, metavar="HxW", help="make every image HxW (default: keep each image's size)")
    fit = run.add_mutually_exclusive_group()
    fit.add_argument("--resize", action="store_true", help="with --size: stretch to HxW (the default)")
    fit.add_argument("--center-crop", action="store_true", help="with --size: resize the shorter side to cover HxW, crop the centre")
    run.add_argument("--encoding", action="append", default=[], metavar="FIELD=ENC",
                     help="per-field encoding: raw (default), zstd, lz4, jpeg:QUALITY, png; e.g. --encoding image=jpeg:90 (repeatable)")
    run.add_argument("--labels", default=None, metavar="CSV", help="CSV of path,label lines (paths relative to SRC)")
    run.add_argument("--workers", type=_count(0), default=None,
                     help="decoding workers (default: one per core; 0: decode in this process)")
    run.add_argument("--backend", choices=["serial", "thread", "process"], default=None, help="decoding backend (default: chosen by feedline)")
    run.add_argument("--rows-per-file", type=_count(1), default=None,
                     help="samples per Arrow file (default: about 256 MB per file)")
    run.add_argument("--audio-dtype", choices=["float32", "int16"], default="float32", help="sample type of audio (default float32)")
    run.add_argument("--sample-rate", type=_count(1), default=None,
                     help="required audio sample rate; other files are skipped")
    run.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    run.add_argument("--lenient", action="store_true",
                     help="keep what can be recovered of JPEGs that libjpeg-turbo reports as damaged (default: skip and list "
                     "them, like truncated files, which are skipped either way)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(handler=run_convert)

    run = commands.add_parser("inspect", help="describe a store: fields, sizes, meta and the first samples; --verify checks it",
                              description="Describes a store from its manifest and first samples. --verify first reads every "
                              "file and checks it against the checksums written with the store, lists each damaged file "
                              "with the rows it holds, and exits with status 1 if anything is damaged (or the store has no "
                              "checksums to check).")
    run.add_argument("store", help="the store directory")
    run.add_argument("--verify", action="store_true",
                     help="check every byte against the store's checksums; exit status 1 if anything is damaged")
    run.add_argument("--samples", type=int, default=3, help="how many samples to show (default 3)")
    run.add_argument("--json", action="store_true", help="print the manifest as JSON")
    run.set_defaults(handler=run_inspect)
