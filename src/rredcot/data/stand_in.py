"""The CPU rehearsal's stand-in for a registry training set (NuminaMath-CoT, open-rs).

A paper config trains on a Hub dataset the mirror does not hold. The rehearsal writes a few
hundred rows of a mirrored benchmark (GSM8K test, `openai/gsm8k` at the registry's pinned
revision) as that training set's mirror file: each worked solution loses GSM8K's calculator
annotations (`<<48/2=24>>`) and ends in `\\boxed{y*}` as NuminaMath-CoT's do, and y* is taken
back from that box by the registry's own rule (`last_boxed`). Not a scientific training set:
it exists so the registry training path, dataset references and math rewards run offline.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from rredcot.data.normalize import last_boxed

CALCULATOR = re.compile(r"<<[^<>]*>>")


def numina_style(solution: str, answer: str) -> str:
    """A GSM8K solution as NuminaMath-CoT writes one: no calculator tags, a boxed answer."""
    steps = CALCULATOR.sub("", solution).rstrip()
    return f"{steps}\nThe answer is $\\boxed{{{answer}}}$."


def stand_in_rows(source: Iterable[Mapping[str, Any]], n: int) -> list[dict[str, str]]:
    """The first `n` source rows (normalized: id, problem, answer, solution) with a solution
    and an answer, as normalized training rows whose answer is the solution's last box."""
    rows: list[dict[str, str]] = []
    for row in source:
        if len(rows) == n:
            break
        solution, answer = row.get("solution") or "", str(row.get("answer") or "").strip()
        if not solution.strip() or not answer:
            continue
        text = numina_style(solution, answer)
        boxed = last_boxed(text)
        if boxed is None:
            raise ValueError(f"row {row.get('id')!r}: no \\boxed answer in {text[-80:]!r}")
        rows.append(
            {
                "id": f"stand_in-{row['id']}",
                "problem": row["problem"],
                "answer": boxed,
                "solution": text,
            }
        )
    if len(rows) < n:
        raise ValueError(f"stand-in training set: the source has {len(rows)} usable rows, need {n}")
    return rows
