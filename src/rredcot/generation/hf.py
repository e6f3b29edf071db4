"""The Hugging Face backend: batched `model.generate` with left padding, for the CPU and tests.

Sampling is done inside one logits processor with the Gumbel-max trick: each (prompt, sample)
row owns a `torch.Generator` seeded from (seed, prompt_index, sample_index), and the token
argmax_v [log pi(v)/T + g_v] (g_v ~ Gumbel(0, 1), after top-p truncation) is an exact sample of
the tempered, truncated distribution. `generate` itself then runs in greedy mode, so no draw
comes from the global RNG and no row's draws depend on the other rows.

Guarantee (tested): a completion depends only on the model, its prompt, its
(prompt_index, sample_index) and `params`; the same call gives identical completions every
time, and neither `batch_size` nor the other prompts in the call change it, as long as a
row's logits do not depend on how its batch is padded (true bit-for-bit for float32 on the
CPU in our tests; GPU kernels may change the last bits and, rarely, a sampled token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tqdm import tqdm
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
    TopPLogitsWarper,
)

from rredcot.generation.base import Completion, SamplingParams, derive_seed


class HFBackend:
    """`GenerationBackend` on `model.generate`; see the module docstring for the seed guarantee.

    `batch_size` counts sequences (prompt x sample rows) per `generate` call. Rows are sorted by
    prompt length before batching, which cuts padding and, by the guarantee, changes no result.
    Prompts are tokenized with the tokenizer's defaults (as vLLM does); only the EOS ids of the
    checkpoint's generation_config.json are used, never its sampling settings. A tokenizer
    without a pad token gets its EOS token as pad (padding is masked and never returned).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        batch_size: int,
        show_progress: bool = True,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
        eos_ids = _eos_token_ids(model, tokenizer)
        if not eos_ids:
            raise ValueError("tokenizer: has no eos token and the model's generation config none")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(min(eos_ids))
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.eos_ids = eos_ids
        self.pad_id: int = tokenizer.pad_token_id

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        batch_size: int = 8,
        show_progress: bool = True,
        device: str | None = None,
        dtype: str | torch.dtype = "auto",
        revision: str | None = None,
    ) -> HFBackend:
        """Load model and tokenizer by hub id or local path (device: CUDA if present, else CPU)."""
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, revision=revision)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, revision=revision, dtype=dtype)
        return cls(model.to(device), tokenizer, batch_size=batch_size, show_progress=show_progress)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """`params.n` completions per prompt, ordered by (prompt_index, sample_index)."""
        if isinstance(prompts, str):
            raise ValueError("prompts: expected a sequence of strings, got a single string")
        bad = [i for i, p in enumerate(prompts) if not isinstance(p, str)]
        if bad:
            raise ValueError(f"prompts: entries {bad[:10]} are not strings")
        if not prompts:
            return []
        prompt_ids: list[list[int]] = self.tokenizer(list(prompts))["input_ids"]
        empty = [i for i, ids in enumerate(prompt_ids) if not ids]
        if empty:
            raise ValueError(f"prompts: entries {empty[:10]} are empty after tokenization")

        rows = [(p, s) for p in range(len(prompts)) for s in range(params.n)]
        rows.sort(key=lambda row: -len(prompt_ids[row[0]]))  # stable: ties keep their order
        chunks = [rows[i : i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        config = self._generation_config(params)
        done: list[Completion] = []
        for chunk in tqdm(chunks, desc="generate", unit="batch", disable=not self.show_progress):
            done.extend(self._generate_chunk(chunk, prompt_ids, params, config))
        done.sort(key=lambda c: (c.prompt_index, c.sample_index))
        return done

    def _generation_config(self, params: SamplingParams) -> GenerationConfig:
        # Greedy on purpose (sampling happens in `_GumbelSampler`); neutral values for every
        # setting a checkpoint's generation_config.json could otherwise slip in.
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=False,
            num_beams=1,
            use_cache=True,
            temperature=1.0,
            top_p=1.0,
            top_k=50,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            min_new_tokens=0,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
        )

    def _generate_chunk(
        self,
        rows: list[tuple[int, int]],
        prompt_ids: list[list[int]],
        params: SamplingParams,
        config: GenerationConfig,
    ) -> list[Completion]:
        device = self.model.device
        width = max(len(prompt_ids[p]) for p, _ in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (p, _) in enumerate(rows):
            ids = prompt_ids[p]
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            attention_mask[i, width - len(ids) :] = 1

        processors = LogitsProcessorList()
        sampler = None
        if not params.greedy or params.logprobs:
            seeds = [derive_seed(params.seed, p, s) for p, s in rows]
            sampler = _GumbelSampler(seeds, params.temperature, params.top_p, params.logprobs)
            processors.append(sampler)
        criteria = StoppingCriteriaList()
        stopper = None
        if params.stop_strings:
            stopper = _StopStringCriteria(self.tokenizer, params.stop_strings, width, self.eos_ids)
            criteria.append(stopper)

        with torch.inference_mode():
            sequences = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                logits_processor=processors,
                stopping_criteria=criteria,
            )
        new_tokens = sequences[:, width:].tolist()
        step_logprobs = None
        if params.logprobs:
            assert sampler is not None
            step_logprobs = torch.stack(sampler.logprobs, dim=1).tolist()  # (B, steps)

        out = []
        for i, (p, s) in enumerate(rows):
            stop_at = stopper.stop_at[i] if stopper is not None else None
            ids, text, reason = self._finish(new_tokens[i], stop_at, params.stop_strings)
            lps = step_logprobs[i][: len(ids)] if step_logprobs is not None else None
            out.append(Completion(p, s, text, ids, reason, len(ids), lps))
        return out

    def _finish(
        self, tokens: list[int], stop_at: int | None, stop_strings: tuple[str, ...]
    ) -> tuple[list[int], str, str]:
        """Kept tokens, text and finish reason of one row (padding and EOS dropped)."""
        if stop_at is not None:
            tokens = tokens[:stop_at]
        eos_at = next((j for j, t in enumerate(tokens) if t in self.eos_ids), None)
        if eos_at is not None:
            tokens = tokens[:eos_at]
        text = self._decode(tokens)
        if _first_stop_end(text, stop_strings) is not None:
            # The shortest token prefix whose text holds a stop string (contains() is monotone).
            lo, hi = 1, len(tokens)
            while lo < hi:
                mid = (lo + hi) // 2
                if _first_stop_end(self._decode(tokens[:mid]), stop_strings) is None:
                    lo = mid + 1
                else:
                    hi = mid
            tokens = tokens[:lo]
            text = self._decode(tokens)
            return tokens, text[: _first_stop_end(text, stop_strings)], "stop"
        reason = "stop" if eos_at is not None or stop_at is not None else "length"
        return tokens, text, reason

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)


