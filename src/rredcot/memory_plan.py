"""Memory planner (issue #29): the estimated peak of each phase of a GPU training rule.

Everything is a formula of the model's shape and the config's batching, read off the code that
allocates it:

- **weights, gradients, optimizer** (per GPU): N parameters in the model dtype, gradients in it
  too, AdamW's fp32 master copy and two moments (12 bytes a parameter); ZeRO-2 splits gradients
  and optimizer over the processes, ZeRO-3 the weights too; LoRA trains (and stores optimizer
  state for) the adapters only;
- **vLLM** (colocated): the share of GPU memory it reserves
  (`training.vllm_gpu_memory_utilization`);
- **training micro-batch** (per_device rows padded to P + T, checkpointed): each layer's input
  kept (rows·L·H), one layer recomputed (its activations), the dense (rows, 1, L, L) mask SDPA
  takes (boolean, and its copy in the model dtype), and TRL's completion logits (rows·T·V in the
  model dtype, and one row's float32 log-softmax at a time);
- **credit** (rredcot): the resident chunk's trace cache (rows × (P_max + T_max) slots of keys
  and values of every layer, `rredcot.scoring.chunks`), its last hidden states, and the largest
  pass on top: an encoding step (`ENCODE_CHUNK` tokens a row: its mask, boolean and in the model
  dtype, and its layer activations, plus one layer's cache copy as the cache grows) or a
  continuation row of the shared layout (its mask and activations), whichever is larger; the
  keys kept between pruning rounds are reported apart, as their bound
  (`prune_max_kept_tokens` slots).

`credit_phases` is checked against the CPU peak of scaled shapes by scripts/check_memory_plan.py
(docs/memory.md); `rule_phases` adds them up for one GPU of a training rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

ENCODE_CHUNK = 256  # rredcot.scoring.encoding.ENCODE_CHUNK (kept equal by a test)
CHUNK_ELEMENTS = 1 << 25  # rredcot.scoring.logprobs._MAX_CHUNK_ELEMENTS
SHARED_ROW_TOKENS, SHARED_ROW_MAX = 256, 4096  # rredcot.scoring.layout


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


KNOWN_SHAPES: dict[str, ModelShape] = {
    "Qwen/Qwen3-4B-Instruct-2507": ModelShape(36, 2560, 9728, 32, 8, 128, 151_936, True),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": ModelShape(
        28, 1536, 8960, 12, 2, 128, 151_936, False
    ),
}
"""The paper models' shapes (their config.json)."""


def shape_of(config: Mapping[str, Any]) -> ModelShape | None:
    """The shape of `model` in a config: a known Hub model (`model.name_or_path`), or the tiny
    model of `model.arch` (byte vocabulary) when name_or_path is null; None otherwise."""
    model = config.get("model", {})
    size = 4 if model.get("dtype", "float32") == "float32" else 2
    name = model.get("name_or_path")
    if name is not None:
        known = KNOWN_SHAPES.get(str(name))
        return None if known is None else replace(known, bytes_per_value=size)
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
    """None when the peak fits `gpu_bytes`; else which config key to change."""
    if phases["peak"] <= gpu_bytes:
        return None
    if phases["credit"] >= phases["training"]:
        return (
            "estimator.rredcot.max_resident_tokens (fewer trace-cache slots resident; or "
            "prune_max_kept_tokens / max_tokens_per_pass)"
        )
    return "training.per_device_batch_size (fewer rows a micro-batch; or max_completion_length)"


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
    from rredcot.scoring.chunks import plan_resident_chunks

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
    shape: ModelShape, rows: int, length: int, completion: int, *, checkpointing: bool = True
) -> dict[str, int]:
    """Bytes of one training micro-batch's activations (module docstring): kept layer inputs,
    one recomputed layer (all of them without checkpointing), the dense mask, the logits."""
    tokens = rows * length
    kept = shape.layers * tokens * shape.hidden * shape.bytes_per_value
    layers = 1 if checkpointing else shape.layers
    recompute = layers * shape.layer_activation_bytes(tokens)
    mask = _mask_bytes(rows, length, length, shape)
    # TRL: the rows' completion logits at once, their float32 log-softmax one row at a time
    logits = (rows * shape.bytes_per_value + 4) * completion * shape.vocab
    return {"layer_inputs": kept, "layer": recompute, "mask": mask, "logits": logits}


def rule_phases(config: Mapping[str, Any], method: str, gpu_bytes: int) -> dict[str, int] | None:
    """Estimated bytes per phase on one GPU of the `train_policy` rule of `method` (None when
    the model's shape is unknown): weights, gradients, optimizer, vLLM, training, credit (the
    credit and training run one after the other: the peak takes the larger), and peak."""
    shape = shape_of(config)
    if shape is None:
        return None
    training = {**config["training"], **config["training"].get("per_method", {}).get(method, {})}
    procs = int(training.get("num_processes", 1))
    zero = training.get("accelerate")
    n = shape.parameters
    trained = n
    if training.get("lora"):
        r = int(training["lora"]["r"])
        per_layer = r * (
            shape.hidden * 4
            + shape.heads * shape.head_dim * 2
            + shape.kv_heads * shape.head_dim * 2
            + 3 * (shape.hidden + shape.intermediate)
        )
        trained = shape.layers * per_layer
    size = shape.bytes_per_value
    phases = {
        "weights": n * size // (procs if zero == "zero3" else 1),
        "gradients": trained * size // (procs if zero in ("zero2", "zero3") else 1),
        "optimizer": trained * 12 // (procs if zero in ("zero2", "zero3") else 1),
        "vllm": int(gpu_bytes * training.get("vllm_gpu_memory_utilization", 0))
        if training.get("use_vllm") and training.get("vllm_mode", "colocate") == "colocate"
        else 0,
    }
    if zero == "zero3":  # the layer being computed is gathered whole
        phases["weights"] += n * size // shape.layers
    per_device = int(training.get("per_device_batch_size") or 1)
    completion = int(training["max_completion_length"])
    prompt = 512  # prompt tokens assumed (the benchmarks' problems are far shorter)
    train = training_phases(
        shape,
        per_device,
        prompt + completion,
        completion,
        checkpointing=bool(training.get("gradient_checkpointing")),
    )
    phases["training"] = sum(train.values())
    phases["credit"] = 0
    if method.startswith("rredcot"):
        rredcot = config.get("estimator", {}).get("rredcot", {})
        accumulation = int(training.get("gradient_accumulation_steps", 1))
        traces = per_device * accumulation  # the local traces of one step
        credit = credit_phases(
            shape,
            [prompt] * traces,
            [completion] * traces,
            states=int(config.get("segmentation", {}).get("num_segments") or 8) + 1,
            max_resident_tokens=rredcot.get("max_resident_tokens"),
            max_tokens_per_pass=rredcot.get("max_tokens_per_pass"),
            prune_max_kept_tokens=rredcot.get("prune_max_kept_tokens"),
        )
        phases["credit"] = credit["peak"] + credit["pruning_bound"]
    fixed = sum(phases[k] for k in ("weights", "gradients", "optimizer", "vllm"))
    phases["peak"] = fixed + max(phases["training"], phases["credit"])
    return phases
