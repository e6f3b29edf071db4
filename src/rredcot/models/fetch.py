"""Fetch a pretrained base policy once, at a pinned revision, into the workflow's model directory.

Every rule downstream opens `results/models/base` as a local directory, so a paper-scale run
downloads the Hub checkpoint once (on a node that reaches the Hub) and compute nodes never need
the network; the revision that was fetched is recorded next to the weights.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rredcot.models.paths import looks_like_path

COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
# Weights, configs and tokenizer files; optimizer states and other frameworks' weights are skipped.
ALLOW_PATTERNS: tuple[str, ...] = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja")
FETCH_RECORD = "fetched_from.json"

Downloader = Callable[..., str]


def _default_downloader(**kwargs: Any) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(**kwargs)


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link a file of a local checkpoint (no second copy of the weights), else copy it."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def fetch_base_model(
    name_or_path: str,
    revision: str | None,
    out: str | Path,
    *,
    require_pinned: bool = True,
    downloader: Downloader | None = None,
) -> dict[str, Any]:
    """Put the checkpoint `name_or_path` (Hub id at `revision`, or a local directory) in `out`.

    A Hub id needs a 40-hex commit revision unless `require_pinned` is False, so a rerun a year
    later gets the same weights. Returns (and writes to `out/fetched_from.json`) the record.
    """
    out = Path(out)
    if looks_like_path(name_or_path):
        src = Path(name_or_path).expanduser()
        if not (src / "config.json").is_file():
            raise FileNotFoundError(
                f"model.name_or_path {name_or_path!r}: no checkpoint directory (config.json) there"
            )
        shutil.copytree(src, out, copy_function=_link_or_copy, dirs_exist_ok=True)
        record = {"source": "local", "path": str(src.resolve()), "revision": None}
    else:
        pinned = revision is not None and COMMIT_SHA.fullmatch(revision)
        if require_pinned and not pinned:
            raise ValueError(
                f"model.revision: Hub model {name_or_path!r} needs a pinned 40-hex commit sha "
                f"(got {revision!r}); find it on the model page's commit history"
            )
        download = downloader or _default_downloader
        try:
            download(
                repo_id=name_or_path,
                revision=revision,
                local_dir=str(out),
                allow_patterns=list(ALLOW_PATTERNS),
            )
        except Exception as err:  # network, auth, missing revision: name the model and the fix
            raise OSError(
                f"model {name_or_path!r} at revision {revision!r}: download failed ({err}). "
                "Run this rule where the Hugging Face Hub is reachable (e.g. a login node: "
                "`snakemake results/models/base`), or point model.name_or_path at a local "
                "directory holding the checkpoint."
            ) from err
        record = {"source": "hub", "repo_id": name_or_path, "revision": revision}
    if not (out / "config.json").is_file():
        raise FileNotFoundError(f"{out}: the fetched checkpoint has no config.json")
    (out / FETCH_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return record
