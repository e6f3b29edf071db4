"""Rule `fetch_base_model`: a pretrained policy (Hub id at a pinned revision, or a local
directory) into results/models/base, where every later rule opens it.

    python -m rredcot.steps.fetch_base_model --out results/models/base \
        --params '{"name_or_path": "Qwen/Qwen3-0.6B", "revision": "<40-hex sha>",
                   "enable_thinking": false}'

The tokenizer is then rewritten in place with thinking mode pinned and a single BOS
(`rredcot.models.chat.prepare_tokenizer`).
"""

from __future__ import annotations

from pathlib import Path

from rredcot.models.chat import prepare_tokenizer
from rredcot.models.fetch import fetch_base_model
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    name, revision = require(args.params, "name_or_path", "revision")
    record = fetch_base_model(name, revision, args.out)
    prepare_tokenizer(args.out, args.params.get("enable_thinking"))
    log.info("base model in %s: %s", args.out, record)


if __name__ == "__main__":
    main()
