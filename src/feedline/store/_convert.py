"""``feedline convert``: a folder of images or audio into a store, decoded once, on every core.

How it runs: the files are listed and labelled in this process; a feedline
pipeline (``from_files(...).map(decode, on_error="skip")``) decodes them
on every core (and resizes, crops and JPEG/PNG-encodes there too), in file
order; this process only writes the finished rows (`StoreWriter`). Files
that cannot be decoded are skipped, counted and listed (in the summary and
in the store's ``meta["skipped"]``).

Samples are dicts: ``{"image": HxWx3 uint8, "label": int}`` for images
(``mode="RGB"``: grey and RGBA files become RGB), ``{"audio": (channels,
frames) float32 or int16, "label": int}`` for audio; without labels the
``label`` field is left out. Labels come from a CSV (``path,label``; the
names are sorted and numbered unless they are all integers) or from the
sub-folder of each file (the ImageFolder convention: ``train/cat/1.jpg``
is class ``cat``); their names are kept in ``meta["classes"]``. Files lying
directly in the folder, beside the class folders, have no class: they are
left out and listed (summary, ``meta["outside_classes"]``), unless they
outnumber the files in class folders, which is refused as ambiguous.

Restarting: a crash or Ctrl-C leaves only the writer's temporary directory,
which the next run removes (see `feedline.store._writer`); nothing that
looks like a store is left behind.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import glob
import os
import shutil
import sys
import time

from .._folders import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS, outside_class_folders
from .._folders import labels_from_folders as _labels_from_folders
from .._folders import numbered as _numbered
from ._convert_parts import ConvertSummary, Decode, check_fit, human_bytes, progress_bar, reason_of, skips_unannounced, store_bytes
from ._convert_shards import convert_shards, is_shard_source, shard_format
from ._errors import StoreError
from ._writer import StoreWriter

__all__ = ["ConvertSummary", "convert", "human_bytes", "parse_size", "run_convert"]

_BATCH = 32  # rows per task for fixed-size images: small enough for a smooth progress bar, large enough to amortise
_WRITE_EVERY = 64  # rows handed to the writer at once for variable-size samples


def parse_size(text: str) -> tuple[int, int]:
    """``"224x224"`` or ``"224"`` -> ``(224, 224)``.

    >>> parse_size("512x384"), parse_size("64")
    ((512, 384), (64, 64))
    """
    parts = text.lower().split("x")
    try:
        h, w = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
    except ValueError:
        raise ValueError(f"--size must look like HxW (e.g. 224x224), got {text!r}") from None
    if len(parts) > 2 or h < 1 or w < 1:
        raise ValueError(f"--size must look like HxW with positive numbers (e.g. 224x224), got {text!r}")
    return h, w


def _fitted_size(size):
    """``size`` as ``(height, width)``: a tuple is kept, text (``"224x224"``) parsed, None (each image's own size) kept."""
    return size if size is None or isinstance(size, tuple) else parse_size(str(size))


# ------------------------------------------------------------ listing
def _list_files(src: str) -> tuple[str, list[str]]:
    """(kind, sorted relative paths) of the images or audio files under ``src``."""
    found = {"image": [], "audio": []}
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            ext = os.path.splitext(name)[1].lower()
            kind = "image" if ext in IMAGE_EXTENSIONS else "audio" if ext in AUDIO_EXTENSIONS else None
            if kind:
                found[kind].append(os.path.relpath(os.path.join(root, name), src))
    if found["image"] and found["audio"]:
        raise StoreError(f"{src!r} holds both images ({len(found['image'])}) and audio files ({len(found['audio'])}); "
                         "convert them into separate stores (put them in separate folders)")
    kind = "image" if found["image"] else "audio"
    if not found[kind]:
        raise StoreError(f"{src!r} holds no images ({', '.join(IMAGE_EXTENSIONS)}) or audio files ({', '.join(AUDIO_EXTENSIONS)})")
    return kind, sorted(found[kind], key=lambda p: p.replace(os.sep, "/"))


def _labels_from_csv(src: str, csv_path: str, files: list[str]) -> tuple[list[str], list[int], list[str] | None, list]:
    """(files listed in the CSV, their labels, class names, [(path, reason)] of listed files not found)."""
    available = set(files)
    rows = []
    with open(csv_path, newline="", encoding="utf-8") as f:
        for number, row in enumerate(csv.reader(f), 1):
            if not row or (number == 1 and [c.strip().lower() for c in row[:2]] == ["path", "label"]):
                continue
            if len(row) < 2:
                raise StoreError(f"{csv_path!r} line {number}: expected 'path,label', got {row!r}")
            path = row[0].strip()
            rel = os.path.relpath(path, src) if os.path.isabs(path) else os.path.normpath(path)
            rows.append((rel, row[1].strip()))
    if not rows:
        raise StoreError(f"{csv_path!r} lists no files (expected lines 'path,label')")
    rows.sort(key=lambda r: r[0].replace(os.sep, "/"))
    missing = [(rel, "listed in the labels CSV but not found (or not an image/audio file)") for rel, _ in rows if rel not in available]
    rows = [r for r in rows if r[0] in available]
    labels, classes = _numbered([label for _, label in rows])
    return [rel for rel, _ in rows], labels, classes, missing


def _class_members(src: str, files: list[str]) -> tuple[list[str], list[str]]:
    """(files in class folders, files directly in ``src``) when both exist; otherwise (files, []).

    A few files beside the class folders (a stray cover image) do not undo
    the classes: they are left out and listed. When they are as many as the
    files in class folders, the layout is not clearly ImageFolder, and a
    guess either way would be wrong for someone: refuse and name them.
    """
    outside = outside_class_folders(files)
    if not outside or len(outside) == len(files):
        return files, []
    stray = set(outside)
    inside = [f for f in files if f not in stray]
    if len(outside) >= len(inside):
        shown = ", ".join(outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
        folders = sorted({f.replace(os.sep, "/").split("/")[0] for f in inside})
        raise StoreError(
            f"{src!r} holds {len(outside)} files directly in it ({shown}) and {len(inside)} in sub-folders "
            f"({', '.join(folders[:5])}{' ...' if len(folders) > 5 else ''}), so it is unclear whether the sub-folders are "
            "classes. For labels from folders, move every file into a class folder (SRC/<class>/<file>); for a store "
            "without labels, put every file directly in SRC; or give the labels in a CSV (--labels; labels_csv= in Python)"
        )
    return inside, outside


def _labelled(src: str, files: list[str], labels_csv) -> tuple[list[str], list | None, list | None, str | None, list, list]:
    """(files to convert, labels, class names, where the labels came from, [(path, reason)] skipped, files left out).

    The labels come from ``labels_csv`` when given (the files it lists that
    are not found are skipped), else from the class folders (the files
    beside them are left out); without either the store has no labels.
    """
    if labels_csv is not None:
        files, labels, classes, skipped = _labels_from_csv(src, os.fspath(labels_csv), files)
        return files, labels, classes, "csv", skipped, []
    files, outside = _class_members(src, files)
    labels, classes = _labels_from_folders(files)
    return files, labels, classes, "folders" if labels is not None else None, [], outside


# ------------------------------------------------------------ the command
def convert(src, dst, *, size=None, fit: str = "resize", encodings: dict | None = None, labels_csv=None,
            workers: int | None = None, backend: str | None = None, overwrite: bool = False,
            rows_per_file: int | None = None, audio_dtype: str = "float32", sample_rate: int | None = None,
            progress: bool = True, strict: bool = True) -> ConvertSummary:
    """Decode a folder of images or audio once into a store at ``dst``.

    Args:
        src: the folder (searched recursively).
        dst: the store to create.
        size: ``(height, width)``: every image is made this size (fixed-shape
            field, zero-copy reads); None keeps each image's own size.
        fit: ``"resize"`` (stretch to ``size``) or ``"center-crop"`` (resize
            the shorter side to cover ``size``, then crop the centre).
        encodings: ``{field: encoding}`` for the store (``image``/``audio``, ``label``).
        labels_csv: a CSV of ``path,label`` lines (paths relative to
            ``src``); only the files it lists are converted. Without it,
            labels are the sub-folder names when every file is in one.
        workers, backend: for the decoding pipeline (default: every core,
            backend chosen by feedline).
        overwrite, rows_per_file: as for `StoreWriter`.
        audio_dtype: ``"float32"`` or ``"int16"`` for audio samples.
        sample_rate: required sample rate of audio files (others are skipped).
        progress: show a progress bar (tqdm) with the rate and time left.
        strict: a JPEG that libjpeg-turbo reports as damaged is skipped
            (default); False keeps what can be recovered of it (see
            `feedline.vision.decode`). Truncated files are skipped either way.

    Returns:
        A `ConvertSummary` (samples, bytes, time, skipped files and why).

    Raises:
        StoreError: no media in ``src``, images and audio mixed, a bad
            CSV, or ``dst`` exists without ``overwrite``.
    """
    import feedline as fl

    if is_shard_source(src):  # WebDataset, TFRecord or ArrayRecord files (store/_convert_shards.py)
        if labels_csv is not None:
            raise StoreError("a labels CSV names the files of a folder; shard files carry their labels in their samples")
        return convert_shards(src, dst, shard_format(src), size=_fitted_size(size),
                              fit=fit, encodings=encodings, workers=workers, backend=backend, overwrite=overwrite,
                              rows_per_file=rows_per_file, progress=progress, strict=strict)
    src, dst = os.path.abspath(os.fspath(src)), os.path.abspath(os.fspath(dst))
    if not os.path.isdir(src):
        raise StoreError(f"{src!r} is not a folder (convert reads a folder of images or audio files)")
    check_fit(fit)
    size = _fitted_size(size)
    started = time.perf_counter()
    kind, files = _list_files(src)
    files, labels, classes, label_source, skipped, outside = _labelled(src, files, labels_csv)
    if not files:
        raise StoreError(f"nothing to convert in {src!r}: the labels CSV lists none of its files")
    field_name = "image" if kind == "image" else "audio"
    encodings = dict(encodings or {})
    meta = {
        "made_by": "feedline convert",
        "source": src,
        "kind": kind,
        "files": len(files) + len(skipped) + len(outside),
        "label_source": label_source,
        "classes": classes,
        "size": list(size) if size and kind == "image" else None,
        "fit": fit if size and kind == "image" else None,
        "skipped": [],
        "outside_classes": outside,
    }
    decode = Decode(kind, size if kind == "image" else None, fit, encodings.get(field_name, "raw"), audio_dtype, sample_rate,
                    labels is not None, strict)
    paths = [os.path.join(src, f) for f in files]
    pipe = fl.from_files(paths, labels=labels).map(decode, workers=workers, backend=backend, on_error="skip")
    fixed = kind == "image" and size is not None
    if fixed:
        pipe = pipe.batch(_BATCH)
    bar = progress_bar(len(paths), progress)
    writer = StoreWriter(dst, encodings=encodings, rows_per_file=rows_per_file, meta=meta, overwrite=overwrite,
                         variable_shape=() if fixed else [field_name])
    # closing(bar): the bar is closed however the block ends (Ctrl-C included), so the terminal line is finished
    with writer, pipe, contextlib.closing(bar):
        it = iter(pipe)
        with skips_unannounced():
            _write_decoded(it, writer, bar, fixed, field_name)
        for index, reason in it.stats().skipped:
            skipped.append((files[index], reason_of(reason)))
        bar.update(len(it.stats().skipped))
        skipped.sort()
        writer.meta["skipped"] = [list(s) for s in skipped]
        samples = writer.rows
    return ConvertSummary(src, dst, kind, samples, store_bytes(dst), time.perf_counter() - started, skipped, classes, outside)


def _write_decoded(it, writer: StoreWriter, bar, fixed: bool, field_name: str) -> None:
    """Hand the decoded samples to ``writer`` as they come: whole batches when fixed-size, else rows in groups of _WRITE_EVERY."""
    pending = []
    for item in it:
        if fixed:
            writer.write(item)
            bar.update(len(item[field_name]))
            continue
        pending.append(item)
        if len(pending) >= _WRITE_EVERY:
            writer.write_rows(pending)
            bar.update(len(pending))
            pending = []
    if pending:
        writer.write_rows(pending)
        bar.update(len(pending))


def run_convert(args) -> int:
    """The ``feedline convert`` command: `convert` with parsed arguments; prints the summary.

    Speaks the command's language: errors name SRC, DST and the flags
    (never Python arguments), each on one line with exit status 1; Ctrl-C
    prints one line and exits with 130, leaving DST as it was.
    """
    encodings = _encodings_of(args.encoding)
    src, dst = os.path.abspath(args.src), os.path.abspath(args.dst)
    src = _check_arguments(args, src, dst)
    try:
        size = parse_size(args.size) if args.size else None
        summary = convert(
            src, dst, size=size, fit="center-crop" if args.center_crop else "resize", encodings=encodings,
            labels_csv=args.labels, workers=args.workers, backend=args.backend, overwrite=args.overwrite,
            rows_per_file=args.rows_per_file, audio_dtype=args.audio_dtype, sample_rate=args.sample_rate,
            progress=not args.no_progress, strict=not args.lenient,
        )
    except (StoreError, ValueError) as e:
        # The writer's words are for Python callers; DST can also appear while the store is written.
        text = str(e).replace("pass overwrite=True", "add --overwrite")
        raise SystemExit(f"feedline convert: {text}") from e
    except OSError as e:  # e.g. the disk filled up: say so in one line, not a traceback
        raise _write_failure(e, args.dst, dst) from e
    except KeyboardInterrupt:
        print(f"feedline convert: interrupted; {args.dst!r} was left as it was (no partial store is kept)", file=sys.stderr)
        return 130
    print(summary)
    return 0


def _encodings_of(flags: list[str] | None) -> dict:
    """The ``--encoding FIELD=ENCODING`` flags as ``{field: encoding}``, refusing one that is not of that form."""
    encodings = {}
    for item in flags or []:
        name, sep, enc = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"feedline convert: --encoding takes FIELD=ENCODING (e.g. image=jpeg:90), got {item!r}")
        encodings[name] = enc
    return encodings


def _check_arguments(args, src: str, dst: str) -> str:
    """SRC as `convert` takes it (shard files as given, a folder made absolute), once SRC, --labels, --workers and DST make sense.

    Each refusal is one line that names the flag, given before anything is read or written.
    """
    if is_shard_source(args.src):  # shard files: convert() reads them with their source
        src = args.src
    elif not os.path.isdir(src):
        what = "does not exist" if not os.path.exists(src) else "is not a folder"
        raise SystemExit(f"feedline convert: SRC {args.src!r} {what}; give the folder of images or audio files to convert "
                         "(or WebDataset .tar, TFRecord or ArrayRecord files)")
    if args.labels is not None and not os.path.isfile(args.labels):
        raise SystemExit(f"feedline convert: --labels {args.labels!r} is not a file; give a CSV of path,label lines")
    if args.workers == 0 and args.backend not in (None, "serial"):
        raise SystemExit(f"feedline convert: --workers 0 decodes in this process; it does not go with --backend {args.backend}")
    if os.path.exists(dst) and not args.overwrite:
        raise SystemExit(f"feedline convert: DST {args.dst!r} already exists; add --overwrite to replace it, or choose another DST")
    return src


def _write_failure(e: OSError, shown_dst: str, dst: str) -> SystemExit:
    """The one-line error for an OSError while converting, once the temporary directory a failed writer may leave is gone."""
    # The writer may have failed to remove its temporary directory (closing a file on a full disk fails too).
    for leftover in glob.glob(glob.escape(dst) + f".tmp-{os.getpid()}-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    full = e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    if full or os.path.abspath(os.fspath(e.filename or "")).startswith(dst):
        return SystemExit(f"feedline convert: cannot write {shown_dst!r}: {e}; nothing was written there "
                          "(free space, or choose a DST on another disk, and run again)")
    return SystemExit(f"feedline convert: {e}")
