"""Where a base's luck comes from: the right answer from a chain the checker rejects, sorted by
the checker's first error (`error_kind`) and whether it is the misconception's (`systematic`).

    python dev/probe_luck.py --model DIR --config CONFIG --seed 99 --samples 8 --out luck.csv

`--model` is a base written by dev/probe_misconception.py; the world is drawn from
`--config`'s world block with the development `--seed` (as the probe drew it), and the
misconception from `--rule`/`--rate`. One CSV row per (error_kind, first error kind): the count
of lucky samples and their share of all samples, at T = 1 (the world's protocol).
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from probe_misconception import development_world  # noqa: E402  (dev/ is on the path)

from rredcot.data.error_kinds import first_error_kind  # noqa: E402
from rredcot.data.misconceptions import Misconception  # noqa: E402
from rredcot.data.synthetic import check_response  # noqa: E402
from rredcot.generation import SamplingParams, backend_from_settings  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--seed", type=int, default=99, help="the probe's development seed")
    p.add_argument("--rule", default="smaller_from_larger")
    p.add_argument("--rate", type=float, default=0.8)
    p.add_argument("--samples", type=int, default=8, help="samples per problem at T = 1")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    w = yaml.safe_load(args.config.read_text())["world"]
    tables = development_world(w, args.seed)
    rows = list(tables["synth_id"].iter_rows(named=True))
    task = get_task("synthetic")
    backend = backend_from_settings({"backend": "hf", "dtype": "float32"}, str(args.model))
    sampling = SamplingParams(
        n=args.samples, temperature=1.0, top_p=1.0, max_new_tokens=128, seed=1,
        stop_strings=tuple(task.stop_strings),
    )  # fmt: skip
    done = backend.generate([task.build_prompt(r["problem"]) for r in rows], sampling)
    misconception = Misconception(args.rule, args.rate)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for c in done:
        row = rows[c.prompt_index]
        check = check_response(row["program"], c.text)
        if task.grade(c.text, row["answer"]).reward == 1 and not check.correct:
            kind = first_error_kind(row["program"], c.text, misconception)
            counts[(str(check.error_kind), kind)] += 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["error_kind", "first_error", "lucky_samples", "share_of_samples"])
        for (kind, first), n in counts.most_common():
            writer.writerow([kind, first, n, n / len(done)])
        writer.writerow(["all", "all", sum(counts.values()), sum(counts.values()) / len(done)])
    print(f"wrote {args.out}: {sum(counts.values())} lucky of {len(done)} samples")


if __name__ == "__main__":
    main()
