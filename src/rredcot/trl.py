"""RREDCoT in any TRL script: `RREDCoTConfig` (a GRPOConfig), `RREDCoTTrainer` (a GRPOTrainer).

A GRPO script switches to RREDCoT by changing three lines (docs/trl.md):

    from rredcot import RREDCoTConfig, RREDCoTTrainer  # was: from trl import GRPOConfig, …
    args = RREDCoTConfig(output_dir="out", ...)         # was: GRPOConfig(...)
    trainer = RREDCoTTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)

The trainer takes what `GRPOTrainer` takes; the credit's settings are config fields (`credit`,
`segmentation`, `estimator`, `transform`, `task`, `reference_column`, `answer_column`,
`missing_reference`) with the workflow's defaults. Dataset rows are TRL's: a `prompt` (plain
text or conversational) and extra columns, which reach the reward functions as TRL passes them.
RREDCoT reads each row's reference solution from `reference_column` (default `solution`, the
NuminaMath-CoT / MATH layout) and its answer y* from `answer_column` (default `answer`; when a row
has none, the task's extraction from the reference: the last `\\boxed{}` for math). The
reference is written as U* ⊕ A ⊕ y* ⊕ close (`rredcot.credit.references.compose_reference`) and
taken as given: this path does not verify it.

The TRL version is checked when this module is imported (`rredcot.training.trl_support`).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rredcot.training.trl_support import check_trl_version

check_trl_version()

import torch  # noqa: E402 (after the version check: a clear error before TRL's own)
from trl import GRPOConfig  # noqa: E402
from trl.data_utils import maybe_apply_chat_template  # noqa: E402

from rredcot.credit.advantages import CreditConfig  # noqa: E402
from rredcot.credit.bayes import OPPOConfig  # noqa: E402
from rredcot.credit.mc import MCConfig  # noqa: E402
from rredcot.credit.references import compose_reference  # noqa: E402
from rredcot.credit.rredcot_config import RREDCoTConfig as EstimatorConfig  # noqa: E402
from rredcot.credit.segmentation import SegmentationConfig  # noqa: E402
from rredcot.tasks import TASK_NAMES, get_task  # noqa: E402
from rredcot.tasks.base import Grade  # noqa: E402
from rredcot.training.method_registry import METHOD_SPECS  # noqa: E402
from rredcot.training.method_settings import MethodSettings  # noqa: E402
from rredcot.training.methods import (  # noqa: E402
    METHODS,
    Method,
    MethodOutput,
    ResetConfig,
    RolloutBatch,
    build_method,
)
from rredcot.training.settings import TRAINING_REFERENCES as REFERENCES  # noqa: E402
from rredcot.training.trainer import CreditGRPOTrainer  # noqa: E402

log = logging.getLogger(__name__)

CREDITS: tuple[str, ...] = tuple(n for n, s in METHOD_SPECS.items() if not s.analysis_only)
"""Credit methods for any dataset (the registry's, less the synthetic world's oracles)."""
WORLD_CREDITS: tuple[str, ...] = tuple(n for n, s in METHOD_SPECS.items() if s.analysis_only)
"""The synthetic world's oracles: they read each row's `program` (the workflow's analysis runs)."""
MISSING_REFERENCE: tuple[str, ...] = ("error", "grpo")
ROWS_WITHOUT_REFERENCE = "credit/rows_without_reference"

ESTIMATORS: dict[str, tuple[type, str]] = {
    "rredcot": (EstimatorConfig, "rredcot"),
    "mc": (MCConfig, "mc"),
    "oppo": (OPPOConfig, "oppo"),
    "rrpo": (ResetConfig, "resets"),
    "srpo": (ResetConfig, "resets"),
}
"""Each credit's `estimator` block: its settings class and `MethodSettings` attribute (a credit
not listed has none, and its block must be empty)."""
PAPER_DEFAULTS: dict[str, dict[str, Any]] = {
    "segmentation": {"strategy": "hybrid", "num_segments": 8, "discourse_markers": True},
    "resets": {"localization_max_new_tokens": 4096},
}
"""The workflow's settings for math reasoning traces (configs/paper_*.yaml over config.yaml)
where they differ from the settings classes' defaults (config.yaml's, for the tiny synthetic
world), under the keys a config leaves out; the other keys keep their classes' defaults."""
MC_BATCH_SIZE = "batch_size"
"""The one `estimator` key of `mc` beyond `MCConfig`'s: rollout rows per generate call."""
ESTIMATOR_EXTRAS: dict[str, dict[str, str]] = {"mc": {MC_BATCH_SIZE: "mc_batch_size"}}
"""`estimator` keys of a credit beyond its settings class: each names the `MethodSettings`
(and `TrainingSettings`) attribute it sets."""


def _defaults(cls: type, block: str = "") -> str:
    """`name=default, …` of a settings dataclass under `PAPER_DEFAULTS[block]` (help text)."""
    out = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or f.name == "keywords":
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        default = PAPER_DEFAULTS.get(block, {}).get(f.name, default)
        out.append(f"{f.name}={default!r}")
    return ", ".join(out)


# --------------------------------------------------------------------------- task


@dataclass(frozen=True)
class TaskSpec:
    """Your own answer format and grader, for `RREDCoTConfig(task=TaskSpec(...))`.

    RREDCoT appends `answer_trigger` to a partial response to ask for the answer now (then y*
    and `answer_close`); `mc`, `rrpo` and `srpo` grade rollouts with `is_correct(response,
    gold)`. Give module-level functions: the config is pickled with each checkpoint.
    """

    answer_trigger: str
    answer_close: str
    extract_answer: Callable[[str], str | None]
    """The final answer of a response or reference (None: none); also y* for rows without one."""
    is_correct: Callable[[str, str], bool]
    """(response, gold answer) → whether the response's answer is right."""
    stop_strings: tuple[str, ...] = ()
    name: str = "custom"

    def grade(self, response: str, gold: str) -> Grade:
        return Grade(bool(self.is_correct(response, gold)), self.extract_answer(response))


def resolve_task(task: Any) -> Any:
    """A task object from `RREDCoTConfig.task`: a task name (`TASK_NAMES`), `module:attribute`
    (an object, or a class called without arguments), or the object itself."""
    if not isinstance(task, str):
        return task
    if ":" not in task:
        return get_task(task)
    module, _, name = task.partition(":")
    value = getattr(importlib.import_module(module), name)
    return value() if isinstance(value, type) else value


# --------------------------------------------------------------------------- config


@dataclass
class RREDCoTConfig(GRPOConfig):
    """TRL's `GRPOConfig` with the credit's settings; every field has the workflow's default.

    The blocks `segmentation`, `estimator` and `transform` are dicts (or JSON strings on the
    command line, as TRL's `model_init_kwargs`); a key left out keeps the workflow's default
    for math reasoning traces (`PAPER_DEFAULTS`, else the settings class's).
    """

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [
        *GRPOConfig._VALID_DICT_FIELDS,
        "segmentation",
        "estimator",
        "transform",
        "misconception",
    ]

    credit: str = field(
        default="rredcot",
        metadata={
            "help": "How the outcome reward is shared over each response's tokens: "
            + "; ".join(f"`{n}`: {METHOD_SPECS[n].summary}" for n in CREDITS)
            + ". `grpo` gives exactly GRPOTrainer's loss. The synthetic world's oracles "
            f"{list(WORLD_CREDITS)} read each row's `program` (analysis runs of the workflow).",
            "choices": [*CREDITS, *WORLD_CREDITS],
        },
    )
    segmentation: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "How each response is cut into segments (METHOD.md §2), keys of "
            f"SegmentationConfig: {_defaults(SegmentationConfig, 'segmentation')} (None: "
            "these defaults). rredcot, mc, rrpo and srpo."
        },
    )
    estimator: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "The credit's estimator settings (None: defaults). rredcot (METHOD.md §3): "
            f"{_defaults(EstimatorConfig, 'rredcot')}. mc (§5): {_defaults(MCConfig)}, "
            f"{MC_BATCH_SIZE}=64 (rollout rows per generate call). oppo (§8): "
            f"{_defaults(OPPOConfig)}. rrpo/srpo (§6): {_defaults(ResetConfig, 'resets')}. "
            "grpo: none."
        },
    )
    transform: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "How segment credits become token advantages (METHOD.md §4), keys of "
            f"CreditConfig: {_defaults(CreditConfig, 'transform')} (None: these defaults). "
            "rredcot and mc."
        },
    )
    task: str = field(
        default="math",
        metadata={
            "help": "The answer format and grader: `math` (answer trigger "
            '"\\n\\nFinal answer: \\boxed{", close "}", graded by math-verify), '
            f"one of {list(TASK_NAMES)}, `module:attribute` naming your own task object "
            "(a rredcot.TaskSpec), or the object itself."
        },
    )
    reference_column: str = field(
        default="solution",
        metadata={"help": "Dataset column with each problem's reference solution (rredcot)."},
    )
    answer_column: str = field(
        default="answer",
        metadata={
            "help": "Dataset column with each problem's final answer y*; a row without one "
            "takes the task's answer extracted from its reference (math: the last \\boxed{})."
        },
    )
    reference: str = field(
        default="configured",
        metadata={
            "help": "RREDCoT's reference path: `configured` (each row's, from reference_column) "
            "or `own_path` (the synthetic world's key written along each response's own path; "
            "rows need `program`).",
            "choices": list(REFERENCES),
        },
    )
    misconception: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "The synthetic world's misconception {rule, rate}, read by oracle_rule "
            "(None: none)."
        },
    )
    padding_free: bool = field(
        default=False,
        metadata={
            "help": "Compute the loss's log-probs with the rows packed into one sequence (no "
            "padding, no (rows, 1, L, L) mask; rredcot.training.padding_free)."
        },
    )
    missing_reference: str = field(
        default="error",
        metadata={
            "help": "Rows without a usable reference (rredcot): `error` refuses the dataset "
            "naming them; `grpo` gives those rows GRPO's credit, counted at start and logged "
            f"per step as `{ROWS_WITHOUT_REFERENCE}`.",
            "choices": list(MISSING_REFERENCE),
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # JSON strings of the dict fields become dicts
        if self.credit not in METHOD_SPECS:
            raise ValueError(f"credit: {self.credit!r} is not one of {[*CREDITS, *WORLD_CREDITS]}")
        if self.reference not in REFERENCES:
            raise ValueError(f"reference: {self.reference!r} is not one of {list(REFERENCES)}")
        if self.missing_reference not in MISSING_REFERENCE:
            raise ValueError(
                f"missing_reference: {self.missing_reference!r} is not one of "
                f"{list(MISSING_REFERENCE)}"
            )
        self.method_settings()  # every block checked now, not at the first step

    def method_settings(self) -> MethodSettings:
        """The credit method's settings from the config's blocks (each key checked)."""
        for name in ("segmentation", "estimator", "transform", "misconception"):
            block = getattr(self, name)
            if block is not None and not isinstance(block, Mapping):
                raise ValueError(f"{name}: expected a dict or a JSON object, got {block!r}")
        estimator = dict(self.estimator or {})
        segmentation = {**PAPER_DEFAULTS["segmentation"], **(self.segmentation or {})}
        transform = {**PAPER_DEFAULTS.get("transform", {}), **(self.transform or {})}
        blocks: dict[str, Any] = {
            "segmentation": SegmentationConfig.from_dict(segmentation),
            "credit": CreditConfig.from_dict(transform),
            "reference": self.reference,
            "misconception": dict(self.misconception) if self.misconception else None,
        }
        for key, attribute in ESTIMATOR_EXTRAS.get(self.credit, {}).items():
            if key in estimator:
                blocks[attribute] = estimator.pop(key)
        if self.credit not in ESTIMATORS:
            if estimator:
                raise ValueError(f"estimator: credit {self.credit!r} has no estimator settings")
            return MethodSettings(**blocks)
        kind, key = ESTIMATORS[self.credit]
        blocks[key] = kind.from_dict({**PAPER_DEFAULTS.get(key, {}), **estimator})
        return MethodSettings(**blocks)


# --------------------------------------------------------------------------- rows


def credit_fields(
    row: Mapping[str, Any], task: Any, reference_column: str, answer_column: str
) -> tuple[str | None, str | None]:
    """(y*, reference text U* ⊕ A ⊕ y* ⊕ close) of a dataset row; None where it has none."""
    text = row.get(reference_column)
    text = text if isinstance(text, str) and text.strip() else None
    answer = row.get(answer_column)
    answer = str(answer).strip() if answer is not None and str(answer).strip() else None
    if answer is None and text is not None:
        answer = task.extract_answer(text)
    if answer is None or text is None:
        return answer, None
    return answer, compose_reference(task, text, answer)


@dataclass
class GRPOWhereNoReference(Method):
    """A method that reads references, with GRPO's credit (the outcome advantage on every token)
    for the rows that have none (`missing_reference: grpo`); counted per step."""

    inner: Method

    def __post_init__(self) -> None:
        for name in ("name", "needs_whole_groups", "rollout", "reuses_generation"):
            setattr(self, name, getattr(self.inner, name))
        self.metric_names = (*self.inner.metric_names, ROWS_WITHOUT_REFERENCE)

    def advantages(self, batch: RolloutBatch, policy: torch.nn.Module) -> MethodOutput:
        keep = [i for i, row in enumerate(batch.rows) if row.get("reference") is not None]
        missing = {ROWS_WITHOUT_REFERENCE: float(len(batch) - len(keep))}
        if len(keep) == len(batch):
            out = self.inner.advantages(batch, policy)
            return MethodOutput(out.advantages, out.forward_tokens, {**out.metrics, **missing})
        grpo = batch.outcome_advantages[:, None] * batch.completion_mask  # (B, T)
        if not keep:
            return MethodOutput(grpo, 0, missing)
        index = torch.tensor(keep)
        tensors = {
            f.name: getattr(batch, f.name)[index.to(getattr(batch, f.name).device)]
            for f in dataclasses.fields(batch)
            if isinstance(getattr(batch, f.name), torch.Tensor)
        }
        rows = [batch.rows[i] for i in keep]
        completions = [batch.completions[i] for i in keep]
        sub = dataclasses.replace(
            batch, rows=rows, completions=completions, generation=None, **tensors
        )
        out = self.inner.advantages(sub, policy)
        part = out.advantages
        if part.ndim == 1:
            part = part[:, None] * sub.completion_mask
        grpo[index.to(grpo.device)] = part.to(grpo.device, grpo.dtype)
        return MethodOutput(grpo, out.forward_tokens, {**out.metrics, **missing})


# --------------------------------------------------------------------------- trainer


class RREDCoTTrainer(CreditGRPOTrainer):
    """TRL's `GRPOTrainer` with the credit method `args.credit` (an `RREDCoTConfig`).

    Takes GRPOTrainer's arguments, no others. Logs TRL's metrics plus `credit/…` (advantage
    statistics, forward tokens and seconds the credit cost, the method's own), which reach
    `report_to` as TRL's do.
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: RREDCoTConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Any = None,
        optimizers: tuple[Any, Any] = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        tools: Any = None,
        rollout_func: Any = None,
        environment_factory: Any = None,
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = RREDCoTConfig(f"{str(name).split('/')[-1]}-RREDCoT")
        if not isinstance(args, RREDCoTConfig):
            raise TypeError(
                f"args: expected an RREDCoTConfig (a GRPOConfig with the credit's settings), got "
                f"{type(args).__name__}; build it with the same arguments"
            )
        settings = args.method_settings()
        own = (tools, rollout_func, environment_factory)
        if args.credit != "grpo" and any(x is not None for x in own):
            raise ValueError(
                f"credit {args.credit!r}: tools, rollout_func and environment_factory are not "
                "supported (the credit reads single-turn completions); use credit='grpo'"
            )
        self.task = resolve_task(args.task)
        self._settings = settings
        self.rows_without_reference = self._check_rows(train_dataset, args)
        super().__init__(
            model=model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            reward_processing_classes=reward_processing_classes,
            callbacks=callbacks,
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
            tools=tools,
            rollout_func=rollout_func,
            environment_factory=environment_factory,
            padding_free=args.padding_free,
        )

    def _check_rows(self, dataset: Any, args: RREDCoTConfig) -> int:
        """Rows of `dataset` without a usable reference (rredcot) or answer (mc, rrpo, srpo);
        refuses them unless `missing_reference` is `grpo`. An iterable dataset is not scanned."""
        reads_reference = METHODS[args.credit].reads_reference
        if args.credit == "grpo" or dataset is None or not hasattr(dataset, "column_names"):
            return 0
        column = args.reference_column
        if reads_reference and column not in dataset.column_names:
            raise ValueError(
                f"credit {args.credit!r} reads each row's reference solution from column "
                f"{column!r} (reference_column); the dataset has {dataset.column_names}"
            )
        columns = [c for c in (column, args.answer_column) if c in dataset.column_names]
        bad = []
        for i, row in enumerate(dataset.select_columns(columns)):
            answer, reference = credit_fields(row, self.task, column, args.answer_column)
            if (reference if reads_reference else answer) is None:
                bad.append(i)
        if not bad:
            return 0
        what = "reference solution" if reads_reference else "answer"
        where = (
            f"{column!r} (reference_column; with an answer in {args.answer_column!r} or one the "
            f"task extracts from it)"
            if reads_reference
            else f"{args.answer_column!r} (answer_column) or extractable from {column!r}"
        )
        message = f"{len(bad)} of {len(dataset)} rows (e.g. {bad[:10]}) have no {what} in {where}"
        if not reads_reference or args.missing_reference == "error":
            hint = "; set missing_reference='grpo' to give them GRPO's credit" * reads_reference
            raise ValueError(f"credit {args.credit!r}: {message}{hint}, or filter them out")
        log.warning("%s: they get GRPO's credit (missing_reference='grpo')", message)
        return len(bad)

    def default_method(self) -> Method:
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        method = build_method(
            self.args.credit, self.task, tokenizer, self.eos_token_ids, self._settings
        )
        if method.reads_reference and self.args.missing_reference == "grpo":
            return GRPOWhereNoReference(method)
        return method

    def method_rows(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """TRL's rows with what the methods read: `prompt` as text (the chat template applied
        as TRL applies it), `answer` y*, `reference` (None: none) and `problem_id`."""
        rows = []
        for row in inputs:
            answer, reference = credit_fields(
                row, self.task, self.args.reference_column, self.args.answer_column
            )
            prompt = maybe_apply_chat_template(
                {"prompt": row["prompt"]}, self.processing_class, **self.chat_template_kwargs
            )["prompt"]
            rows.append(
                {
                    **row,
                    "prompt": prompt,
                    "answer": answer,
                    "reference": reference,
                    "problem_id": row.get("problem_id", row.get("id")),
                }
            )
        return rows


__all__: Sequence[str] = [
    "CREDITS",
    "RREDCoTConfig",
    "RREDCoTTrainer",
    "TaskSpec",
]
