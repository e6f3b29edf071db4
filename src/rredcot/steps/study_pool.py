"""Rule `study_pool`: the estimator studies' problems, a fresh draw of the world generator that
is disjoint from every world table (train included) and leaves them untouched."""

from __future__ import annotations

from pathlib import Path

from rredcot.data.schema import read_table, write_parquet
from rredcot.data.synthetic import SplitSpec, make_study_pool, world_config
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--world", required=True, nargs="+", type=Path, help="world tables to avoid")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    world, pool = require(args.params, "world", "pool")
    taken = frozenset(
        problem for path in args.world for problem in read_table(path)["problem"].to_list()
    )
    df = make_study_pool(SplitSpec(**pool), world["seed"], world_config(world), taken)
    write_parquet(df, args.out)
    depths = df.group_by("depth").len().sort("depth").rows()
    log.info(
        "study pool: %d problems, (depth, count) %s, disjoint from %d world problems -> %s",
        df.height,
        depths,
        len(taken),
        args.out,
    )


if __name__ == "__main__":
    main()
