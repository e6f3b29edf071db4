"""Docs written by a script from the configs (docs/paper_settings.md, docs/paper_budget.md):
the script rewrites its doc, or with --check says whether the doc is still what it renders."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# The docs pages a program writes, not a person: the pages the scripts render from the configs
# with `write_or_check`, and the runs' summaries that scripts/snapshot_summary.py copies under
# SNAPSHOT_DOCS. tests/unit/test_doc_links.py exempts them from the limit on a page's length and
# checks that every script that renders a page names it here.
RENDERED_DOCS = ("docs/paper_settings.md", "docs/paper_budget.md")
SNAPSHOT_DOCS = "docs/snapshots"


def write_or_check(
    doc: Path, render: Callable[[], str], description: str, argv: Sequence[str] | None = None
) -> None:
    """Write `render()` to `doc`, or with --check exit 1 when `doc` differs from it."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--check", action="store_true", help="compare instead of writing")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        same = doc.is_file() and doc.read_text() == text
        print("up to date" if same else f"{doc} differs from what it renders; rerun the script")
        sys.exit(0 if same else 1)
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(text)
    print(f"wrote {doc}")
