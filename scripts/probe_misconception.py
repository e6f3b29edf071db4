"""Does a misconception in the demonstrations make the base's greedy output fail? The probe of
the positive-control regimes (METHOD.md §4): one base per misconception rate, on a development
seed that no reported run uses, SFT-ed as the workflow does (config.yaml's world, model and
sft blocks; the same slips), then evaluated on the world's `synth_id` split.

    python scripts/probe_misconception.py --rates 0 0.6 0.8 --out results/probe_misconception

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

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rredcot.data.error_kinds import first_error_kind  # noqa: E402
from rredcot.data.misconceptions import Misconception  # noqa: E402
from rredcot.data.synthetic import (  # noqa: E402
    Program,
    SplitSpec,
    extract_answer,
    make_world,
    world_config,
)
from rredcot.generation import SamplingParams, backend_from_settings  # noqa: E402
from rredcot.models.sft import demonstrations, heldout_demonstrations, run_sft  # noqa: E402
from rredcot.models.sft_settings import sft_block  # noqa: E402
from rredcot.models.tiny import build_tiny_model  # noqa: E402
from rredcot.models.tokenizer import build_byte_tokenizer  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402


def rule_applies(program: Program, misconception: Misconception) -> bool:
    """Does the right solution of `program` have a step where the rule changes the value?"""
    values = program.values()
    return any(
        misconception.value(s.op, values[s.left], values[s.right], program.modulus) is not None
        for s in program.steps
    )


def evaluate(model_dir: Path, rows: list[dict], misconception: Misconception, k: int) -> dict:
    """Greedy and T = 1 pass@1, luck and the systematic share of the errors of one base."""
    task = get_task("synthetic")
    backend = backend_from_settings({"backend": "hf", "dtype": "float32"}, str(model_dir))
    prompts = [task.build_prompt(r["problem"]) for r in rows]
    programs = [Program.from_json(r["program"]) for r in rows]
    out: dict[str, float] = {}
    for label, n, temperature in (("greedy", 1, 0.0), ("t1", k, 1.0)):
        sampling = SamplingParams(
            n=n, temperature=temperature, top_p=1.0, max_new_tokens=128, seed=0,
            stop_strings=tuple(task.stop_strings),
        )  # fmt: skip
        right = lucky = wrong = systematic = 0
        for c in backend.generate(prompts, sampling):
            prog = programs[c.prompt_index]
            ok = extract_answer(c.text) == prog.answer
            kind = first_error_kind(prog, c.text, misconception)  # the checker's verdict
            right += ok
            lucky += ok and kind != "correct"
            wrong += kind != "correct"
            systematic += kind == "systematic"
        total = len(rows) * n
        out[f"{label}_pass1"] = right / total
        out[f"{label}_luck"] = lucky / total
        out[f"{label}_systematic_share"] = systematic / wrong if wrong else float("nan")
    out["rule_applies_share"] = sum(rule_applies(p, misconception) for p in programs) / len(rows)
    return out


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
    w = config["world"]
    train = SplitSpec(args.train_n or w["train"]["n"], tuple(w["train"]["depths"]))
    split = w["splits"]["synth_id"]
    benchmarks = {"synth_id": SplitSpec(args.eval_n or split["n"], tuple(split["depths"]))}
    tables = make_world(train, benchmarks, args.seed, world_config(w))
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
