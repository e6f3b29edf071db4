"""Rule `check_lora_targets`: every run's LoRA `target_modules` against the base model's modules,
before any training job loads it; a name peft would not find stops here, naming its config key.

    python -m rredcot.steps.check_lora_targets --model results/models/base \
        --params '{"training.lora.target_modules": ["q_proj", "v_proj"]}' --out checked.json
"""

from __future__ import annotations

import json
from pathlib import Path

from rredcot.steps.cli import log, parser, setup
from rredcot.training.lora import check_lora_targets


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    errors = check_lora_targets(args.model, args.params)
    if errors:
        raise SystemExit("invalid LoRA targets:\n  - " + "\n  - ".join(errors))
    args.out.write_text(json.dumps(args.params, indent=2, sort_keys=True) + "\n")
    log.info("LoRA targets found in %s: %s", args.model, args.params)


if __name__ == "__main__":
    main()
