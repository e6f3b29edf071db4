"""Machine records and the between-machine spread of the method comparison."""

from __future__ import annotations

import polars as pl
import pytest

from rredcot.planning.machine import cpu_model, machine_info, machine_label, machines_of
from rredcot.reporting.machines import machine_spread

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
stepping\t: 1

processor\t: 1
model name\t: something else
"""


def test_cpu_model_names_family_model_and_stepping() -> None:
    assert cpu_model(CPUINFO) == "AMD EPYC (family 26, model 2, stepping 1)"
    assert cpu_model("model name\t: Plain CPU\n") == "Plain CPU"


def test_machine_info_has_what_a_result_can_depend_on(monkeypatch) -> None:
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(key, raising=False)  # a shell that sets them must not fail the test
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    info = machine_info()
    assert {"cpu_model", "torch_cpu_capability", "torch_threads", "torch", "gpu"} <= set(info)
    assert info["env"] == {"ATEN_CPU_CAPABILITY": "avx2"}
    label = machine_label(info)
    assert info["torch_cpu_capability"] in label and "ATEN_CPU_CAPABILITY=avx2" in label


def test_machines_of_lists_each_machine_once() -> None:
    one = {"cpu_model": "A", "torch": "2", "torch_cpu_capability": "AVX512", "torch_threads": 2}
    other = {**one, "cpu_model": "B"}
    runs = [{"machine": one}, {"machine": one}, {"machine": other}, {}]
    assert machines_of(runs).split(" | ") == [
        machine_label(one),
        machine_label(other),
        "not recorded",
    ]


def _comparison(diff: float, low: float, high: float, verdict: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "method": ["rredcot", "rredcot"],
            "against": ["grpo", "grpo"],
            "measure": ["final", "final"],
            "seed": ["all", "1"],
            "difference": [diff, 0.5],
            "seed_t_ci95_low": [low, None],
            "seed_t_ci95_high": [high, None],
            "verdict": [verdict, "better"],
        }
    )


def test_machine_spread_shift_and_the_verdict_on_both() -> None:
    a = _comparison(0.005, -0.01, 0.02, "no difference")
    b = _comparison(0.020, 0.002, 0.038, "better")
    row = machine_spread(a, b, ("x", "y")).row(0, named=True)
    assert row["shift"] == pytest.approx(0.015)
    assert row["seed_t_half_width_a"] == pytest.approx(0.015)
    assert row["shift_over_seed_half_width"] == pytest.approx(1.0)
    assert row["verdict_both_machines"] == "no difference"
    same = machine_spread(b, b.with_columns(difference=pl.lit(0.03)), ("x", "y"))
    assert same["verdict_both_machines"].to_list() == ["better"]
    with pytest.raises(ValueError, match="different rows"):
        machine_spread(a, a.with_columns(measure=pl.lit("auc")), ("x", "y"))
