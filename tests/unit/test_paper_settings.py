"""docs/paper_settings.md lists every value of every paper config with its source and why."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("paper_settings", REPO / "scripts/paper_settings.py")
paper_settings = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(paper_settings)
DOC = (REPO / "docs" / "paper_settings.md").read_text()


def rows_of(stem: str) -> dict[str, tuple[str, str, str]]:
    """key -> (value, source, why) of the table under the config's heading."""
    section = DOC.split(f"`configs/{stem}.yaml`", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        found = re.fullmatch(r"\| `([^`]+)` \| `(.*)` \| ([^|]+) \| (.+) \|", line)
        if found:
            key, value, source, why = found.groups()
            rows[key] = (value, source.strip(), why.strip())
    return rows


@pytest.mark.parametrize("path", sorted(REPO.glob("configs/paper_*.yaml")), ids=lambda p: p.stem)
def test_every_paper_config_value_is_in_the_table(path: Path) -> None:
    rows = rows_of(path.stem)
    config = yaml.safe_load(path.read_text())
    values = dict(paper_settings.flatten(config))
    assert set(values) == set(rows), set(values) ^ set(rows)
    for key, value in values.items():
        shown, source, why = rows[key]
        assert shown == paper_settings.show(value), key
        assert source in paper_settings.SOURCES and why, key
    assert rows["training.vllm_gpu_memory_utilization"][0] == "0.3"  # a value read back


def test_the_doc_is_what_the_script_renders() -> None:
    assert paper_settings.render() == DOC, "rerun python scripts/paper_settings.py"


def test_an_undocumented_value_stops_the_script() -> None:
    with pytest.raises(KeyError, match="no rule .* documents 'training.new_knob'"):
        paper_settings.annotation("paper_qwen3_4b", "training.new_knob")
    assert (
        paper_settings.annotation("paper_r1_distill_1p5b", "training.warmup_ratio")[0] == "open-rs"
    )
