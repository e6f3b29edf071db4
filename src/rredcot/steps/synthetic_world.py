"""Rule `synthetic_world`: write the train split and every benchmark split of the world."""

from __future__ import annotations

from pathlib import Path

from rredcot.data.schema import write_parquet
from rredcot.data.synthetic import SplitSpec, make_world, world_config
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args()
    setup()
    seed, train, splits = require(args.params, "seed", "train", "splits")
    config = world_config(args.params)
    world = make_world(
        train=SplitSpec(**train),
        benchmarks={name: SplitSpec(**spec) for name, spec in splits.items()},
        seed=seed,
        config=config,
    )
    for name, df in world.items():
        path = write_parquet(df, args.out_dir / f"{name}.parquet")
        depths = df.group_by("depth").len().sort("depth").rows()
        log.info("split %s: %d problems, (depth, count) %s -> %s", name, df.height, depths, path)


if __name__ == "__main__":
    main()
