"""The positive control: credit from the world's step checker (`rredcot.credit.oracle`).

Analysis only (like RREDCoT's own-path reference): it reads each problem's answer key (the
synthetic world's `program`), which no real dataset has. Every response is cut at every line
(a segment per line, whatever `segmentation` says: the checker's unit), each state gets the
checker's value V(s_k) = 1[no wrong line written] · p̂^(lines left), V(s_K) = R, and
σ_k = V(s_k) − V(s_{k−1}) becomes token advantages the one way every credit method's does
(`SegmentCreditMethod`, the `credit` block). Nothing is generated or scored: no forward tokens.
If a credit that knows which step failed does not beat GRPO at equal steps, no estimate of it
can, and the testbed cannot tell credit methods apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from rredcot.credit.advantages import CreditConfig
from rredcot.credit.mc import token_to_char_boundaries
from rredcot.credit.oracle import checker_values, line_accuracy, lines_written
from rredcot.credit.redistribution import terminal_credit
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.data.checker import StepCheck
from rredcot.data.synthetic import check_response
from rredcot.training.methods.base import (
    RolloutBatch,
    SegmentCredit,
    SegmentCreditMethod,
    mean_segments,
    segment_completions,
)

if TYPE_CHECKING:
    from rredcot.training.method_settings import MethodSettings

LINES = SegmentationConfig(strategy="keyword", num_segments=None, keywords=("\n",))
"""One segment per line: a boundary before every newline."""


@dataclass
class OracleStepMethod(SegmentCreditMethod):
    """Checker values per line → σ_k → token advantages (METHOD.md §4, positive control)."""

    name: ClassVar[str] = "oracle_step"
    metric_names: ClassVar[tuple[str, ...]] = (
        "credit/num_segments",
        "credit/oracle_line_accuracy",
        "credit/oracle_error_share",
    )

    credit: CreditConfig = field(default_factory=CreditConfig)

    @classmethod
    def from_settings(
        cls, settings: MethodSettings, task: Any, tokenizer: Any, eos_ids: Sequence[int]
    ) -> OracleStepMethod:
        return cls(task, tokenizer, list(eos_ids), settings.credit)

    def segment_credit(self, batch: RolloutBatch, policy: torch.nn.Module) -> SegmentCredit:
        segs, _ = segment_completions(policy, self.tokenizer, batch, LINES, self.eos_ids)
        texts, checks, written = [], [], []
        for s, row in zip(segs, batch.rows, strict=True):
            if "program" not in row:
                raise ValueError(
                    f"row {row.get('problem_id')!r}: {self.name} needs the synthetic world's "
                    "`program` (its step checker)"
                )
            text = self.tokenizer.decode(s.response_ids, skip_special_tokens=True)
            offsets = token_to_char_boundaries(self.tokenizer, s.response_ids, s.boundaries, text)
            texts.append(text)
            checks.append(check_response(row["program"], text))
            written.append(lines_written(text, offsets))
        values, metrics = self.state_values(batch.rows, texts, checks, written)
        sigmas = [
            terminal_credit(v, float(r))  # V(s_K) := R; (K,)
            for v, r in zip(values, batch.rewards.tolist(), strict=True)
        ]
        metrics = {
            "credit/num_segments": mean_segments(segs),
            **metrics,
            "credit/oracle_error_share": float(np.mean([not c.correct for c in checks])),
        }
        return SegmentCredit(sigmas, [s.boundaries for s in segs], 0, metrics)

    def state_values(
        self,
        rows: Sequence[dict[str, Any]],
        texts: Sequence[str],
        checks: Sequence[StepCheck],
        written: Sequence[Sequence[int]],
    ) -> tuple[list[list[float]], dict[str, float]]:
        """V(s_k) of every state of every response (d_k = `written`), and the metrics of the
        values: one batch-wide line accuracy p̂ (`rredcot.credit.oracle`)."""
        checked = [c.n_steps + 1 for c in checks]  # the steps and the answer line
        p = line_accuracy([c.first_error for c in checks], checked)
        values = [
            checker_values(w, c.first_error, m, p)
            for w, c, m in zip(written, checks, checked, strict=True)
        ]
        return values, {"credit/oracle_line_accuracy": p}
