"""The benchmarks and training sets the workflow knows by name, and where their rows come from.

Each entry names a Hugging Face Hub dataset (id, revision, config, split), how its columns
map onto the normalized schema, and how the reference answer y* is obtained. Rows are read
from a local mirror (`<mirror>/<name>.jsonl`, already normalized) when one is configured and
holds the file, otherwise from the Hub; machines without Hub access (this project's CI) rely
on the mirror. The mirror directory comes from the environment variable `RREDCOT_MIRROR` or,
when that is unset or empty, the config key `data.mirror` (default null: no mirror, the Hub).

Revisions: a 40-hex commit where one could be confirmed from public pinned downloads of the
same dataset (`revision_pinned=True`); otherwise the branch `main` with
`revision_pinned=False`, so results tables can say the version was not fixed, and every read of
such a dataset logs a warning (`UNPINNED_WARNING`). knoveleng/open-rs is the one left: no commit
of it could be confirmed offline.

The Snakefile reads the registry on every invocation, so this module leaves out polars: the
normalization and `load_normalized`, which reads a dataset and normalizes it, are
`rredcot.data.normalize`'s.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

MIRROR_ENV = "RREDCOT_MIRROR"
MIRROR_CONFIG_KEY = "data.mirror"
NORMALIZED_FIELDS: tuple[str, ...] = ("id", "problem", "answer", "solution")
ANSWER_RULES: tuple[str, ...] = ("column", "last_boxed", "gsm8k_marker")
_SHA = re.compile(r"[0-9a-f]{40}")

AnswerRule = Literal["column", "last_boxed", "gsm8k_marker"]

log = logging.getLogger(__name__)
UNPINNED_WARNING = (
    "dataset %r is read at revision %r of %s, not at a pinned commit: its rows may change under "
    "a rerun (source %s); pin DatasetSpec.revision in rredcot.data.registry to a 40-hex commit "
    "once one is confirmed"
)
HubLoader = Callable[..., Any]  # called like datasets.load_dataset(id, name=, revision=, split=)


@dataclass(frozen=True)
class DatasetSpec:
    """One registry entry: where a dataset lives on the Hub and how to read it.

    `columns` maps normalized fields (`id`, `problem`, `answer`, `solution`) to the Hub
    dataset's column names; `problem` is required, `id` and `solution` are optional (rows
    without an id get `<name>-<row index>`; no solution column gives ""). `answer_from`:
    `column` (the `answer` column as is), `last_boxed` (last `\\boxed{}` of the solution,
    for sets without an answer column), `gsm8k_marker` (split GSM8K's `reasoning #### y*`
    answer column into solution and answer).
    """

    name: str
    hub_id: str
    revision: str
    revision_pinned: bool
    config: str | None
    split: str
    columns: Mapping[str, str] = field(hash=False)
    answer_from: AnswerRule
    role: Literal["benchmark", "training"]
    description: str
    task: str = "math"

    def __post_init__(self) -> None:
        bad = sorted(set(self.columns) - set(NORMALIZED_FIELDS))
        if bad:
            raise ValueError(
                f"{self.name}: columns keys {bad} are not normalized fields {NORMALIZED_FIELDS}"
            )
        if "problem" not in self.columns:
            raise ValueError(f"{self.name}: columns must map 'problem' to a Hub column")
        if self.answer_from not in ANSWER_RULES:
            raise ValueError(
                f"{self.name}: answer_from {self.answer_from!r} not one of {ANSWER_RULES}"
            )
        needs = {"column": "answer", "gsm8k_marker": "answer", "last_boxed": "solution"}
        if needs[self.answer_from] not in self.columns:
            raise ValueError(
                f"{self.name}: answer_from={self.answer_from!r} needs columns to map "
                f"{needs[self.answer_from]!r}"
            )
        if self.revision_pinned and not _SHA.fullmatch(self.revision):
            raise ValueError(
                f"{self.name}: revision_pinned=True needs a 40-hex commit, got {self.revision!r}"
            )
        object.__setattr__(self, "columns", MappingProxyType(dict(self.columns)))

    @property
    def hub_ref(self) -> str:
        """`<hub id>@<revision>`, as recorded in the `source` column and results tables."""
        return f"{self.hub_id}@{self.revision}"


_ENTRIES: tuple[DatasetSpec, ...] = (
    DatasetSpec(
        name="aime24",
        hub_id="HuggingFaceH4/aime_2024",
        revision="2fe88a2f1091d5048c0f36abc874fb997b3dd99a",
        revision_pinned=True,
        config=None,
        split="train",
        columns={"id": "id", "problem": "problem", "answer": "answer", "solution": "solution"},
        answer_from="column",
        role="benchmark",
        description="AIME 2024 I and II, 30 problems with integer answers and solutions.",
    ),
    DatasetSpec(
        name="aime25",
        hub_id="math-ai/aime25",
        revision="563bb8404243c5f09de6ec262f2db674fe5bce9b",
        revision_pinned=True,
        config=None,
        split="test",
        columns={"id": "id", "problem": "problem", "answer": "answer"},
        answer_from="column",
        role="benchmark",
        description="AIME 2025 I and II, 30 problems, answers only.",
    ),
    DatasetSpec(
        name="aime26",
        hub_id="MathArena/aime_2026",
        revision="d2de22f3c656b4f56cf8981212186377d1e23bc3",
        revision_pinned=True,
        config=None,
        split="train",
        columns={"id": "problem_idx", "problem": "problem", "answer": "answer"},
        answer_from="column",
        role="benchmark",
        description="AIME 2026 I and II (MathArena), 30 problems, answers only.",
    ),
    DatasetSpec(
        name="amc23",
        hub_id="math-ai/amc23",
        revision="80815d37005feb82cd7f8fbc6901d5d3eff43057",
        revision_pinned=True,
        config=None,
        split="test",
        columns={"id": "id", "problem": "question", "answer": "answer"},
        answer_from="column",
        role="benchmark",
        description="AMC 2023, 40 problems; numeric answers (stored as floats on the Hub).",
    ),
    DatasetSpec(
        name="math500",
        hub_id="HuggingFaceH4/MATH-500",
        revision="6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",
        revision_pinned=True,
        config=None,
        split="test",
        columns={
            "id": "unique_id",
            "problem": "problem",
            "answer": "answer",
            "solution": "solution",
        },
        answer_from="column",
        role="benchmark",
        description="MATH-500, the 500-problem subset of MATH test (Lightman et al.).",
    ),
    DatasetSpec(
        name="minerva",
        hub_id="math-ai/minervamath",
        revision="ee46ddc498933b1977577953250ca5c66be64f96",
        revision_pinned=True,
        config=None,
        split="test",
        columns={"problem": "question", "answer": "answer"},
        answer_from="column",
        role="benchmark",
        description="Minerva OCW, the 272 MIT OpenCourseWare STEM problems (not MATH-based).",
    ),
    DatasetSpec(
        name="gsm8k",
        hub_id="openai/gsm8k",
        revision="740312add88f781978c0658806c59bc2815b9866",
        revision_pinned=True,
        config="main",
        split="test",
        columns={"problem": "question", "answer": "answer"},
        answer_from="gsm8k_marker",
        role="benchmark",
        description="GSM8K test, 1319 grade-school word problems; answer after '####'.",
    ),
    DatasetSpec(
        name="numina_cot",
        hub_id="AI-MO/NuminaMath-CoT",
        revision="9d8d210c9f6a36c8f3cd84045668c9b7800ef517",
        revision_pinned=True,
        config=None,
        split="train",
        columns={"problem": "problem", "solution": "solution"},
        answer_from="last_boxed",
        role="training",
        description="NuminaMath-CoT training set (paper's Qwen3-4B runs); y* = last \\boxed{}.",
    ),
    DatasetSpec(
        name="open_rs",
        hub_id="knoveleng/open-rs",
        revision="main",
        revision_pinned=False,
        config=None,
        split="train",
        columns={"problem": "problem", "answer": "answer", "solution": "solution"},
        answer_from="column",
        role="training",
        description="open-rs 7k training set (paper's 1.5B online-refinement setting).",
    ),
)

REGISTRY: Mapping[str, DatasetSpec] = MappingProxyType({s.name: s for s in _ENTRIES})
KNOWN_BENCHMARKS: tuple[str, ...] = tuple(s.name for s in _ENTRIES if s.role == "benchmark")
KNOWN_TRAINING_SETS: tuple[str, ...] = tuple(s.name for s in _ENTRIES if s.role == "training")


def registry_entry(name: str) -> DatasetSpec:
    """The registry entry called `name`; an unknown name is an error listing the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown dataset {name!r}; known benchmarks: {list(KNOWN_BENCHMARKS)}, "
            f"training sets: {list(KNOWN_TRAINING_SETS)}"
        ) from None


