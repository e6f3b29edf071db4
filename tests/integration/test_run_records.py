"""Issue 21's dtype probe through Snakemake: a run directory is resumed only by the job that
would have written it, so `final/` never mixes two runs' weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

RUN = "results/train/rredcot/seed0"


def test_another_dtype_starts_fresh_and_the_original_gets_its_own_weights(
    repo, tmp_path, run_snakemake, no_mirror_env
):
    """Train 6 steps (checkpoints every 2), leave what a SIGKILL after checkpoint-4 leaves,
    rerun with model.dtype bfloat16: a fresh start, the log naming arguments.dtype. Rerun with
    the original config: a fresh start again, whose weights equal the uninterrupted run's
    exactly (never a float32/bfloat16 mix). Stale copies keep their metrics, no checkpoint."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    probe = tmp_path / "probe.yaml"
    # 20 SFT steps, not the smoke config's 200: the checks are on the RL run's records and
    # weights, which any base model exercises (the SFT was the test's longest job)
    probe.write_text(
        "training: {max_steps: 6, save_steps: 2, save_total_limit: 3, curve: {split: null}}\n"
        "sft: {max_steps: 20}\n"
    )
    bf16 = tmp_path / "bf16.yaml"
    bf16.write_text("model: {dtype: bfloat16}\n")
    env = no_mirror_env  # the smoke config's synthetic world reads no benchmark
    run_dir = workdir / RUN

    def train(*configs: Path) -> tuple[str, dict]:
        smoke = repo / "configs" / "smoke.yaml"
        proc = run_snakemake(
            repo, workdir, f"{RUN}/train_summary.json", "--cores", "1",
            "--configfile", str(smoke), *map(str, configs), env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        log = (workdir / "results/logs/train_policy/rredcot/seed0.log").read_text()
        return log, json.loads((run_dir / "train_summary.json").read_text())

    _, summary = train(probe)
    assert summary["steps"] == 6
    reference = load_file(run_dir / "final" / "model.safetensors")
    assert {t.dtype for t in reference.values()} == {torch.float32}
    # the directory a kill after checkpoint-4 leaves (no later checkpoint, no final/, no summary)
    for path in (run_dir / "checkpoint-6", run_dir / "final"):
        shutil.rmtree(path)
    (run_dir / "train_summary.json").unlink()
    assert (run_dir / "checkpoint-4" / "trainer_state.json").is_file()

    log, summary = train(probe, bf16)
    assert "arguments.dtype" in log and "starting fresh" in log, log[-3000:]
    assert "resuming from" not in log and summary["resumed_from_step"] is None
    assert json.loads((run_dir / "run_record.json").read_text())["arguments"]["dtype"] == (
        "bfloat16"
    )
    stale = workdir / f"{RUN}.stale-0"
    assert not list(stale.glob("checkpoint-*")) and (stale / "metrics.csv").is_file()
    # the trained weights stay float32 masters whatever model.dtype (rredcot.training.precision)
    half = load_file(run_dir / "final" / "model.safetensors")
    assert half.keys() == reference.keys() and {t.dtype for t in half.values()} == {torch.float32}

    log, summary = train(probe)
    assert "arguments.dtype" in log and "resuming from" not in log, log[-3000:]
    assert summary["resumed_from_step"] is None and summary["steps"] == 6
    final = load_file(run_dir / "final" / "model.safetensors")
    assert final.keys() == reference.keys()
    for key, weights in reference.items():
        assert final[key].dtype == weights.dtype and (final[key] == weights).all(), key
    # Snakemake removed the outputs (final/, the summary) before the job ran; the rest is kept
    assert (workdir / f"{RUN}.stale-1" / "metrics.csv").is_file()
    assert not list((workdir / f"{RUN}.stale-1").glob("checkpoint-*"))
