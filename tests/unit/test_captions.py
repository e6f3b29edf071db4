"""The report captions' numbers: the fragments the summary writes and the captions that include
them (rendered as Snakemake renders a caption: Jinja2, then docutils)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest
from docutils.core import publish_parts

from rredcot.reporting.captions import CAPTIONS, caption_fragments, write_caption_fragments

REPO = Path(__file__).resolve().parents[2]
VALUES = {
    "machine": "CPU X",
    "commit": "abc123",
    "baseline": "grpo",
    "jobs": "12",
    "wall_seconds": "100 s (2 min)",
    "cpu_seconds": "90 s (2 min)",
    "comparison/rredcot/auc/difference": "+0.015",
    "comparison/rredcot/auc/bootstrap_ci": "+0.004 … +0.026",
    "comparison/rredcot/auc/seed_t_ci": "+0.003 … +0.027",
    "comparison/rredcot/auc/verdict": "better",
    "comparison/rredcot/auc/seeds": "5",
    "comparison/rredcot/auc/mde80": "0.015",
    "comparison/rredcot/final/difference": "+0.034",
    "comparison/rredcot/final/bootstrap_ci": "+0.010 … +0.050",
    "comparison/rredcot/final/seed_t_ci": "+0.011 … +0.057",
    "comparison/rredcot/final/verdict": "better",
    "benchmark/synth_ood/rredcot/difference": "+0.086",
    "benchmark/synth_ood/rredcot/bootstrap_ci": "+0.05 … +0.12",
    "benchmark/synth_ood/rredcot/seed_t_ci": "+0.06 … +0.11",
    "benchmark/synth_ood/rredcot/verdict": "better",
    "cost/rredcot/seconds_ratio": "1.68",
    "cost/rredcot/tokens_ratio": "4.84",
    "agreement/credits/rredcot/rho": "0.289",
    "agreement/credits/rredcot/ci": "0.25 … 0.33",
    "agreement/credits/rredcot/verdict": "reference",
    "agreement/credits/mc_4/rho": "0.201",
    "agreement/credits/mc_4/ci": "0.15 … 0.25",
    "agreement/credits/mc_4/verdict": "worse",
    "agreement/credits/ceiling": "0.610",
    "regime/base/greedy_pass1": "0.445",
    "regime/base/t1_luck": "0.024",
}


def test_every_fragment_states_this_runs_numbers_or_that_it_has_none():
    fragments = caption_fragments(VALUES)
    assert set(fragments) == set(CAPTIONS)
    comparison = fragments["method_comparison"]
    assert "rredcot − grpo, area under the held-out curve (primary): +0.015" in comparison
    primary = "t over seeds +0.003 … +0.027): **better** (5 seeds; MDE at 80% power 0.015)"
    assert primary in comparison
    # the primary endpoint comes first; a row without seeds or MDE says so, never drops them
    assert comparison.index("(primary)") < comparison.index("final step")
    assert "final step: +0.034" in comparison and "(? seeds; MDE at 80% power ?)" in comparison
    assert fragments["learning_curves"] == comparison
    assert "synth_ood, rredcot − grpo: +0.086" in fragments["benchmark_comparison"]
    assert (
        "rredcot: 1.68× grpo's seconds per step, 4.84× its forward tokens"
        in fragments["compute_cost"]
    )
    assert "base: greedy pass@1 0.445; luck at T = 1 0.024" in fragments["regime_table"]
    assert "Jobs: 12; summed CPU 90 s (2 min)" in fragments["summary"]
    agreement = fragments["estimator_agreement"]
    assert (
        "credits, rredcot: mean per-trace Spearman ρ 0.289 (95% CI 0.25 … 0.33; the default)"
        in (agreement)
    )
    assert (
        "credits, mc_4: mean per-trace Spearman ρ 0.201 (95% CI 0.15 … 0.25; against it: worse)"
        in (agreement)
    )
    assert "credits: ceiling (√reliability of the ground truth) 0.610" in agreement
    assert "Not in this run" in fragments["error_localization"]  # not built by this "run"


def _render(caption: Path, output: dict[str, str], cwd: Path) -> str:
    """A caption as Snakemake's report renders it: Jinja2 with `snakemake`, then docutils in
    the workflow's directory."""
    text = jinja2.Environment().from_string(caption.read_text())
    rst = text.render(snakemake=SimpleNamespace(output=SimpleNamespace(**output)))
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return publish_parts(rst, writer_name="html")["body"]
    finally:
        os.chdir(old)


@pytest.mark.parametrize("prefix", ["results", "results/credit_regimes/rate0p6"])
def test_a_caption_includes_the_numbers_of_its_own_results_tree(tmp_path, prefix):
    write_caption_fragments(VALUES, tmp_path / prefix / "report")
    html = _render(
        REPO / "workflow" / "report" / "compute_cost.rst",
        {"cost": f"{prefix}/compute_cost.csv"},
        tmp_path,
    )
    assert "1.68× grpo" in html and "Cost per optimizer step" in html


def test_every_caption_with_numbers_includes_its_fragment_by_an_output_of_its_rule():
    """Each fragment's caption includes it, and names the output key its rules give the
    artifact (workflow/rules/*.smk), so the include path is the producing job's results tree."""
    rules = "\n".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    for name in CAPTIONS:
        text = (REPO / "workflow" / "report" / f"{name}.rst").read_text()
        match = re.search(r"\{\{ snakemake\.output\.(\w+)\.rsplit.*/report/(\w+)\.rst", text)
        assert match and match.group(2) == name, name
        key = match.group(1)
        assert re.search(rf'{key}=report\(\s*\S+,\s*caption="../report/{name}.rst"', rules), name