# Values that mean "no mirror" wherever a mirror is named: YAML's null reaches Python as None,
# but `snakemake --config data='{mirror: null}'` and the environment pass text.
NO_MIRROR = ("", "~", "null", "none")


def mirror_dir(config_value: str | os.PathLike[str] | None) -> Path | None:
    """The mirror directory: `$RREDCOT_MIRROR` if set and non-empty, else `config_value`.

    A relative path resolves against the current working directory (where Snakemake runs).
    None when neither names a directory: then only the Hub is tried. `null`, `none` and `~`
    (as text, any case) mean no mirror; in the variable they also override the config key.
    """
    value = os.environ.get(MIRROR_ENV, "").strip()
    if not value and config_value is not None:
        value = str(config_value).strip()
    if value.lower() in NO_MIRROR:
        return None
    return Path(value).expanduser().absolute()


class DatasetUnavailableError(RuntimeError):
    """Neither the mirror nor the Hub could provide a dataset; the message says how to fix it."""


@dataclass(frozen=True)
class RawRow:
    """One row as read from a source: its position, the record, or why it could not be read."""

    index: int
    record: Mapping[str, Any] | None
    error: str | None = None


@dataclass(frozen=True)
class ResolvedSource:
    """Raw rows of one dataset and where they came from (`kind` mirror or hub)."""

    kind: Literal["mirror", "hub"]
    origin: str  # "mirror:<path>" or "hub:<id>@<revision>"
    rows: tuple[RawRow, ...]
    path: Path | None = None


