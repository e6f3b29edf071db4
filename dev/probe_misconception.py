"""Does a misconception in the demonstrations make the base's greedy output fail? The probe of
the positive-control regimes (METHOD.md §4): one base per misconception rate, on a development
seed that no reported run uses, SFT-ed as the workflow does (config.yaml's world, model and
sft blocks; the same slips), then evaluated on the world's `synth_id` split.

    python dev/probe_misconception.py --rates 0 0.6 0.8 --out results/probe_misconception

Per rate, one CSV row: greedy pass@1, pass@1 at T = 1 (k samples), the luck at T = 1 (right
answer, wrong chain by the checker), the share of problems with a step the rule applies to,
and among the wrong responses the share whose first error is the misconception's
(`rredcot.data.error_kinds`), greedy and at T = 1. A regime is worth RL only where greedy
decoding is wrong on the rule's steps (greedy pass@1 well below 1) and T = 1 is not hopeless.
This chooses the regime by the base alone; GRPO and the checker oracle on the development seed
decide the rest, never RREDCoT's or MC's results.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rredcot.data.misconceptions import Misconception  # noqa: E402
from rredcot.data.synthetic import SplitSpec, make_world, world_config  # noqa: E402
from rredcot.evaluation.grading import grade_generations  # noqa: E402
from rredcot.evaluation.regime import PolicyEvaluation, regime_row  # noqa: E402
from rredcot.generation import SamplingParams, backend_from_settings  # noqa: E402
from rredcot.models.sft import demonstrations, heldout_demonstrations, run_sft  # noqa: E402
from rredcot.models.sft_settings import sft_block  # noqa: E402
from rredcot.models.tiny import build_tiny_model  # noqa: E402
from rredcot.models.tokenizer import build_byte_tokenizer  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402

SUMMARY = (
    "greedy_pass1", "greedy_luck", "greedy_systematic_share",
    "t1_pass1", "t1_luck", "t1_systematic_share", "rule_applies_share",
)  # fmt: skip


def evaluate(model_dir: Path, rows: list[dict], misconception: Misconception, k: int) -> dict:
    """Greedy and T = 1 pass@1, luck and the systematic share of the errors of one policy, by
    the grader and `rredcot.evaluation.regime`, as the workflow's regime table computes them."""
    task = get_task("synthetic")
    backend = backend_from_settings({"backend": "hf", "dtype": "float32"}, str(model_dir))
    problems = pl.DataFrame(rows)
    prompts = [task.build_prompt(r["problem"]) for r in rows]
    frames = []
    for n, temperature in ((k, 1.0), (1, 0.0)):  # the world's protocol (T = 1), then greedy
        sampling = SamplingParams(
            n=n, temperature=temperature, top_p=1.0, max_new_tokens=128, seed=0,
            stop_strings=tuple(task.stop_strings),
        )  # fmt: skip
        done = backend.generate(prompts, sampling)
        generations = pl.DataFrame(
            {
                "problem_id": [rows[c.prompt_index]["id"] for c in done],
                "sample_index": [c.sample_index for c in done],
                "method": ["probe"] * len(done),
                "seed": [0] * len(done),
                "num_tokens": [c.num_tokens for c in done],
                "finish_reason": [c.finish_reason for c in done],
                "text": [c.text for c in done],
            }
        )
        grades = grade_generations(generations, problems, task, show_progress=False)
        frames += [grades, generations]
    row = regime_row(PolicyEvaluation(*frames), problems, misconception)
    return {key: row[key] for key in SUMMARY}


def development_world(
    w: dict, seed: int, train_n: int | None = None, eval_n: int | None = None
) -> dict:
    """The probe's world from a config's `world` block and a development seed: its SFT split
    and `synth_id` only (sizes capped by `train_n` / `eval_n`)."""
    train = SplitSpec(train_n or w["train"]["n"], tuple(w["train"]["depths"]))
    split = w["splits"]["synth_id"]
    benchmarks = {"synth_id": SplitSpec(eval_n or split["n"], tuple(split["depths"]))}
    return make_world(train, benchmarks, seed, world_config(w))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.6, 0.8])
    p.add_argument("--rule", default="smaller_from_larger")
    p.add_argument("--seed", type=int, default=99, help="development seed (never reported)")
    p.add_argument("--max-steps", type=int, default=None, help="cap SFT's steps (a quick look)")
    p.add_argument("--train-n", type=int, default=None, help="cap the SFT split's size")
    p.add_argument("--eval-n", type=int, default=None, help="cap synth_id's size")
    p.add_argument("--samples", type=int, default=4, help="k of pass@1 at T = 1")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "probe_misconception")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = yaml.safe_load(args.config.read_text())
    tables = development_world(config["world"], args.seed, args.train_n, args.eval_n)
    eval_rows = list(tables["synth_id"].iter_rows(named=True))
    sft = dict(config["sft"])
    if args.max_steps:
        sft["max_steps"] = args.max_steps
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "probe.csv"
    settings, errors, n_heldout = sft_block(sft, args.seed, tables["train"].height)
    train = tables["train"]
    fit, held = train.head(train.height - n_heldout), train.tail(n_heldout)
    task, tokenizer = get_task("synthetic"), build_byte_tokenizer()
    rows = []
    for rate in args.rates:
        misconception = Misconception(args.rule, rate)
        examples = demonstrations(fit, task, tokenizer, errors.slip_rate, args.seed, misconception)
        # the transition is read against the demonstrations' mode (the misconception where > 1/2)
        heldout = heldout_demonstrations(held, task, tokenizer, args.seed, misconception)
        model = build_tiny_model(config["model"]["arch"], tokenizer, seed=args.seed)
        model_dir = args.out / f"base_rate{rate:g}"
        start = time.time()
        metrics = run_sft(model, tokenizer, examples, settings, model_dir, heldout=heldout)
        row = {
            "rule": args.rule,
            "rate": rate,
            "slip_rate": errors.slip_rate,
            "sft_steps": metrics["train/steps"],
            "sft_transition_step": metrics.get("train/transition_step", ""),
            "sft_seconds": round(time.time() - start, 1),
            **evaluate(model_dir, eval_rows, misconception, args.samples),
        }
        rows.append(row)
        print(row, flush=True)
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
