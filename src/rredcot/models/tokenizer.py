"""A byte-level tokenizer built locally (no Hub): 256 byte tokens plus a few specials.

Every UTF-8 string maps to its bytes and back, so any benchmark text round-trips, and the
tiny model needs no trained vocabulary. It is a plain `PreTrainedTokenizerFast`, so it is
saved with `save_pretrained` and loaded with `AutoTokenizer.from_pretrained` like a real one.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SPECIALS: tuple[str, ...] = (PAD, BOS, EOS)
# Qwen's ChatML turns (without its tool and thinking branches); the byte tokenizer renders the
# markers as bytes. Carried by the CPU rehearsal's stand-in model, so the math prompt path is a
# chat model's.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with no merges: one token per UTF-8 byte; ids 0..255 are bytes."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for j, special in enumerate(SPECIALS):
        vocab[special] = len(alphabet) + j
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        clean_up_tokenization_spaces=False,
        padding_side="left",  # decoder-only generation pads on the left
    )
    return tok


def build_chat_tokenizer() -> PreTrainedTokenizerFast:
    """The byte tokenizer with the ChatML chat template (`CHATML`)."""
    tok = build_byte_tokenizer()
    tok.chat_template = CHATML
    return tok
