"""No measured range or benchmark run is quoted in src/feedline: measurements live in benchmarks/RESULTS.md.

The code states each default's reason in one line; the numbers behind it
are in the report ("Where the defaults come from"), where a new run can
replace them. This scans comments and docstrings alike (the whole text of
each module) for the forms a measurement takes.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "feedline"
UNIT = r"(?:ms|us|s|x|%|samples/s|images/s|MiB|MB|GiB/s)(?![A-Za-z])"  # not \b: "%" is no word character
MEASURED = [
    re.compile(rf"\d[\d,.]*\s?-\s?\d[\d,.]*\s?{UNIT}"),  # a measured range: "0.59-0.72 x", "632-641 samples/s"
    re.compile(rf"~\s?\d[\d,.]*\s?{UNIT}"),  # an approximate reading: "~40 ms"
    re.compile(r"\d+(?:\.\d+)?x (?:faster|slower|less|more)"),  # a speed-up: "5x faster"
    re.compile(r"\d[\d,.]* (?:samples|images|batches|rows|records)/s"),  # a throughput
    re.compile(r"\d[\d,.]*\s?(?:GiB|MiB|GB|MB|KiB|kB)/s(?![A-Za-z])"),  # a read or copy speed: "2.1 GiB/s"
    re.compile(r"\b\d+ (?:threads|workers|cores|processes), \d+ (?:batches|tasks|samples)\b"),  # a run's setting: "32 threads, 51 batches"
    re.compile(r"\bstory[ -]?\d\b", re.IGNORECASE),  # a benchmark run by its name
]
# Files still to clean (none left: add none).
BEING_CLEANED: set[str] = set()
BEING_CLEANED_FOLDERS: tuple[str, ...] = ()


def measurements(text: str) -> list[str]:
    """The lines of ``text`` that quote a measurement, with their numbers."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if any(p.search(line) for p in MEASURED)]


def test_the_scan_finds_the_forms_a_measurement_takes():
    assert measurements("x = 1  # measured ~40 ms of a start")
    assert measurements('"""threads gave 3,992-4,664 images/s"""')
    assert measurements("# OpenCV is 5x faster here")
    assert measurements("# as story 4 showed")
    assert measurements("the same wall time, 10-15 % more CPU")
    assert measurements("#   - a local store: 2.1 GiB/s")
    assert measurements("# (32 threads, 51 batches)")
    assert not measurements("ROOM_WAIT = 3.0  # seconds a worker waits for a slot")


def test_src_quotes_no_measured_ranges():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in BEING_CLEANED or rel.startswith(BEING_CLEANED_FOLDERS):
            continue
        hits = measurements(path.read_text(encoding="utf-8"))
        if hits:
            found[rel] = hits
    assert not found, "move these measurements to benchmarks/RESULTS.md and leave a one-line reason:\n" + "\n".join(
        f"src/feedline/{rel}:{hit}" for rel, hits in found.items() for hit in hits)
