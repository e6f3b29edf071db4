"""Rules `prepare_benchmark` and `prepare_training_set`: a registry dataset from the mirror (or
the Hub), normalized; a training set optionally cut to a seeded random subset.

    python -m rredcot.steps.prepare_benchmark --dataset aime24 --out aime24.parquet \
        --params '{"mirror": "../shared/data/benchmarks", "max_malformed_fraction": 0.0}'
    python -m rredcot.steps.prepare_benchmark --dataset numina_cot --out numina_cot.parquet \
        --params '{"mirror": null, "max_problems": 4096, "seed": 0}'
"""

from __future__ import annotations

from pathlib import Path

from rredcot.data.normalize import load_normalized
from rredcot.data.registry import mirror_dir
from rredcot.data.schema import write_parquet
from rredcot.steps.cli import log, parser, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--dataset", "--benchmark", dest="dataset", required=True)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    # mirror_dir: a directory read instead of the mirror (the rehearsal's stand-in training set)
    own = args.params.get("mirror_dir")
    mirror = Path(own).absolute() if own else mirror_dir(args.params.get("mirror"))
    log.info("dataset %s; mirror %s", args.dataset, mirror)
    data = load_normalized(
        args.dataset,
        mirror,
        max_malformed_fraction=args.params.get("max_malformed_fraction", 0.0),
    )
    log.info("origin %s: %d raw rows, %d kept", data.origin, data.n_raw, data.df.height)
    log.info("malformed rows: %d", len(data.malformed))
    for row_id, reason in data.malformed:
        log.warning("malformed row %s: %s", row_id, reason)
    df = data.df
    n = args.params.get("max_problems")
    if n is not None and n < df.height:
        # A seeded random subset, kept in dataset order: the same N problems on every machine.
        seed = int(args.params.get("seed", 0))
        df = df.with_row_index("_order").sample(n, seed=seed).sort("_order").drop("_order")
        log.info("kept a random subset of %d of %d problems (seed %d)", n, data.df.height, seed)
    write_parquet(df, args.out)


if __name__ == "__main__":
    main()
