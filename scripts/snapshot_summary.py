"""Copy a finished run's results/SUMMARY.md and the tables it read into docs/snapshots/<machine>/
(with values.json, every number under its key; job_times.csv and timing.json, which price later
runs of the same config at their start), so the docs can quote them and
tests/unit/test_docs_numbers.py can hold every quoted number to the run.

    python scripts/snapshot_summary.py [--results results] [--dest docs/snapshots] [--slug NAME]
    python scripts/snapshot_summary.py --dose --slug NAME [--results results]  # a dose's tables

Then quote a number in the docs inside a marker (keys: the snapshot's values.json):
    <!-- snapshot:NAME/comparison/rredcot/auc/difference -->+0.004<!-- /snapshot -->
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rredcot.reporting.snapshot import take_dose_snapshot, take_snapshot

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--results", type=Path, default=REPO / "results", help="a finished run's results/"
    )
    p.add_argument("--dest", type=Path, default=REPO / "docs" / "snapshots")
    p.add_argument("--slug", help="the snapshot's name (default: from the summary's machine)")
    p.add_argument(
        "--calibration",
        type=float,
        help="seconds of `python -m rredcot.planning.timing` on the run's machine (default: "
        "measured here, which must be that machine class; best while it is otherwise idle)",
    )
    p.add_argument(
        "--dose",
        action="store_true",
        help="a dose's tables across its levels (credit_contrasts.csv or credit_bases.csv, "
        "credit_regimes.csv), which no level's summary holds; needs --slug",
    )
    args = p.parse_args()
    if args.dose:
        if not args.slug:
            p.error("--dose needs --slug (the snapshot's name)")
        dest = take_dose_snapshot(args.results, args.dest, args.slug)
    else:
        dest = take_snapshot(args.results, args.dest, args.slug, args.calibration)
    print(f"wrote {dest}: {', '.join(sorted(p.name for p in dest.iterdir()))}")


if __name__ == "__main__":
    main()
