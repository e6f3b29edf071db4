"""The dose-response's tables for the docs, every number inside a snapshot marker: one snapshot
per dose (`scripts/snapshot_summary.py --results results/credit_regimes/<label> --slug NAME`),
given here in the order of the doses, as LEVEL=NAME.

    python scripts/dose_table.py 0=NAME 0.6=NAME 0.8=NAME

Prints two markdown tables: the base per dose (greedy and T = 1 pass@1, luck, the systematic
share of its errors) and each method's gain over GRPO per dose, the pre-registered primary
endpoint first (the area under the held-out curve; a run shorter than GRPO's, MC, over its own
steps), then the final step. tests/unit/test_docs_numbers.py holds the pasted numbers to the
snapshots, so a table pasted from here cannot drift from the runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rredcot.reporting.credit_regimes import AREA, FINAL
from rredcot.reporting.snapshot import VALUES

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "docs" / "snapshots"
ROW = ("difference", "bootstrap_ci", "seed_t_ci", "verdict", "seeds", "mde80")
BASE = ("greedy_pass1", "t1_pass1", "t1_luck", "greedy_systematic_share", "t1_systematic_share")


def marker(slug: str, values: dict[str, str], key: str) -> str:
    """The snapshot's value under `key`, inside the marker the docs test reads."""
    if key not in values:
        raise KeyError(f"snapshot {slug} has no value {key!r}")
    return f"<!-- snapshot:{slug}/{key} -->{values[key]}<!-- /snapshot -->"


def methods(values: dict[str, str]) -> list[str]:
    """The methods compared with GRPO in a snapshot, in the order its values list them."""
    seen: list[str] = []
    for key in values:
        parts = key.split("/")
        if parts[0] == "comparison" and parts[1] not in seen:
            seen.append(parts[1])
    return seen


def measure(values: dict[str, str], method: str, names: tuple[str, ...]) -> str | None:
    """The first of `names` the snapshot holds for `method` (MC's shorter run: the equal-steps
    measure), or None."""
    return next((n for n in names if f"comparison/{method}/{n}/difference" in values), None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("doses", nargs="+", help="LEVEL=SNAPSHOT, in the order of the doses")
    p.add_argument("--snapshots", type=Path, default=SNAPSHOTS)
    args = p.parse_args()
    doses = []
    for item in args.doses:
        level, sep, slug = item.partition("=")
        if not sep:
            raise SystemExit(f"{item!r}: expected LEVEL=SNAPSHOT")
        path = args.snapshots / slug / VALUES
        doses.append((level, slug, json.loads(path.read_text())))

    header = ("base greedy pass@1", "base T = 1 pass@1", "luck", "systematic: greedy", "T = 1")
    print("| rate | " + " | ".join(header) + " |")
    print("|---|---|---|---|---|---|")
    for level, slug, values in doses:
        cells = [marker(slug, values, f"regime/base/{k}") for k in BASE]
        print(f"| {level} | " + " | ".join(cells) + " |")
    print()
    print("| rate | comparison | endpoint | difference | bootstrap 95% CI | t 95% CI over seeds "
          "| verdict | seeds | MDE 80% |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for names, label in ((AREA, "**area (primary)**"), (FINAL, "final")):
        for level, slug, values in doses:
            for method in methods(values):
                name = measure(values, method, names)
                if name is None:
                    continue
                key = f"comparison/{method}/{name}"
                cells = [marker(slug, values, f"{key}/{k}") for k in ROW]
                shown = label if name in ("auc", "final") else f"{name} (its own steps)"
                print(f"| {level} | {method} − grpo | {shown} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
