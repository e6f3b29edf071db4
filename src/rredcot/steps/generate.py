"""Rule `generate`: k samples per benchmark problem from one policy, kept as parquet."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.schema import read_parquet
from rredcot.generation import SamplingParams, backend_from_settings
from rredcot.models.loading import load_tokenizer
from rredcot.planning.prompt_budget import check_generation_prompts
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.tasks import get_task


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--policy", required=True, help="checkpoint directory or Hub id")
    p.add_argument("--problems", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--method", required=True)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    setup(args.threads)
    prm = args.params
    task_name, seed, backend_name = require(prm, "task", "seed", "backend")
    seed_everything(seed)
    # `seed` seeds the sampling (one seed for every policy: common random numbers); the rows
    # carry the training seed of the evaluated run (`run_seed`), by which the tables group.
    run_seed = prm.get("run_seed", seed)
    problems = read_parquet(args.problems)
    if prm.get("max_problems"):
        problems = problems.head(prm["max_problems"])
    task = get_task(task_name)
    tokenizer = load_tokenizer(args.policy)
    prompts = [task.build_prompt(q, tokenizer) for q in problems["problem"].to_list()]
    check_generation_prompts(problems["id"].to_list(), prompts, tokenizer, prm)
    sampling = SamplingParams(
        n=prm["samples_per_problem"],
        temperature=prm["temperature"],
        top_p=prm["top_p"],
        max_new_tokens=prm["max_new_tokens"],
        seed=seed,
        stop_strings=tuple(task.stop_strings),
    )
    log.info(
        "%d problems x %d samples, %s backend, policy %s",
        len(prompts),
        sampling.n,
        backend_name,
        args.policy,
    )
    backend = backend_from_settings(prm, args.policy)
    completions = backend.generate(prompts, sampling)
    ids = problems["id"].to_list()
    out = pl.DataFrame(
        {
            "problem_id": [ids[c.prompt_index] for c in completions],
            "sample_index": [c.sample_index for c in completions],
            "method": [args.method] * len(completions),
            "seed": [run_seed] * len(completions),
            "prompt": [prompts[c.prompt_index] for c in completions],
            "text": [c.text for c in completions],
            "token_ids": [list(c.token_ids) for c in completions],
            "num_tokens": [c.num_tokens for c in completions],
            "finish_reason": [c.finish_reason for c in completions],
        },
        schema_overrides={"token_ids": pl.List(pl.Int64), "seed": pl.Int64},
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out.write_parquet(args.out)
    n_tok = int(out["num_tokens"].sum())
    log.info(
        "wrote %d completions (%d new tokens; %.1f%% hit max_new_tokens) to %s",
        out.height,
        n_tok,
        100 * (out["finish_reason"] == "length").mean(),
        args.out,
    )


if __name__ == "__main__":
    main()
