"""The fixed paths rules share: one place names each, so an input and the rule that writes it
cannot drift apart."""

from __future__ import annotations

# The base policy all jobs start from: the tiny model SFT-ed here, or `model.name_or_path`
# fetched (at `model.revision`) into the same directory, so no rule downstream tells them apart
# and compute nodes never need the Hub.
BASE_MODEL = "results/models/base"
# The CPU rehearsal's stand-ins (`stand_in`): a tiny chat model built by a rule in place of
# the Hub model, and the registry training set written from a mirrored benchmark.
STAND_IN_MODEL = "results/stand_in/model"
STAND_IN_MIRROR = "results/stand_in/mirror"
STAND_IN_SOURCE = "gsm8k"
# The check that the runs' LoRA target_modules name modules of the base model.
LORA_CHECK = "results/models/lora_targets.json"
# The regime table: greedy and T = 1 pass@1, luck and systematic-error share of every policy.
REGIME_TABLE = "results/regime_table.csv"
ATTRIBUTION_TABLE = "results/credit_attribution.csv"
SUMMARY = "results/SUMMARY.md"
# The summary sums every job's timing file but its own (from an earlier run of it).
SUMMARY_BENCHMARK = "results/benchmarks/summary.tsv"
