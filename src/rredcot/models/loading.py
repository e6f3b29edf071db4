"""Load a policy and its tokenizer by Hub id or local path through one code path.

The embedded default's SFT checkpoint (a local directory) and a paper-scale Hub model
(e.g. `Qwen/Qwen3-4B`) are both opened with `Auto*.from_pretrained`, so nothing downstream
knows which one it got.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rredcot.models.chat import single_bos
from rredcot.models.paths import looks_like_path

DTYPES: dict[str, torch.dtype | str] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "auto": "auto",
}


def _unavailable(name_or_path: str, err: Exception) -> OSError:
    """The error for a model that is neither on disk nor reachable on the Hub."""
    if looks_like_path(name_or_path):
        return OSError(
            f"model {name_or_path!r}: local path does not exist or is incomplete ({err})"
        )
    return OSError(
        f"model {name_or_path!r}: not in the local Hugging Face cache and the Hub cannot be "
        "reached (offline?). Download it where the Hub is reachable (`hf download "
        f"{name_or_path}`) or set the config's model id to a local directory holding the "
        f"checkpoint. Cause: {err}"
    )


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a model, padded on the left for generation; pad falls back to eos."""
    name = str(name_or_path)
    if looks_like_path(name) and not Path(name).expanduser().exists():
        raise _unavailable(name, FileNotFoundError(name))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(Path(name).expanduser()))
    except OSError as err:
        raise _unavailable(name, err) from err
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer {name!r}: has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # decoder-only generation: prompts end where the output starts
    single_bos(tokenizer)  # a template that writes the BOS itself gets no second one
    return tokenizer


def load_model(
    name_or_path: str | Path, dtype: str = "float32", device: str = "cpu"
) -> PreTrainedModel:
    """A causal LM in eval mode on `device`; `dtype` is one of `DTYPES`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    name = str(name_or_path)
    if looks_like_path(name) and not Path(name).expanduser().exists():
        raise _unavailable(name, FileNotFoundError(name))
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(Path(name).expanduser()), dtype=DTYPES[dtype]
        )
    except OSError as err:
        raise _unavailable(name, err) from err
    return model.to(device).eval()
