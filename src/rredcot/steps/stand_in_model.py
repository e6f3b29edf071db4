"""Rule `stand_in_model`: the CPU rehearsal's stand-in for a paper config's Hub model, a random
tiny Qwen3 (`model.arch`) with the byte tokenizer and a ChatML chat template, saved as a Hub
checkpoint is; `fetch_base_model` then takes it as a local checkpoint directory.

    python -m rredcot.steps.stand_in_model --out results/stand_in/model \
        --params '{"seed": 0, "arch": {"hidden_size": 64, "head_dim": 32, ...}}'
"""

from __future__ import annotations

from pathlib import Path

from rredcot.models.tiny import build_tiny_model, count_parameters
from rredcot.models.tokenizer import build_chat_tokenizer
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    seed, arch = require(args.params, "seed", "arch")
    tokenizer = build_chat_tokenizer()
    model = build_tiny_model(arch, tokenizer, seed=seed)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    log.info("stand-in Qwen3 (%d parameters) in %s", count_parameters(model), args.out)


if __name__ == "__main__":
    main()
