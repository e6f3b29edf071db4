"""Write docs/paper_settings.md: every value of every paper config, its source and why.

    python scripts/paper_settings.py            # rewrite the doc from configs/paper_*.yaml
    python scripts/paper_settings.py --check    # exit 1 when the doc is not what it renders

Sources: `paper` (RREDCoT, arXiv:2606.06475, through the secondary summaries in docs/method.md),
`official SRPO` (github.com/Ankur-Samanta/SRPO), `open-r1` (Hugging Face's R1
reproduction and its DeepSeek-R1 evaluation protocol), `open-rs`
(knoveleng/open-rs, the 1.5B "open-rs setting"), `ours` (a choice of this workflow). A value no
rule below covers stops the script (and tests/unit/test_paper_settings.py), so a new config
value cannot go undocumented.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from rredcot.reporting.rendered_docs import write_or_check  # noqa: E402

DOC = REPO / "docs" / "paper_settings.md"
SOURCES = ("paper", "official SRPO", "open-r1", "open-rs", "ours")
CONFIGS = {"paper_qwen3_4b": "Qwen3-4B (paper scale a)", "paper_r1_distill_1p5b": "R1-Distill 1.5B"}

# (config stem or "*", dotted-key pattern, source, why); the first match wins.
RULES: list[tuple[str, str, str, str]] = [
    ("*", "conda_env", "ours", "CUDA torch, vLLM and DeepSpeed for GPU nodes"),
    ("*", "seed", "ours", "sampling and bootstrap seed; training seeds are training.seeds"),
    ("paper_qwen3_4b", "data.train", "paper", "RREDCoT trains Qwen3-4B on NuminaMath-CoT"),
    (
        "paper_r1_distill_1p5b",
        "data.train",
        "paper",
        "the 1.5B result is in the open-rs setting, whose training set this is",
    ),
    (
        "paper_qwen3_4b",
        "data.train_max_problems",
        "ours",
        "the paper gives no subset size; 300 steps x 32 prompts = 9,600 prompts, a little over one "
        "pass of 8,192",
    ),
    ("paper_r1_distill_1p5b", "data.train_max_problems", "open-rs", "all 7k open-rs problems"),
    (
        "paper_qwen3_4b",
        "model.name_or_path",
        "paper",
        "the summaries say Qwen3-4B; we take its Instruct-2507 release (no thinking, 262k context)",
    ),
    ("paper_r1_distill_1p5b", "model.name_or_path", "open-rs", "the model open-rs refines"),
    ("*", "model.revision", "ours", "a public pin of the Hub repository (not checked live)"),
    ("*", "model.dtype", "ours", "bf16 weights on H100/A100-class GPUs"),
    (
        "paper_qwen3_4b",
        "model.enable_thinking",
        "ours",
        "Instruct-2507 does not think; pinned false so a swap to the hybrid Qwen3-4B would not "
        "either (rredcot.models.chat)",
    ),
    (
        "paper_r1_distill_1p5b",
        "model.enable_thinking",
        "ours",
        "its template opens <think> in every prompt; false is refused",
    ),
    (
        "*",
        "benchmarks",
        "paper",
        "what the paper reports (AIME24/25/26, MATH-500, Minerva) and AMC23 of the open-rs setting",
    ),
    ("*", "evaluation.backend", "ours", "vLLM: 25k-32k-token generations are impractical with HF"),
    (
        "*",
        "evaluation.samples_per_problem",
        "open-r1",
        "the DeepSeek-R1 protocol's k (per benchmark below)",
    ),
    ("*", "evaluation.temperature", "open-r1", "the DeepSeek-R1 protocol"),
    ("*", "evaluation.top_p", "open-r1", "the DeepSeek-R1 protocol"),
    (
        "*",
        "evaluation.per_benchmark.gsm8k.*",
        "ours",
        "GSM8K is not a reported benchmark: one sample, a short budget",
    ),
    ("paper_qwen3_4b", "evaluation.*max_new_tokens", "paper", "the paper's 25k-token budget"),
    (
        "paper_r1_distill_1p5b",
        "evaluation.*max_new_tokens",
        "open-r1",
        "the R1 protocol's 32,768-token budget",
    ),
    ("*", "evaluation.vllm.tensor_parallel_size", "ours", "a 1.5-4B model fits one GPU"),
    (
        "*",
        "evaluation.vllm.gpu_memory_utilization",
        "ours",
        "an evaluation job has its GPU to itself (rredcot.devices gives each job its own)",
    ),
    (
        "*",
        "evaluation.vllm.max_model_len",
        "ours",
        "the longest budget plus a prompt allowance; checked at load time to fit the GPU "
        "(rredcot.planning.vllm_memory)",
    ),
    (
        "*",
        "evaluation.vllm.enable_prefix_caching",
        "ours",
        "k samples share a prompt",
    ),
    (
        "*",
        "evaluation.per_benchmark.*.samples_per_problem",
        "open-r1",
        "the DeepSeek-R1 protocol: k = 32 for AIME and AMC, 4 for MATH-500 and Minerva",
    ),
    ("*", "segmentation.strategy", "paper", "hybrid keyword-entropy segmentation"),
    ("*", "segmentation.num_segments", "ours", "K is not given; 8 for long reasoning traces"),
    (
        "*",
        "segmentation.discourse_markers",
        "ours",
        "also cut before Wait, But, So, ...: frequent step openers in reasoning traces",
    ),
    ("*", "estimator.rredcot.suffixes", "ours", "every reference suffix: the exact estimate"),
    (
        "*",
        "estimator.rredcot.*",
        "ours",
        "memory caps of one scoring pass for an 80 GB GPU (not run on a GPU yet)",
    ),
    ("*", "estimator.mc.*", "ours", "the studies' MC estimator (N, budget L, drop truncated)"),
    ("*", "references.temperature", "open-r1", "sampled references use the evaluation protocol"),
    ("*", "references.top_p", "open-r1", "sampled references use the evaluation protocol"),
    (
        "*",
        "references.*",
        "ours",
        "dataset solutions verify for most problems; the rest get a few sampled attempts",
    ),
    (
        "*",
        "studies.enabled",
        "ours",
        "every estimator study (the embedded quick default runs none)",
    ),
    ("*", "studies.split", "ours", "MATH-500 problems come with solutions to serve as references"),
    (
        "*",
        "studies.*",
        "ours",
        "study sizes for the budget; the embedded default's world-only settings are switched off",
    ),
    (
        "*",
        "training.curve.split",
        "ours",
        "curves need a world split: none here",
    ),
    ("*", "training.variants", "ours", "no side runs at paper scale"),
    ("*", "training.extra_seeds", "ours", "every method on the same seeds"),
    ("*", "training.methods", "paper", "GRPO, RREDCoT, MC and the RRPO/SRPO baselines"),
    (
        "*",
        "training.seeds",
        "ours",
        "two seeds for the budget (the official SRPO runs three: 42, 0, 420)",
    ),
    ("paper_qwen3_4b", "training.max_steps", "ours", "the paper gives no step count"),
    (
        "paper_r1_distill_1p5b",
        "training.max_steps",
        "ours",
        "open-rs trains 500 steps; 100 for the budget of five methods x two seeds",
    ),
    ("paper_qwen3_4b", "training.prompts_per_step", "official SRPO", "32 prompts per batch"),
    (
        "paper_r1_distill_1p5b",
        "training.prompts_per_step",
        "ours",
        "16 prompts x 8 = 128 responses per step on 4 GPUs (open-rs: 12 prompts x 6)",
    ),
    (
        "*",
        "training.num_generations",
        "official SRPO",
        "n = 8, split 4 fresh + 4 after the reset for RRPO/SRPO (open-rs: 6, which the split "
        "cannot halve into the official 4 + 4)",
    ),
    ("paper_qwen3_4b", "training.max_completion_length", "paper", "25k-token generations"),
    (
        "paper_r1_distill_1p5b",
        "training.max_completion_length",
        "open-rs",
        "open-rs's completion budget",
    ),
    ("*", "training.per_method.*.temperature", "official SRPO", "rollout temperature 0.7"),
    ("*", "training.per_method.*.top_p", "official SRPO", "rollout top_p 0.95"),
    ("*", "training.per_method.*.lora.*", "official SRPO", "LoRA r = 64, alpha = 64, all-linear"),
    ("*", "training.per_method.*.learning_rate", "official SRPO", "AdamW lr 5e-5 (with LoRA)"),
    ("*", "training.per_method.*.weight_decay", "official SRPO", "weight decay 0.01"),
    (
        "*",
        "training.per_method.*.accelerate",
        "ours",
        "ZeRO-3 cannot gather for their data-dependent sampling; the adapters' state is small",
    ),
    (
        "*",
        "training.per_method.mc.max_steps",
        "ours",
        "config.yaml's 30-step mc override does not apply: every method the same steps",
    ),
    (
        "paper_qwen3_4b",
        "training.temperature",
        "ours",
        "GRPO/RREDCoT/MC sample pi itself; RRPO/SRPO take the official 0.7 (per_method)",
    ),
    (
        "paper_qwen3_4b",
        "training.top_p",
        "ours",
        "no nucleus truncation; RRPO/SRPO take the official 0.95 (per_method)",
    ),
    ("paper_r1_distill_1p5b", "training.temperature", "official SRPO", "rollout temperature 0.7"),
    ("paper_r1_distill_1p5b", "training.top_p", "official SRPO", "rollout top_p 0.95"),
    ("*", "training.learning_rate", "open-rs", "lr 1e-6 of the open-rs / open-r1 GRPO recipes"),
    ("paper_qwen3_4b", "training.lr_scheduler", "ours", "constant over a short run"),
    ("paper_r1_distill_1p5b", "training.lr_scheduler", "open-rs", "cosine decay"),
    (
        "paper_qwen3_4b",
        "training.warmup_ratio",
        "ours",
        "no warm-up, as the official SRPO configuration lists none; open-r1's long "
        "recipe warms up 10%, the setting to take if the constant lr proves unstable",
    ),
    ("paper_r1_distill_1p5b", "training.warmup_ratio", "open-rs", "10% linear warm-up"),
    (
        "paper_qwen3_4b",
        "training.weight_decay",
        "ours",
        "none for full fine-tuning; RRPO/SRPO take the official 0.01 (per_method)",
    ),
    ("paper_r1_distill_1p5b", "training.weight_decay", "official SRPO", "weight decay 0.01"),
    (
        "*",
        "training.max_grad_norm",
        "official SRPO",
        "clip 1.0 for every method, so the baselines keep their official clip (open-r1 clips at "
        "0.2; not adopted for that reason)",
    ),
    ("*", "training.save_steps", "ours", "a killed run loses at most 25 steps"),
    ("*", "training.mc.*", "ours", "the mc method's N and budget, cheaper than the studies'"),
    ("*", "training.resets.*", "official SRPO", "self-localization: temperature 0.3, 4096 tokens"),
    ("*", "training.device", "ours", "accelerate places each process on its GPU"),
    ("*", "training.bf16", "ours", "bf16 mixed precision with bf16 weights"),
    ("*", "training.gradient_checkpointing", "ours", "long responses need the activation memory"),
    ("*", "training.accelerate", "ours", "the launcher for the model size (configs/accelerate)"),
    ("*", "training.num_processes", "ours", "one process per GPU of one node"),
    (
        "*",
        "training.per_device_batch_size",
        "ours",
        "per_device x accumulation x processes = prompts x generations: one step's batch; rows "
        "of one micro-batch that fit one GPU by the memory planner "
        "(rredcot.planning.memory_plan, checked at load time; docs/memory.md)",
    ),
    (
        "*",
        "training.gradient_accumulation_steps",
        "ours",
        "micro-batches of one step: raised as per_device_batch_size is lowered to fit the GPU",
    ),
    ("*", "training.use_vllm", "ours", "vLLM rollouts through TRL"),
    ("*", "training.vllm_mode", "ours", "colocated: the engine shares the training GPUs"),
    (
        "*",
        "training.vllm_gpu_memory_utilization",
        "ours",
        "0.3 of each GPU for the colocated engine, the rest for ZeRO training (official SRPO: 0.5 "
        "beside FSDP; not adopted: it leaves too little for full fine-tuning of 4B at 25k tokens)",
    ),
    (
        "*",
        "training.vllm_max_model_length",
        "ours",
        "null: derived per method (prompt + completion + the method's suffix, localization or MC "
        "budget; official SRPO: max_model_len 8192 for 4096-token responses; open-rs 4608); "
        "checked to fit the share",
    ),
    (
        "*",
        "training.max_prompt_tokens",
        "open-rs",
        "open-rs's vllm_max_model_len 4608 = 1024 + 3584 completion tokens",
    ),
    (
        "*",
        "training.updates_per_generation",
        "ours",
        "one update per generation; the official SRPO takes 4 (mini-batch 8 of 32 prompts), not "
        "adopted: the official SRPO loss is the on-policy one, which updates 2-4 would leave "
        "(available for grpo, rredcot, mc)",
    ),
    ("*", "training.num_iterations", "ours", "one pass: on-policy, as every method's loss assumes"),
    (
        "*",
        "training.mask_truncated_completions",
        "ours",
        "open-r1's long recipe masks truncated responses; not adopted: the official RRPO/SRPO loss "
        "counts every token, and all methods share the setting",
    ),
    (
        "*",
        "training.ddp_timeout",
        "ours",
        "MC rollouts and SRPO's localization make per-rank step time data-dependent; TRL's 1800 s "
        "could fail a healthy run",
    ),
    ("*", "training.report_to", "ours", "no tracker by default; not part of the run record"),
    (
        "*",
        "resources.*",
        "ours",
        "one 8-GPU 80 GB node per training run, one GPU per other GPU job (docs/paper_budget.md)",
    ),
]


def flatten(mapping: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf; a list or an empty mapping is one value."""
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from flatten(value, dotted)
        else:
            yield dotted, value


