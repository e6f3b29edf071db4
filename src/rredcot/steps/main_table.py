"""Rule `main_table`: `results/main_table.csv`, methods × benchmarks (pass@1 mean ± std, CI)."""

from __future__ import annotations

from pathlib import Path

from rredcot.data.schema import read_json, read_table
from rredcot.planning.machine import machines_by_run_name, machines_of, with_machine_column
from rredcot.reporting.training import main_table
from rredcot.steps.cli import log, parser, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--tables", required=True, nargs="+", type=Path)
    p.add_argument(
        "--summaries", required=True, nargs="+", type=Path, help="train_summary.json per run"
    )
    p.add_argument("--base", required=True, type=Path, help="the base model (sft_metrics.json)")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    tables = {}
    for path in args.tables:
        table = read_table(path)
        tables[str(table["benchmark"][0])] = table
    machines = machines_by_run_name(args.summaries)
    sft = args.base / "sft_metrics.json"
    machines["base"] = machines_of([read_json(sft) if sft.is_file() else {}])
    wide = with_machine_column(main_table(tables), machines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    wide.write_csv(args.out)
    log.info("wrote %s:\n%s", args.out, wide.select("method", *tables))


if __name__ == "__main__":
    main()
