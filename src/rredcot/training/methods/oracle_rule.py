"""The rule-aware positive control: the checker oracle with one line accuracy per line kind.

`oracle_step` values a correct prefix by one batch-wide line accuracy p̂, blind to the world's
misconception steps being far riskier than the others, so its credit cannot single out the
error the regime was built around (issue 43: its gain over GRPO was on random slips). This
oracle keeps everything else of `oracle_step` (a segment per line, V(s_K) = R, the shared §4
transform) and values a state by the lines still to write, each at its kind's accuracy:
the misconception's steps, the other steps, the answer line (`rredcot.credit.oracle`). Analysis
only: it reads the answer key and the world's misconception (`training.misconception`, which the
workflow sets from `sft.misconception` for this method's runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rredcot.credit.oracle import kind_accuracy, kind_values, step_kinds, written_kinds
from rredcot.data.checker import StepCheck
from rredcot.data.misconceptions import Misconception
from rredcot.data.programs import Program
from rredcot.training.methods.oracle_step import OracleStepMethod

if TYPE_CHECKING:
    from rredcot.training.method_settings import MethodSettings


@dataclass
class OracleRuleMethod(OracleStepMethod):
    """Checker values with per-kind line accuracies → σ_k → token advantages."""

    name: ClassVar[str] = "oracle_rule"
    metric_names: ClassVar[tuple[str, ...]] = (
        "credit/num_segments",
        "credit/oracle_rule_accuracy",
        "credit/oracle_step_accuracy",
        "credit/oracle_answer_accuracy",
        "credit/oracle_error_share",
    )

    misconception: Misconception | None = field(default=None)

    @classmethod
    def from_settings(
        cls, settings: MethodSettings, task: Any, tokenizer: Any, eos_ids: Sequence[int]
    ) -> OracleRuleMethod:
        block = settings.misconception
        if block is None:
            raise ValueError(
                "training.misconception: oracle_rule needs the world's misconception (the "
                "workflow sets it from sft.misconception; that block is null)"
            )
        misconception = block if isinstance(block, Misconception) else Misconception(**block)
        return cls(task, tokenizer, list(eos_ids), settings.credit, misconception)

    def state_values(
        self,
        rows: Sequence[Mapping[str, Any]],
        texts: Sequence[str],
        checks: Sequence[StepCheck],
        written: Sequence[Sequence[int]],
    ) -> tuple[list[list[float]], dict[str, float]]:
        if self.misconception is None:
            raise ValueError("oracle_rule: no misconception given")
        kinds, totals = [], []
        for row, text, check in zip(rows, texts, checks, strict=True):
            by_step = step_kinds(Program.from_json(row["program"]), self.misconception)
            kinds.append(written_kinds(text, by_step, check.n_steps + 1))
            rule = sum(k == "rule" for k in by_step.values())
            totals.append({"rule": rule, "step": len(by_step) - rule, "answer": 1})
        p = kind_accuracy([c.first_error for c in checks], kinds)
        values = [
            kind_values(w, c.first_error, k, t, p)
            for w, c, k, t in zip(written, checks, kinds, totals, strict=True)
        ]
        return values, {f"credit/oracle_{kind}_accuracy": p[kind] for kind in p}