def read_mirror_file(path: Path) -> tuple[RawRow, ...]:
    """One RawRow per non-blank line; a line that is not a JSON object is kept as an error.

    Lines are decoded one at a time, so a line that is not valid UTF-8 becomes a malformed row
    naming its line number instead of aborting the whole file.
    """
    rows: list[RawRow] = []
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            index = len(rows)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                byte = exc.start + 1
                reason = f"line {line_no}: not valid UTF-8 ({exc.reason} at byte {byte})"
                rows.append(RawRow(index, None, reason))
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                rows.append(RawRow(index, None, f"line {line_no}: unparseable JSON ({exc.msg})"))
                continue
            if not isinstance(record, dict):
                kind = type(record).__name__
                rows.append(RawRow(index, None, f"line {line_no}: a JSON {kind}, not an object"))
                continue
            rows.append(RawRow(index, record))
    return tuple(rows)


def _records(table: Any) -> Iterable[Any]:
    """Rows of whatever the Hub loader returned (datasets.Dataset, polars, pyarrow, list)."""
    for method in ("to_dicts", "to_pylist", "to_list"):
        if hasattr(table, method):
            return getattr(table, method)()
    return table


def _default_hub_loader(*args: Any, **kwargs: Any) -> Any:
    """`datasets.load_dataset`, imported only when the Hub is actually needed."""
    from datasets import load_dataset

    return load_dataset(*args, **kwargs)


def resolve_source(
    spec: DatasetSpec, mirror: Path | None, hub_loader: HubLoader | None = None
) -> ResolvedSource:
    """Read `spec`'s rows from `<mirror>/<name>.jsonl` if it exists, else from the Hub.

    `hub_loader` defaults to `datasets.load_dataset`; tests pass a fake so they never touch
    the network. Raises DatasetUnavailableError naming both places tried and the fix. The read
    of a dataset not at a pinned commit is logged (`UNPINNED_WARNING`).
    """
    mirror_file = mirror / f"{spec.name}.jsonl" if mirror is not None else None
    if mirror_file is not None and mirror_file.is_file():
        mirrored = ResolvedSource(
            kind="mirror",
            origin=f"mirror:{mirror_file}",
            rows=read_mirror_file(mirror_file),
            path=mirror_file,
        )
        return _warn_if_unpinned(spec, mirrored)
    loader = hub_loader if hub_loader is not None else _default_hub_loader
    try:
        table = loader(spec.hub_id, name=spec.config, revision=spec.revision, split=spec.split)
        records = list(_records(table))
    except Exception as exc:  # any failure of the Hub (offline, gated, renamed) ends here
        tried = (
            f"mirror file {mirror_file} (not found)"
            if mirror_file is not None
            else f"no mirror (neither ${MIRROR_ENV} nor the config key {MIRROR_CONFIG_KEY} set)"
        )
        raise DatasetUnavailableError(
            f"dataset {spec.name!r} is not available: tried {tried}, then the Hub "
            f"{spec.hub_ref} (config={spec.config}, split={spec.split}), which failed with "
            f"{type(exc).__name__}: {exc}. Fix: point ${MIRROR_ENV} or the config key "
            f"{MIRROR_CONFIG_KEY} at a directory holding {spec.name}.jsonl (normalized rows "
            f"with keys id, problem, answer, solution), or run where the Hub is reachable."
        ) from exc
    rows = tuple(
        RawRow(i, r) if isinstance(r, Mapping) else RawRow(i, None, f"not a record: {r!r:.80}")
        for i, r in enumerate(records)
    )
    hub = ResolvedSource(kind="hub", origin=f"hub:{spec.hub_ref}", rows=rows)
    return _warn_if_unpinned(spec, hub)


def _warn_if_unpinned(spec: DatasetSpec, source: ResolvedSource) -> ResolvedSource:
    """`source`, its read logged when the dataset is not at a pinned commit (`UNPINNED_WARNING`)."""
    if not spec.revision_pinned:
        log.warning(UNPINNED_WARNING, spec.name, spec.revision, spec.hub_id, source.origin)
    return source