def show(value: Any) -> str:
    """A value as YAML flow text (what the table shows in its value column)."""
    return yaml.safe_dump([value], default_flow_style=True, width=10**6).strip()[1:-1]


def annotation(stem: str, key: str) -> tuple[str, str]:
    for config, pattern, source, why in RULES:
        if config in ("*", stem) and fnmatch.fnmatchcase(key, pattern):
            return source, why
    raise KeyError(f"{stem}: no rule in scripts/paper_settings.py documents {key!r}")


def table(stem: str) -> list[str]:
    config = yaml.safe_load((REPO / "configs" / f"{stem}.yaml").read_text())
    rows = ["| key | value | source | why |", "|---|---|---|---|"]
    for key, value in flatten(config):
        source, why = annotation(stem, key)
        rows.append(f"| `{key}` | `{show(value)}` | {source} | {why} |")
    return rows


def render() -> str:
    lines = [
        "# Paper-config settings: value, source, why",
        "",
        "Written by `python scripts/paper_settings.py` from `configs/paper_*.yaml`: every value",
        "each paper config sets (the keys it leaves out keep config.yaml's defaults, described in",
        "workflow/schemas/config.schema.yaml), where it comes from and why. Sources: **paper**",
        "(RREDCoT, arXiv:2606.06475, through the secondary summaries in [method.md](method.md)),",
        "**official SRPO** (github.com/Ankur-Samanta/SRPO), **open-r1** (its GRPO recipes and the",
        "DeepSeek-R1 evaluation protocol), **open-rs** (knoveleng/open-rs), **ours**",
        "(this workflow's choice). Where a source",
        "has a value and the paper is silent, the row says whether it was adopted and why not.",
        "tests/unit/test_paper_settings.py fails when a config value is missing here.",
        "",
    ]
    for stem, title in CONFIGS.items():
        lines += [f"## {title}: `configs/{stem}.yaml`", "", *table(stem), ""]
    return "\n".join(lines)


def main() -> None:
    write_or_check(DOC, render, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
