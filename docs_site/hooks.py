"""MkDocs hook: the guide's links to files outside docs/ (benchmarks/RESULTS.md, examples/*.py) work on the site.

The pages in docs/ are written to read on GitHub too, so they link the report as
``../benchmarks/RESULTS.md``. This hook adds those files to the site under their
repository paths and rewrites each such link to point at the copy; a link to a
file that does not exist is left as written, so the strict build fails on it.
"""

import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent  # the repository
INCLUDED = ("benchmarks/RESULTS.md", "benchmarks/history/*.md", "benchmarks/*.png", "examples/*.py")  # repository files the site carries
_LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)\s#]+)(#[^)\s]*)?\)")


def on_files(files, config):
    for pattern in INCLUDED:
        for path in sorted(ROOT.glob(pattern)):
            files.append(File.generated(config, path.relative_to(ROOT).as_posix(), abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    source = Path(page.file.abs_src_path).parent
    here = Path(page.file.src_uri).parent.as_posix()

    def rewrite(match):
        target, anchor = match.group(1), match.group(2) or ""
        real = (source / target).resolve()
        try:
            repo_path = real.relative_to(ROOT).as_posix()
        except ValueError:
            return match.group(0)
        if files.get_file_from_path(repo_path) is None or repo_path.startswith("docs/"):
            return match.group(0)
        return f"]({os.path.relpath(repo_path, here)}{anchor})"

    return _LINK.sub(rewrite, markdown)
