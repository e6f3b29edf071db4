"""Memory planner (issue #29): the estimated peak of each phase of a GPU training rule.

Everything is a formula of the model's shape and the config's batching, read off the code that
allocates it:

- **weights, gradients, optimizer** (per GPU): under DeepSpeed, N parameters in the model
  dtype, gradients in it too, AdamW's fp32 master copy and two moments (12 bytes a parameter);
  ZeRO-2 splits gradients and optimizer over the processes, ZeRO-3 the weights too. Without
  DeepSpeed the policy is trained in float32 (`rredcot.training.precision`): 4-byte weights and
  gradients, two moments (8 bytes), and under bf16 autocast the residual stream the checkpoints
  keep is float32 too. LoRA trains (and stores optimizer state for) the adapters only, on a base
  in the model dtype;
- **vLLM** (colocated): the share it reserves (`training.vllm_gpu_memory_utilization`) of the
  device's real memory: vLLM takes the fraction of what CUDA reports, and a card sold as "80 GB"
  has 80 GiB (85.9 GB; an H100 reports 81,559 MiB), so the share is of `memory_gb` GiB
  (`device_bytes`) while the budget the peak is held to stays `memory_gb` × 10⁹ bytes, the
  ~5 GB between them left to the CUDA context, NCCL and the allocator's fragmentation;
- **the method's pass** (`gathered`): under ZeRO-3 the trainer gathers every weight on every GPU
  for the method's own passes (the credit, MC's rollouts: `unwrap_model_for_generation`), so the
  whole model in the model dtype is held beside the shards while they run;
- **training micro-batch** (per_device rows of P + T tokens, checkpointed): each layer's input
  kept (rows·L·H), one layer recomputed (its activations and, in the backward, their
  gradients; all layers' without checkpointing),
  the dense (rows, 1, L, L) mask SDPA takes on a padded batch (boolean, and its copy in the model
  dtype; none under `training.padding_free`, whose rows run unpadded one at a time through
  SDPA's causal kernel, so one row's layer is recomputed at a time), and TRL 1.16's fused LM head
  (`trl.trainer.utils.add_fused_lm_head`: no (rows, T, V) logits; the completion positions'
  hidden states kept, their float32 gradient, the head's float32 gradient when the head is
  trained, and one (4096, 32768) projection tile);
- **credit** (rredcot): the resident chunk's trace cache (rows × (P_max + T_max) slots of keys
  and values of every layer, `rredcot.scoring.chunks`), its last hidden states, and the largest
  pass on top: an encoding step (`ENCODE_CHUNK` tokens a row: its mask, boolean and in the model
  dtype, and its layer activations, plus one layer's cache copy as the cache grows) or a
  continuation row of the shared layout (its mask and activations), whichever is larger; the
  keys kept between pruning rounds are reported apart, as their bound
  (`prune_max_kept_tokens` slots).

**Attention kernel.** Every masked pass (the padded training batch, the credit's encoding and
continuation rows) is assumed to run in SDPA's memory-efficient kernel, which never holds the
(rows, heads, queries, keys) attention weights; a fallback to SDPA's math kernel holds them, 8-15
GB a pass at the paper's lengths, which the planner does not count (`SDPA_ASSUMPTION`;
scripts/gpu_check.py probes the kernel at those shapes).

`credit_phases` is checked against the CPU peak of scaled shapes by bench/check_memory_plan.py
(docs/memory.md); `run_phases` adds them up for one GPU of a run's `train_policy` job, and
`config_errors` refuses, at Snakemake load time, a GPU run whose peak exceeds
`devices.memory_gb`, naming the key to change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rredcot.credit.segmentation import SegmentationConfig
from rredcot.training.method_registry import method_spec

ENCODE_CHUNK = 256  # rredcot.scoring.encoding.ENCODE_CHUNK (kept equal by a test)
CHUNK_ELEMENTS = 1 << 25  # rredcot.scoring.logprobs._MAX_CHUNK_ELEMENTS
SHARED_ROW_TOKENS, SHARED_ROW_MAX = 256, 4096  # rredcot.scoring.layout
HEAD_TILE = (4096, 32768)  # TRL 1.16's fused LM head: tokens × vocabulary of one projection tile
PROMPT_TOKENS = 512  # prompt tokens a training row is assumed to hold (the benchmarks' are shorter)
SDPA_ASSUMPTION = (
    "every masked pass runs in SDPA's memory-efficient kernel (a math-kernel fallback holds the "
    "attention weights, 8-15 GB a pass at 25k tokens, not counted; scripts/gpu_check.py probes it)"
)
"""The kernel assumption behind every estimate, printed with them (scripts/memory_plan.py)."""


def device_bytes(budget_bytes: int) -> int:
    """The real memory of a GPU sold as `budget_bytes` / 10⁹ GB (config key `devices.memory_gb`):
    that many GiB, what CUDA reports and vLLM's share is taken of (module docstring)."""
    return budget_bytes * 2**30 // 10**9


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs of a decoder: its sizes and its parameters' bytes."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = True
    bytes_per_value: int = 2

    @property
    def parameters(self) -> int:
        """Qwen2/3 decoders: embeddings (and an untied head), attention, SwiGLU MLP, norms."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        layer += 2 * self.head_dim  # q/k norms (Qwen3)
        head = 0 if self.tied else self.vocab * self.hidden
        return self.vocab * self.hidden + head + self.layers * layer + self.hidden

    @property
    def slot_bytes(self) -> int:
        """Keys and values of every layer for one token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value

    def layer_activation_bytes(self, tokens: int) -> int:
        """One layer's activations for `tokens` tokens: q, k, v, attention output, the MLP's
        gate, up and their product, and the residual stream."""
        width = (self.heads + 2 * self.kv_heads) * self.head_dim + self.heads * self.head_dim
        return tokens * (width + 3 * self.intermediate + 2 * self.hidden) * self.bytes_per_value

    def row_tokens(self) -> int:
        """`rredcot.scoring.layout.default_row_tokens` of the shared layout."""
        return min(SHARED_ROW_MAX, max(SHARED_ROW_TOKENS, self.slot_bytes // 8))


def shape_from_hf(cfg: Mapping[str, Any], bytes_per_value: int = 2) -> ModelShape:
    """The shape of a Hugging Face config.json mapping (a Qwen2/Qwen3-style decoder)."""
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    return ModelShape(
        int(cfg["num_hidden_layers"]),
        hidden,
        int(cfg["intermediate_size"]),
        heads,
        int(cfg.get("num_key_value_heads") or heads),
        int(cfg.get("head_dim") or hidden // heads),
        int(cfg["vocab_size"]),
        bool(cfg.get("tie_word_embeddings", False)),
        bytes_per_value,
    )


def shape_of(config: Mapping[str, Any], local: str | Path | None = None) -> ModelShape | None:
    """The shape of `model` in a config: `local`/config.json or `model.name_or_path`/config.json
    when on disk (None when it lacks a field the planner reads), else a known Hub model
    (`rredcot.planning.vllm_memory.KNOWN_CONFIGS`), else the tiny model of `model.arch` (byte
    vocabulary) when name_or_path is null; None otherwise."""
    from rredcot.planning.vllm_memory import KNOWN_CONFIGS

    model = config.get("model", {})
    size = 4 if model.get("dtype", "float32") == "float32" else 2
    name = model.get("name_or_path")
    if name is not None:
        for directory in (local, name):
            path = None if directory is None else Path(directory) / "config.json"
            if path is not None and path.is_file():
                try:
                    return shape_from_hf(json.loads(path.read_text()), size)
                except KeyError:  # not a decoder config the planner reads
                    return None
        known = KNOWN_CONFIGS.get(str(name))
        return None if known is None else shape_from_hf(known, size)
    arch = model.get("arch") or {}
    return ModelShape(
        arch["num_hidden_layers"],
        arch["hidden_size"],
        arch["intermediate_size"],
        arch["num_attention_heads"],
        arch["num_key_value_heads"],
        arch["head_dim"],
        259,
        bool(arch.get("tie_word_embeddings", True)),
        size,
    )


def advice(phases: Mapping[str, int], gpu_bytes: int) -> str | None:
    """None when the peak fits `gpu_bytes`; else which config key to change, and how."""
    if phases["peak"] <= gpu_bytes:
        return None
    if phases.get("gathered", 0) + phases["credit"] >= phases["training"]:
        if phases["credit"] == 0:
            return (
                "training.vllm_gpu_memory_utilization (ZeRO-3 gathers the whole model for the "
                "method's pass; or training.accelerate zero2)"
            )
        return (
            "estimator.rredcot.max_resident_tokens (fewer trace-cache slots resident; or "
            "prune_max_kept_tokens / max_tokens_per_pass)"
        )
    return (
        "training.per_device_batch_size (fewer rows a micro-batch, and gradient_accumulation_steps "
        "up to keep the batch; or training.padding_free, or max_completion_length)"
    )


def _mask_bytes(rows: int, queries: int, slots: int, shape: ModelShape) -> int:
    """A (rows, 1, queries, slots) mask: boolean, and the attention's copy in the model dtype."""
    return rows * queries * slots * (1 + shape.bytes_per_value)


def credit_phases(
    shape: ModelShape,
    prompt_lengths: Sequence[int],
    response_lengths: Sequence[int],
    *,
    states: int,
    max_resident_tokens: int | None = None,
    max_tokens_per_pass: int | None = None,
    prune_max_kept_tokens: int | None = None,
) -> dict[str, int]:
    """Bytes of the credit's parts at its peak over the chunks (module docstring): cache,
    hidden, pass (the larger of encoding and scoring), logits (the leading tokens' log-probs,
    `states` states a trace), and peak = their sum; pruning_bound: the kept keys' bound."""
    from rredcot.scoring.chunk_plan import plan_resident_chunks

    parts = {"cache": 0, "hidden": 0, "pass": 0, "logits": 0, "peak": 0}
    chunks = plan_resident_chunks(prompt_lengths, response_lengths, max_resident_tokens)
    for chunk in chunks:
        n = len(chunk)
        p = max(prompt_lengths[i] for i in chunk)
        t = max(response_lengths[i] for i in chunk)
        slots = p + t
        cache = n * slots * shape.slot_bytes
        hidden = n * (1 + t) * shape.hidden * shape.bytes_per_value
        step = min(ENCODE_CHUNK, t)
        rows = n if max_tokens_per_pass is None else max(1, min(n, max_tokens_per_pass // t))
        encode = _mask_bytes(rows, step, slots, shape) + shape.layer_activation_bytes(rows * step)
        encode += 2 * n * slots * shape.kv_heads * shape.head_dim * shape.bytes_per_value
        width = shape.row_tokens()
        if max_tokens_per_pass is not None:
            width = min(width, max_tokens_per_pass)
        score = _mask_bytes(1, width, slots + width, shape) + shape.layer_activation_bytes(width)
        lead_rows = min(n * states * 2, max(1, CHUNK_ELEMENTS // shape.vocab))
        logits = lead_rows * shape.vocab * (shape.bytes_per_value + 8)
        part = {"cache": cache, "hidden": hidden, "pass": max(encode, score), "logits": logits}
        part["peak"] = cache + hidden + max(part["pass"], logits)
        if part["peak"] > parts["peak"]:
            parts = part
    kept = prune_max_kept_tokens
    parts["pruning_bound"] = 0 if kept is None else kept * shape.slot_bytes
    return parts


def training_phases(
    shape: ModelShape,
    rows: int,
    length: int,
    completion: int,
    *,
    checkpointing: bool = True,
    padding_free: bool = False,
    head_trained: bool = True,
    residual_bytes: int | None = None,
) -> dict[str, int]:
    """Bytes of one training micro-batch's activations (module docstring): kept layer inputs,
    one recomputed layer (all of them without checkpointing), the dense mask (none when
    padding-free), TRL's fused LM head over the rows' `completion` positions. `residual_bytes`:
    bytes of a value of the residual stream the checkpoints keep (default the model dtype's; 4
    for float32 weights under bf16 autocast, whose residual adds stay float32)."""
    tokens = rows * length
    residual = shape.bytes_per_value if residual_bytes is None else residual_bytes
    kept = shape.layers * tokens * shape.hidden * residual
    layers = 1 if checkpointing else shape.layers
    # the backward holds a recomputed layer's activations and their gradients: of every row at
    # once, or of one row when padding-free (rows one at a time, SDPA's causal kernel)
    recomputed = length if padding_free and checkpointing else tokens
    recompute = 2 * layers * shape.layer_activation_bytes(recomputed)
    mask = 0 if padding_free else _mask_bytes(rows, length, length, shape)
    scored = rows * completion
    head = scored * shape.hidden * (residual + 4)  # kept states, float32 gradient
    head += scored * 4 * 8  # its per-token float32 statistics (log Z, entropy, gradients, ...)
    head += HEAD_TILE[0] * min(HEAD_TILE[1], shape.vocab) * shape.bytes_per_value
    if head_trained:  # the head's gradient is accumulated in float32
        head += shape.vocab * shape.hidden * 4
    return {"layer_inputs": kept, "layer": recompute, "mask": mask, "head": head}


def run_phases(
    shape: ModelShape,
    values: Mapping[str, Any],
    gpu_bytes: int,
    *,
    accelerate: str | None,
    num_processes: int,
) -> dict[str, int]:
    """Estimated bytes per phase on one GPU of a run's `train_policy` job: weights, gradients,
    optimizer, vLLM, training, gathered (ZeRO-3's whole model during the method's pass),
    credit (the method's pass and training run one after the other: the peak takes the larger
    of training and gathered + credit), and peak. `gpu_bytes`: the budget, `devices.memory_gb`
    × 10⁹ (vLLM's share is of `device_bytes` of it). `values` are the run's settings
    (`rredcot.workflow.run_params.run_settings`: config `training` with the method's and variant's
    overrides, the run's `rredcot` estimator block, `segmentation`), launched under
    `accelerate` on `num_processes` processes."""
    from rredcot.training.settings_checks import process_layout

    procs = num_processes
    n = shape.parameters
    trained = n
    if values.get("lora"):
        r = int(values["lora"]["r"])
        per_layer = r * (
            shape.hidden * 4
            + shape.heads * shape.head_dim * 2
            + shape.kv_heads * shape.head_dim * 2
            + 3 * (shape.hidden + shape.intermediate)
        )
        trained = shape.layers * per_layer
    size = shape.bytes_per_value
    colocated = values.get("use_vllm") and values.get("vllm_mode", "colocate") == "colocate"
    share = values.get("vllm_gpu_memory_utilization", 0) if colocated else 0
    sharded = procs if accelerate in ("zero2", "zero3") else 1
    # without DeepSpeed, AdamW writes float32 weights (rredcot.training.precision): no master copy
    masters = accelerate is None and not values.get("lora")
    trained_size = 4 if masters else size
    phases = {
        "weights": n * (4 if masters else size) // (procs if accelerate == "zero3" else 1),
        "gradients": trained * trained_size // sharded,
        "optimizer": trained * (8 if masters else 12) // sharded,
        "vllm": int(device_bytes(gpu_bytes) * share),
        "gathered": n * size if accelerate == "zero3" else 0,
    }
    if accelerate == "zero3":  # the layer being computed is gathered whole
        phases["weights"] += n * size // shape.layers
    per_device = values.get("per_device_batch_size")
    accumulation = int(values.get("gradient_accumulation_steps", 1))
    if per_device is None:
        per_device = process_layout(values, procs, False)[0]
    completion = int(values["max_completion_length"])
    train = training_phases(
        shape,
        int(per_device),
        PROMPT_TOKENS + completion,
        completion,
        checkpointing=bool(values.get("gradient_checkpointing")),
        padding_free=bool(values.get("padding_free")),
        head_trained=not values.get("lora"),
        residual_bytes=4 if masters else None,
    )
    phases["training"] = sum(train.values())
    phases["credit"] = 0
    if method_spec(values["method"]).scores_reference_states:
        rredcot = values.get("rredcot") or {}
        traces = int(per_device) * accumulation  # the local traces of one step
        credit = credit_phases(
            shape,
            [PROMPT_TOKENS] * traces,
            [completion] * traces,
            states=_segments(values.get("segmentation")) + 1,
            max_resident_tokens=rredcot.get("max_resident_tokens"),
            max_tokens_per_pass=rredcot.get("max_tokens_per_pass"),
            prune_max_kept_tokens=rredcot.get("prune_max_kept_tokens"),
        )
        phases["credit"] = credit["peak"] + credit["pruning_bound"]
    fixed = sum(phases[k] for k in FIXED_PHASES)
    phases["peak"] = fixed + max(phases["training"], phases["gathered"] + phases["credit"])
    return phases


def _segments(segmentation: Mapping[str, Any] | None) -> int:
    """K a run's credit scores states for: its segmentation's, the `SegmentationConfig` default
    where the block leaves it out or has none (a strategy's own count, unknown before the
    responses exist)."""
    return int((segmentation or {}).get("num_segments") or SegmentationConfig.num_segments)


FIXED_PHASES = ("weights", "gradients", "optimizer", "vllm")
"""Phases held through the whole step; training and the method's pass come on top, in turn."""


def launcher_of(config: Mapping[str, Any], method: str) -> str | None:
    """The accelerate config a method's runs launch under: its `per_method` override (e.g.
    RRPO/SRPO on zero2), else `training.accelerate` (the workflow's `training_launcher`)."""
    training = config["training"]
    own = training.get("per_method", {}).get(method, {})
    return own.get("accelerate", training.get("accelerate"))


def rule_phases(config: Mapping[str, Any], method: str, gpu_bytes: int) -> dict[str, int] | None:
    """`run_phases` of `method`'s run in `config` (its `per_method` overrides on `training`,
    their `rredcot` block on `estimator.rredcot`); None when the model's shape is unknown."""
    shape = shape_of(config)
    if shape is None:
        return None
    training = config["training"]
    own = training.get("per_method", {}).get(method, {})
    values = {**training, **own, "method": method}
    values["rredcot"] = {**config.get("estimator", {}).get("rredcot", {}), **own.get("rredcot", {})}
    values["segmentation"] = config.get("segmentation", {})
    return run_phases(
        shape,
        values,
        gpu_bytes,
        accelerate=launcher_of(config, method),
        num_processes=int(training.get("num_processes", 1)),
    )


PHASE_NAMES = {
    "training": "one training micro-batch",
    "credit": "the RREDCoT credit",
    "gathered": "the method's pass",
}


def config_errors(
    config: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    local_model: str | Path | None = None,
) -> list[str]:
    """The load-time check: each GPU run's `train_policy` job (`runs`: run name -> its settings,
    as `run_phases` takes them) fits one GPU of `devices.memory_gb` by the planner; one line per
    run that does not, naming the phase, the estimate, the budget and the key to change. CPU
    runs (training.device cpu) and models of unknown shape are not checked."""
    on_gpus = {n: v for n, v in runs.items() if v.get("device", "cpu") != "cpu"}
    shape = shape_of(config, local_model) if on_gpus else None
    if shape is None:
        return []
    memory_gb = config["devices"]["memory_gb"]
    gpu = int(memory_gb * 1e9)
    errors = []
    for name, values in on_gpus.items():
        phases = run_phases(
            shape,
            values,
            gpu,
            accelerate=launcher_of(config, values["method"]),
            num_processes=int(config["training"]["num_processes"]),
        )
        hint = advice(phases, gpu)
        if hint is None:
            continue
        key, _, how = hint.removesuffix(")").partition(" (")
        method_pass = phases["gathered"] + phases["credit"]
        phase = "training"
        if method_pass >= phases["training"]:
            phase = "credit" if phases["credit"] else "gathered"
        size = phases["training"] if phase == "training" else method_pass
        gathered = ""
        if phase != "training" and phases["gathered"]:
            gathered = f" with {phases['gathered'] / 1e9:.1f} GB of ZeRO-3 weights gathered"
        fixed = phases["peak"] - size
        errors.append(
            f"run {name}: config key '{key}': the train_policy job's peak on one GPU is "
            f"estimated at {phases['peak'] / 1e9:.1f} GB ({PHASE_NAMES[phase]} "
            f"{size / 1e9:.1f} GB{gathered} on top of {fixed / 1e9:.1f} GB of weights, "
            f"gradients, optimizer state and vLLM share), more than the {memory_gb:g} GB of one "
            f"GPU (config key 'devices.memory_gb'); change {key} ({how}; "
            "scripts/memory_plan.py prints every phase)"
        )
    return errors
