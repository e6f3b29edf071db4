"""Rule `prepare_benchmark`: a registry benchmark from the mirror (or the Hub), normalized."""

from __future__ import annotations

from pathlib import Path

from rredcot.data.registry import load_normalized, mirror_dir
from rredcot.data.schema import write_parquet
from rredcot.steps.cli import log, parser, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    mirror = mirror_dir(args.params.get("mirror"))
    log.info("benchmark %s; mirror %s", args.benchmark, mirror)
    data = load_normalized(
        args.benchmark,
        mirror,
        max_malformed_fraction=args.params.get("max_malformed_fraction", 0.0),
    )
    log.info("origin %s: %d raw rows, %d kept", data.origin, data.n_raw, data.df.height)
    log.info("malformed rows: %d", len(data.malformed))
    for row_id, reason in data.malformed:
        log.warning("malformed row %s: %s", row_id, reason)
    write_parquet(data.df, args.out)


if __name__ == "__main__":
    main()
