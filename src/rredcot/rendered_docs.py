"""Docs written by a script from the configs (docs/paper_settings.md, docs/paper_budget.md):
the script rewrites its doc, or with --check says whether the doc is still what it renders."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


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
