"""What a real chat template does to the prompt: thinking mode, BOS, the thinking block.

- Thinking mode is a config setting (`model.enable_thinking`), not the template's default:
  Qwen3's hybrid template writes an empty `<think>\\n\\n</think>\\n\\n` only when it is told
  `enable_thinking=false`, and nothing otherwise (the model then thinks first). Every prompt
  of a run is built by `apply_chat_template` in many places (training, evaluation, references,
  studies, checkpoints written later), so the value is pinned into the template text itself
  (`pin_thinking`), which `save_pretrained` carries into every checkpoint.
- A template that writes `bos_token` itself (DeepSeek-R1-Distill's) on a tokenizer that also
  adds one on encode (its LlamaTokenizerFast) doubles the BOS of every prompt; `single_bos`
  turns the tokenizer's own BOS off then.
- `thinking_open`: whether a text leaves a `<think>` block open; RREDCoT's answer trigger is
  placed after the block's close at such states (`rredcot.credit.reference_paths`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
THINK_CLOSE_TRIGGER = "\n" + THINK_CLOSE
"""Written before the task's answer trigger at a state inside an open thinking block."""
_PIN = "{%- set enable_thinking = "
_PROBE = [{"role": "user", "content": "1 + 1"}]

log = logging.getLogger(__name__)


def pin_thinking(template: str, enable: bool | None) -> str:
    """`template` with `enable_thinking` fixed to `enable` for every render (a top-level Jinja
    `set` wins over the caller's keyword); None leaves it as it is. A pin written before is
    replaced, not stacked."""
    if template.startswith(_PIN):
        template = template.split("\n", 1)[1]
    if enable is None:
        return template
    return f"{_PIN}{'true' if enable else 'false'} -%}}\n{template}"


def thinking_open(text: str) -> bool:
    """True when `text` opens a `<think>` block it does not close."""
    return text.rfind(THINK_OPEN) > text.rfind(THINK_CLOSE)


def single_bos(tokenizer: Any) -> bool:
    """Stop `tokenizer` adding a BOS on encode when its chat template already writes one;
    True when it changed. An error when the BOS cannot be turned off (every prompt would
    start with two)."""
    bos = tokenizer.bos_token
    if not getattr(tokenizer, "chat_template", None) or bos is None:
        return False
    text = tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True)
    bos_id = tokenizer.convert_tokens_to_ids(bos)
    if not text.startswith(bos) or tokenizer(text)["input_ids"][:2] != [bos_id, bos_id]:
        return False
    tokenizer.add_bos_token = False
    if tokenizer(text)["input_ids"][:2] == [bos_id, bos_id]:
        raise ValueError(
            f"tokenizer: its chat template writes {bos!r} and encoding adds another, which "
            "add_bos_token = False does not turn off; every prompt would start with two BOS"
        )
    return True


def check_thinking(tokenizer: Any, enable: bool | None, key: str = "model.enable_thinking") -> None:
    """Refuse `enable` false with a template that opens a thinking block anyway (the R1
    distills always do): the setting would not be what the prompts say."""
    if enable is not False or not getattr(tokenizer, "chat_template", None):
        return
    text = tokenizer.apply_chat_template(_PROBE, tokenize=False, add_generation_prompt=True)
    if thinking_open(text):
        raise ValueError(
            f"{key}: false, but this model's chat template opens a thinking block in every "
            f"prompt (it ends {text[-20:]!r}); set it to true"
        )


def prepare_tokenizer(directory: str | Path, enable_thinking: bool | None) -> None:
    """Pin thinking mode and a single BOS into the tokenizer saved in `directory` (the base
    model, which every job and checkpoint takes its tokenizer from; vLLM reads it there too)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    if not getattr(tokenizer, "chat_template", None):
        return
    tokenizer.chat_template = pin_thinking(tokenizer.chat_template, enable_thinking)
    check_thinking(tokenizer, enable_thinking)
    if single_bos(tokenizer):
        log.info("tokenizer in %s: the chat template writes the BOS; encoding adds none", directory)
    tokenizer.save_pretrained(str(directory))
