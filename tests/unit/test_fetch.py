"""Fetching a pretrained base policy into the workflow's model directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rredcot.models.fetch import ALLOW_PATTERNS, FETCH_RECORD, fetch_base_model
from rredcot.models.loading import load_model, load_tokenizer

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_local_checkpoint_is_linked_in_and_loads(
    tmp_path: Path, tiny_checkpoint: Callable[..., Path]
) -> None:
    src = tiny_checkpoint("fetch_src")
    out = tmp_path / "base"
    record = fetch_base_model(str(src), None, out)
    assert record["source"] == "local"
    assert json.loads((out / FETCH_RECORD).read_text()) == record
    assert sorted(p.name for p in src.iterdir()) == sorted(
        p.name for p in out.iterdir() if p.name != FETCH_RECORD
    )
    load_tokenizer(out)
    assert load_model(out).config.num_hidden_layers >= 1


def test_local_directory_without_checkpoint_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        fetch_base_model(str(tmp_path / "empty"), None, tmp_path / "base")


def test_hub_id_needs_a_pinned_commit(tmp_path: Path) -> None:
    for revision in (None, "main", "v1.0"):
        with pytest.raises(ValueError, match="model.revision"):
            fetch_base_model("Qwen/Qwen3-4B-Instruct-2507", revision, tmp_path / "base")


def test_hub_download_is_asked_for_the_pinned_revision(tmp_path: Path) -> None:
    calls: list[dict] = []

    def downloader(**kwargs: object) -> str:
        calls.append(kwargs)
        (Path(str(kwargs["local_dir"])) / "config.json").parent.mkdir(parents=True, exist_ok=True)
        (Path(str(kwargs["local_dir"])) / "config.json").write_text("{}")
        return str(kwargs["local_dir"])

    out = tmp_path / "base"
    record = fetch_base_model("org/model", SHA, out, downloader=downloader)
    assert calls == [
        {
            "repo_id": "org/model",
            "revision": SHA,
            "local_dir": str(out),
            "allow_patterns": list(ALLOW_PATTERNS),
        }
    ]
    assert record == {"source": "hub", "repo_id": "org/model", "revision": SHA}


def test_download_failure_says_where_to_run_it(tmp_path: Path) -> None:
    def offline(**_: object) -> str:
        raise ConnectionError("no network")

    with pytest.raises(OSError, match="Hub is reachable"):
        fetch_base_model("org/model", SHA, tmp_path / "base", downloader=offline)
