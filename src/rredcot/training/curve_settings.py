"""How a run evaluates itself during RL (`CurveSettings`), apart from the evaluation code in
`rredcot.training.curves`: the Snakefile builds these settings for every training job while it
builds the DAG, and this module imports no torch or transformers (`curves` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CurveSettings:
    """How a run evaluates itself (config `training.curve` + the split's evaluation protocol)."""

    every: int
    """Evaluate after every this many optimizer steps (strictly between 0 and max_steps)."""
    samples_per_problem: int
    """k samples per problem (the split's evaluation k)."""
    temperature: float
    """Sampling temperature (the split's evaluation temperature)."""
    top_p: float
    """Nucleus mass (the split's evaluation top_p)."""
    max_new_tokens: int
    """Budget per sample (the split's evaluation budget)."""
    seed: int
    """Sampling seed, the same for every run and step (the evaluation seed)."""
    batch_size: int = 64
    """Sequences per generate call."""

    def __post_init__(self) -> None:
        for name in ("every", "samples_per_problem", "max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"training.curve.{name}: expected an integer >= 1, got {value!r}")

    @classmethod
    def from_dict(cls, mapping: dict[str, Any]) -> CurveSettings:
        allowed = set(cls.__dataclass_fields__)
        unknown = sorted(set(mapping) - allowed)
        if unknown:
            raise ValueError(f"training.curve: unknown key(s) {unknown}; allowed {sorted(allowed)}")
        return cls(**mapping)

    @classmethod
    def from_evaluation(
        cls, evaluation: dict[str, Any], split: str, every: int, seed: int
    ) -> CurveSettings:
        """The evaluation protocol of `split` (config `evaluation` with its `per_benchmark`
        overrides): the curve of a run is scored exactly as the split's benchmark table."""
        ev = {k: v for k, v in evaluation.items() if k != "per_benchmark"}
        ev.update(evaluation.get("per_benchmark", {}).get(split, {}))
        keys = ("samples_per_problem", "temperature", "top_p", "max_new_tokens", "batch_size")
        return cls(every=every, seed=seed, **{k: ev[k] for k in keys})

    def steps(self, max_steps: int) -> list[int]:
        """The optimizer steps this run evaluates itself at."""
        return list(range(self.every, max_steps, self.every))
