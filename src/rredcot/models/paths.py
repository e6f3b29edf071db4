"""Whether a model name is a Hub id or a local path, without importing torch or transformers
(the Snakefile asks at load time, to stop on a missing local model before any job runs)."""

from __future__ import annotations

from pathlib import Path


def looks_like_path(name_or_path: str) -> bool:
    """A Hub id is `name` or `owner/name`; anything else (or anything on disk) is a path."""
    return (
        Path(name_or_path).exists()
        or name_or_path.startswith((".", "/", "~"))
        or name_or_path.count("/") > 1
    )
