"""Rule `stand_in_training_set`: the CPU rehearsal's training set (rredcot.data.stand_in) as a
mirror file `<dir>/<dataset>.jsonl`, from a mirrored benchmark.

    python -m rredcot.steps.stand_in_training_set --source ../shared/data/benchmarks/gsm8k.jsonl \
        --params '{"rows": 256}' --out results/stand_in/mirror/numina_cot.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

from rredcot.data.registry import read_mirror_file
from rredcot.data.stand_in import stand_in_rows
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--source", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    (n,) = require(args.params, "rows")
    source = [r.record for r in read_mirror_file(args.source) if r.record is not None]
    rows = stand_in_rows(source, n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    log.info("%d stand-in rows from %s in %s", len(rows), args.source, args.out)


if __name__ == "__main__":
    main()