class _GumbelSampler(LogitsProcessor):
    """Per-row seeded sampling by Gumbel-max; records raw log pi of the chosen tokens.

    Each row draws one uniform vector per step from its own generator, so its stream depends
    on nothing but its seed and step. With temperature 0 it only records log-probs.
    """

    def __init__(
        self, seeds: list[int], temperature: float, top_p: float, record_logprobs: bool
    ) -> None:
        self.seeds = seeds
        self.temperature = temperature
        self.top_p = TopPLogitsWarper(top_p) if top_p < 1 else None
        self.record_logprobs = record_logprobs
        self.generators: list[torch.Generator] | None = None
        self.logprobs: list[torch.Tensor] = []  # one (B,) tensor per step

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        raw_logprobs = scores.log_softmax(dim=-1) if self.record_logprobs else None  # (B, V)
        if self.temperature > 0:
            if self.generators is None:
                self.generators = [
                    torch.Generator(device=scores.device).manual_seed(seed) for seed in self.seeds
                ]
            scores = scores / self.temperature
            if self.top_p is not None:
                scores = self.top_p(input_ids, scores)
            vocab = scores.shape[-1]
            uniform = torch.stack(
                [torch.rand(vocab, generator=g, device=scores.device) for g in self.generators]
            )
            gumbel = uniform.log_().neg_().log_().neg_()  # -log(-log u); u = 0 gives -inf
            scores = scores + gumbel
        if raw_logprobs is not None:
            chosen = scores.argmax(dim=-1, keepdim=True)  # the token `generate` will pick
            self.logprobs.append(raw_logprobs.gather(1, chosen).squeeze(1))
        return scores


class _StopStringCriteria(StoppingCriteria):
    """Marks a row done once the decoded tail of its generated tokens holds a stop string.

    It only ends rows early; `HFBackend._finish` cuts the final text from the full decoding.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        stop_strings: tuple[str, ...],
        prompt_width: int,
        eos_ids: frozenset[int],
    ) -> None:
        self.tokenizer = tokenizer
        self.stop_strings = stop_strings
        self.prompt_width = prompt_width
        self.eos_ids = eos_ids
        # Every token decodes to >= 1 byte, so this many tokens cover any stop string.
        self.window = 2 * max(len(s.encode()) for s in stop_strings) + 8
        self.stop_at: list[int | None] = []
        self.ended: list[bool] = []

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        batch, length = input_ids.shape
        if not self.stop_at:
            self.stop_at = [None] * batch
            self.ended = [False] * batch
        last = input_ids[:, -1].tolist()
        for r, token in enumerate(last):
            self.ended[r] = self.ended[r] or token in self.eos_ids
        live = [r for r in range(batch) if self.stop_at[r] is None and not self.ended[r]]
        if live:
            start = max(self.prompt_width, length - self.window)
            tails = self.tokenizer.batch_decode(
                input_ids[live, start:].tolist(), skip_special_tokens=True
            )
            for r, tail in zip(live, tails, strict=True):
                if any(s in tail for s in self.stop_strings):
                    self.stop_at[r] = length - self.prompt_width
        hit = [stop is not None for stop in self.stop_at]
        return torch.tensor(hit, dtype=torch.bool, device=input_ids.device)


def _first_stop_end(text: str, stop_strings: tuple[str, ...]) -> int | None:
    """End offset of the stop-string occurrence that ends first in `text`, or None."""
    ends = [text.find(s) + len(s) for s in stop_strings if s in text]
    return min(ends) if ends else None


def _eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """EOS ids from the tokenizer and the model's generation config (chat models have several)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured is not None:
        ids.update(int(i) for i in configured)
    return frozenset(ids)
