"""Which credit → advantage transform gives token advantages closest to the true ones? A study
on sampled groups of a base policy, not RL (METHOD.md §4; the transform is chosen by this
table's pre-registered rule before any RL run uses it).

    python dev/probe_credit_transform.py --model /tmp/probe/r0.6/base_rate0.6 \
        --world /tmp/dev/r0.6/world --groups 48 --out /tmp/transform_r0.6.csv

G groups of n responses (the training layout: `training.num_generations` samples per problem at
the RL temperature) from the world's `rl` split. Per group, the truth is the checker oracle's
per-line advantage V(s_k) − V(s_{k−1}) of every token (`oracle_step`'s σ, uncentred: the
advantage of each line given the state before it, with V from the world's checker), and each
candidate turns RREDCoT's σ (config.yaml's estimator and segmentation, dataset references) into
token advantages (`token_advantages`). Agreement: the cosine between a candidate's advantages and
the truth over the group's tokens (0 where a candidate gives the group no signal), mean over
groups, percentile bootstrap 95% CI over groups; each candidate paired against the current
default (`immediate`, `center: none`) on the same groups. GRPO's outcome advantage is a row too.
The cosine is blind to the advantages' scale, which whitening sets, but not to their level: a
candidate that leaves wrong traces without negative signal, or shifts a whole group, scores
lower. (Pearson's r, also reported, is blind to a group-wide shift, so it cannot tell
`center: none` from `group`, the choice this study exists for: it is not the rule's metric.)

Candidates: immediate / reward_to_go / mixed (β ∈ {0.5, 1}) under `center` none and group; and
two fixes of the potential's level (the default's Φ_0 is far below V(s_0)): `baseline_shift`
(σ_1 += Φ_0 − mean_g R, so Σ_k σ_k = R − mean_g R) and `potential_scaled` (Φ_k scaled by
mean_g R / mean_g Φ_0 before differencing), both then `immediate`, `center: none`.

Pre-registered rule: the candidate with the highest mean agreement becomes the default when the
paired 95% CI of its difference from the current default excludes 0; otherwise the current
default stays. Also printed: the mean token advantage of correct and of wrong traces.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rredcot.credit.advantages import (  # noqa: E402
    CreditConfig,
    expand_segments,
    outcome_advantages,
    token_advantages,
)
from rredcot.credit.rredcot_config import RREDCoTConfig  # noqa: E402
from rredcot.credit.segmentation import SegmentationConfig  # noqa: E402
from rredcot.generation import SamplingParams, backend_from_settings  # noqa: E402
from rredcot.generation.base import GenerationBackend  # noqa: E402
from rredcot.models.loading import load_model, load_tokenizer  # noqa: E402
from rredcot.studies.transform_rule import (  # noqa: E402
    choose_transform,
    cosine,
    level_fixes,
    paired_table,
)
from rredcot.tasks import get_task  # noqa: E402
from rredcot.training.method_settings import MethodSettings  # noqa: E402
from rredcot.training.methods import RolloutBatch, build_method  # noqa: E402

DEFAULT = "immediate_none"


def candidates() -> dict[str, CreditConfig]:
    out = {}
    for center in ("none", "group"):
        out[f"immediate_{center}"] = CreditConfig(mode="immediate", center=center)
        out[f"reward_to_go_{center}"] = CreditConfig(mode="reward_to_go", center=center)
        for beta in (0.5, 1.0):
            out[f"mixed_b{beta:g}_{center}"] = CreditConfig(mode="mixed", beta=beta, center=center)
    return out


def sample_batch(
    backend: GenerationBackend, tok: Any, rows: list[dict], n: int, seed: int, budget: int
) -> RolloutBatch:
    """n responses per row at T = 1, laid out as TRL hands a batch to a method."""
    task = get_task("synthetic")
    prompts = [task.build_prompt(r["problem"]) for r in rows]
    sampling = SamplingParams(
        n=n,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=budget,
        seed=seed,
        stop_strings=tuple(task.stop_strings),
    )
    done = sorted(
        backend.generate(prompts, sampling), key=lambda c: (c.prompt_index, c.sample_index)
    )
    batch_rows, p_ids, c_ids, texts, rewards = [], [], [], [], []
    for c in done:
        row = rows[c.prompt_index]
        batch_rows.append(
            {
                **row,
                "prompt": prompts[c.prompt_index],
                "problem_id": row["id"],
                "reference": row["solution"],
            }
        )
        p_ids.append(tok(prompts[c.prompt_index])["input_ids"])
        c_ids.append(list(c.token_ids) + ([tok.eos_token_id] if c.finish_reason == "stop" else []))
        texts.append(c.text)
        rewards.append(task.grade(c.text, row["answer"]).reward)
    b, p, t = len(done), max(map(len, p_ids)), max(map(len, c_ids))
    prompt_ids, prompt_mask = (
        torch.full((b, p), tok.pad_token_id),
        torch.zeros(b, p, dtype=torch.long),
    )
    completion_ids = torch.full((b, t), tok.pad_token_id)
    completion_mask = torch.zeros(b, t, dtype=torch.long)
    for i, (x, c) in enumerate(zip(p_ids, c_ids, strict=True)):
        prompt_ids[i, p - len(x) :], prompt_mask[i, p - len(x) :] = torch.tensor(x), 1
        completion_ids[i, : len(c)], completion_mask[i, : len(c)] = torch.tensor(c), 1
    r = torch.tensor(rewards, dtype=torch.float32)
    return RolloutBatch(
        batch_rows,
        prompt_ids,
        prompt_mask,
        completion_ids,
        completion_mask,
        texts,
        r,
        outcome_advantages(r, n),
        torch.arange(b) // n,
        0,
        seed,
    )


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() < 1e-12 or b.std() < 1e-12:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--world", type=Path, required=True, help="directory with rl.parquet")
    p.add_argument("--groups", type=int, default=48)
    p.add_argument("--chunk", type=int, default=8, help="groups per credit call")
    p.add_argument("--seed", type=int, default=99)
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--resamples", type=int, default=10000)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    config = yaml.safe_load(args.config.read_text())
    tr = config["training"]
    n = tr["num_generations"]
    rows = list(pl.read_parquet(args.world / "rl.parquet").head(args.groups).iter_rows(named=True))
    policy = load_model(args.model).eval()
    tok, task = load_tokenizer(args.model), get_task("synthetic")
    # one sampling engine for every chunk (the model loaded once for it, once for the credit)
    backend = backend_from_settings({"backend": "hf", "dtype": "float32"}, str(args.model))
    settings = MethodSettings(
        segmentation=SegmentationConfig.from_dict(config["segmentation"]),
        rredcot=RREDCoTConfig.from_dict(config["estimator"]["rredcot"]),
    )
    rredcot = build_method("rredcot", task, tok, [tok.eos_token_id], settings)
    oracle = build_method("oracle_step", task, tok, [tok.eos_token_id], settings)
    per_group: dict[str, list[float]] = {}
    per_group_r: dict[str, list[float]] = {}
    adv_by_outcome: dict[str, list[list[float]]] = {}
    for start in range(0, len(rows), args.chunk):
        batch = sample_batch(
            backend,
            tok,
            rows[start : start + args.chunk],
            n,
            args.seed + start,
            tr["max_completion_length"],
        )
        with torch.no_grad():
            ours, truth = (
                rredcot.segment_credit(batch, policy),
                oracle.segment_credit(batch, policy),
            )
        t = batch.completion_mask.shape[1]
        target = torch.stack(
            [
                expand_segments(s.double(), b, t)
                for s, b in zip(truth.sigmas, truth.boundaries, strict=True)
            ]
        )
        adv = {
            name: token_advantages(
                ours.sigmas,
                ours.boundaries,
                batch.groups,
                batch.completion_mask,
                cfg,
                batch.outcome_advantages,
            )
            for name, cfg in candidates().items()
        }
        for name, sig in level_fixes(ours.sigmas, batch.rewards, batch.groups).items():
            adv[name] = token_advantages(
                sig,
                ours.boundaries,
                batch.groups,
                batch.completion_mask,
                CreditConfig(mode="immediate", center="none"),
            )
        adv["grpo"] = batch.outcome_advantages[:, None] * batch.completion_mask
        for g in batch.groups.unique():
            rows_g = (batch.groups == g).nonzero().flatten()
            m = batch.completion_mask[rows_g].bool()
            truth_g = target[rows_g][m].numpy()
            for name, a in adv.items():
                a_g = a[rows_g].double()
                per_group.setdefault(name, []).append(cosine(a_g[m].numpy(), truth_g))
                per_group_r.setdefault(name, []).append(pearson(a_g[m].numpy(), truth_g))
                for i in rows_g.tolist():
                    mean = float(a[i][batch.completion_mask[i].bool()].double().mean())
                    adv_by_outcome.setdefault(name, [[], []])[int(batch.rewards[i] > 0)].append(
                        mean
                    )
        print(
            f"groups {start + len(batch.groups.unique())}/{len(rows)}: "
            f"cosine(default) {np.mean(per_group[DEFAULT]):.3f}",
            flush=True,
        )
    table = paired_table(per_group, DEFAULT, args.resamples, args.seed)
    for row in table:
        wrong, right = adv_by_outcome[row["candidate"]]
        row["pearson"] = float(np.mean(per_group_r[row["candidate"]]))
        row["mean_adv_correct"] = float(np.mean(right)) if right else float("nan")
        row["mean_adv_wrong"] = float(np.mean(wrong)) if wrong else float("nan")
    chosen = choose_transform(table, DEFAULT, exclude=("grpo",))
    best = max((r for r in table if r["candidate"] != "grpo"), key=lambda r: r["agreement"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, list(table[0]) + ["chosen"])
        w.writeheader()
        w.writerows({**r, "chosen": r["candidate"] == chosen} for r in table)
    with pl.Config(tbl_cols=-1, tbl_width_chars=200, float_precision=3, tbl_rows=-1):
        print(pl.DataFrame(table))
    print(
        f"rule: best {best['candidate']} ({best['minus_default']:+.3f} "
        f"[{best['diff_ci_low']:+.3f}, {best['diff_ci_high']:+.3f}]) -> {chosen}"
    )


if __name__ == "__main__":
    main()
