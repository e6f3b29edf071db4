"""The training methods by name: the one list every other place derives from.

Torch-free, so that the config check at Snakemake load time, the schema (`rredcot.config`
fills the method names and the per-method override keys of `config.schema.yaml` in from here)
and the workflow's method list read it without loading the trainer. The implementation of
each method is one class in its own module under `rredcot.training.methods`, named here by
import path; `rredcot.training.methods.METHODS` imports them.

Adding a method: write `rredcot/training/methods/<name>.py` (a `Method`, or a
`SegmentCreditMethod` for a credit method, with a `from_settings` factory) and add one
`MethodSpec` below.
"""

from __future__ import annotations

from dataclasses import dataclass

SHARED_RUN_KEYS: tuple[str, ...] = (
    "max_steps",
    "prompts_per_step",
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_p",
    "learning_rate",
    "lr_scheduler",
    "warmup_ratio",
    "weight_decay",
    "max_grad_norm",
    "kl_beta",
    "epsilon",
    "loss_type",
    "scale_rewards",
    "save_steps",
    "save_total_limit",
    "max_problems",
    "rule_share",
    "gradient_checkpointing",
    "padding_free",
    "per_device_batch_size",
    "gradient_accumulation_steps",
    "use_vllm",
    "vllm_mode",
    "vllm_gpu_memory_utilization",
    "vllm_tensor_parallel_size",
    "vllm_server_host",
    "vllm_server_port",
    "max_prompt_tokens",
    "vllm_max_model_length",
    "updates_per_generation",
    "num_iterations",
    "mask_truncated_completions",
    "lora",
    "accelerate",
)
"""Keys of config `training` that every method's runs may override (`training.per_method.<m>`,
`training.variants`); a method adds the keys of its own settings (`MethodSpec.run_keys`)."""


@dataclass(frozen=True)
class MethodSpec:
    """What the workflow and the config check need to know of a method, without importing it."""

    name: str
    implementation: str
    """`module:Class` of the `Method` subclass."""
    summary: str
    """One line for the docs and `--help`."""
    run_keys: tuple[str, ...] = ()
    """Keys of config `training` beyond `SHARED_RUN_KEYS` that this method reads, so that its
    runs may override them (e.g. `credit` for the credit methods)."""
    resets: bool = False
    """Samples its own groups with resets (RRPO/SRPO): TRL's loss is the official one only under
    loss_type grpo, kl_beta 0 and an even num_generations (`settings_checks.settings_error`)."""
    own_rollouts: bool = False
    """Calls the trainer's sampler itself with data-dependent sizes (MC's rollouts, the resets'
    groups), which some vLLM layouts cannot serve (`training.trl_config.check_collectives`)."""
    analysis_only: bool = False
    """Reads the synthetic world's answer key (`program`): an oracle for analysis, never a
    method under test; the synthetic task only."""
    reads_misconception: bool = False
    """Reads the world's misconception (the workflow sets `training.misconception` from
    `sft.misconception` for its runs): the rule-aware oracle."""
    context_keys: tuple[str, ...] = ()
    """Run settings (dotted paths, e.g. `mc.budget`) counting the tokens the method's own
    sampling appends to a response prefix; the vLLM context adds the largest
    (`vllm_memory.training_length`)."""
    scores_reference_states: bool = False
    """Scores every segment state against the reference's suffixes (RREDCoT): the memory planner
    adds that scoring's peak (`memory_plan.credit_phases`) under the `rredcot` block."""

    def __post_init__(self) -> None:
        if ":" not in self.implementation:
            raise ValueError(f"method {self.name!r}: implementation must be 'module:Class'")
        clash = sorted(set(self.run_keys) & set(SHARED_RUN_KEYS))
        if clash:
            raise ValueError(f"method {self.name!r}: run_keys {clash} are shared keys already")


_CREDIT_KEYS = ("credit",)

METHOD_SPECS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            "grpo",
            "rredcot.training.methods.grpo:GRPOMethod",
            "outcome advantage A_i on every token (TRL's GRPO)",
        ),
        MethodSpec(
            "rredcot",
            "rredcot.training.methods.rredcot:RREDCoTMethod",
            "RREDCoT σ_{i,k} per segment → token advantages",
            run_keys=(*_CREDIT_KEYS, "rredcot", "reference"),
            scores_reference_states=True,
        ),
        MethodSpec(
            "mc",
            "rredcot.training.methods.mc:MCMethod",
            "VinePPO-style Monte Carlo σ_k = V̂(s_k) − V̂(s_{k−1})",
            run_keys=(*_CREDIT_KEYS, "mc_batch_size"),
            own_rollouts=True,
            context_keys=("mc.budget",),
        ),
        MethodSpec(
            "oppo",
            "rredcot.training.methods.oppo:OPPOMethod",
            "OPPO's self-oracle: Bayes success probability from π with/without the reference",
            run_keys=(*_CREDIT_KEYS, "oppo"),
        ),
        MethodSpec(
            "rrpo",
            "rredcot.training.methods.rrpo:RRPOMethod",
            "resets at a uniform random step of a failed chain",
            run_keys=("resets",),
            resets=True,
            own_rollouts=True,
            context_keys=("max_completion_length",),  # a suffix of L new tokens after the prefix
        ),
        MethodSpec(
            "srpo",
            "rredcot.training.methods.srpo:SRPOMethod",
            "resets where the policy localizes its own first error",
            run_keys=("resets",),
            resets=True,
            own_rollouts=True,
            # the suffix, and the localization prompt reading the whole failed chain
            context_keys=("max_completion_length", "resets.localization_max_new_tokens"),
        ),
        MethodSpec(
            "oracle_step",
            "rredcot.training.methods.oracle_step:OracleStepMethod",
            "positive control: per-line values from the world's step checker",
            run_keys=_CREDIT_KEYS,
            analysis_only=True,
        ),
        MethodSpec(
            "oracle_rule",
            "rredcot.training.methods.oracle_rule:OracleRuleMethod",
            "rule-aware positive control: per-line values with one accuracy per line kind",
            run_keys=_CREDIT_KEYS,
            analysis_only=True,
            reads_misconception=True,
        ),
    )
}
"""Every training method, in the order the docs and tables list them."""

RESET_METHODS: tuple[str, ...] = tuple(n for n, s in METHOD_SPECS.items() if s.resets)
"""Methods whose loss is TRL's only under loss_type grpo, kl_beta 0, an even num_generations."""


def method_spec(name: str) -> MethodSpec:
    """The spec of method `name`, or an error that lists the methods."""
    if name not in METHOD_SPECS:
        raise ValueError(
            f"method: {name!r} is not a training method; choose one of {list(METHOD_SPECS)}"
        )
    return METHOD_SPECS[name]


def schema_fragments() -> dict[str, object]:
    """The parts of the config schema that list methods, built from `METHOD_SPECS`
    (`rredcot.config.load_schema` puts them in place)."""
    names = list(METHOD_SPECS)
    per_method = {
        name: {
            "type": "object",
            "description": f"overrides of the {name} runs"
            + (" (loss_type grpo and kl_beta 0 are required)" if spec.resets else ""),
            "propertyNames": {"enum": [*SHARED_RUN_KEYS, *spec.run_keys]},
        }
        for name, spec in METHOD_SPECS.items()
    }
    return {"names": names, "per_method": per_method}
