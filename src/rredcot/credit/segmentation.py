"""Segment boundaries for one response (METHOD.md §2): keyword, fixed, entropy, SPO-style, hybrid.

A response of T tokens is cut into K segments by boundaries 0 = b_0 < b_1 < … < b_K = T (token
indices; segment k covers tokens [b_{k−1}, b_k)). The states the estimators score are
s_k = x ⊕ τ_{<b_k}, so a boundary is "the place where the answer trigger could be appended".
Everything here is a pure function of the decoded token texts, the per-token entropies
H_j = −Σ_v π(v | x, z_{<j}) log π(v | x, z_{<j}) and the per-token log-probs log π(z_j | …);
those are computed elsewhere (`rredcot.scoring`) and passed in.

Strategies (`STRATEGIES`, chosen by `SegmentationConfig.strategy`):

- `keyword`: a boundary before every keyword occurrence (default `"\\n\\n"`, `"\\n"`; optional
  discourse markers). The newline goes with the *right* segment: METHOD says "a boundary before
  every occurrence", and a state then ends where a step ends, so the answer trigger
  (`"\\n\\nFinal answer: …"`, `"\\nAnswer: "`) follows it exactly as it would in a response.
- `fixed`: K segments of nearly equal token counts, b_k = ⌊k·T/K⌋.
- `entropy_topq`: a boundary before each of the highest-entropy tokens.
- `low_prob_cutpoints` (SPO, Guo et al. 2025): a boundary before each token with π < threshold.
- `hybrid` (default, RREDCoT's reconstruction): the keyword split, then merge the adjacent pair
  with the lowest merge score until K segments remain (`MERGE_SCORES`,
  `rredcot.credit.segment_counts`).

Rules shared by all strategies (reconstructed choices, documented because the paper's text is not
available):

- K is hit exactly whenever T ≥ K and `num_segments` is set. When T < K every token is its own
  segment (T segments); an empty response (T = 0) gets the boundaries [0] (no segment).
- Ties are broken by the lowest token index (leftmost pair, earliest token).
- Token 0 is never a boundary other than b_0, and no segment is empty.
- Keyword snapping: a keyword that starts inside a token puts the boundary at that token's start;
  a keyword spanning several tokens puts it at its first token. Keyword occurrences separated only
  by whitespace form one run with one boundary before it (`"\\n\\nWait"` opens one segment, not a
  `"\\n\\n"` segment followed by a `"Wait"` one); a run with nothing but whitespace after it (a
  trailing newline) opens no segment. After snapping, a segment holding only whitespace joins
  the next one (the last joins the previous one), so every keyword segment holds some text
  unless the whole response is whitespace.
- Fewer keyword segments than K: `hybrid` splits by the inverse of its merge score:
  `pair_entropy_sum` splits the segment with the largest entropy sum before its highest-entropy
  token (never its first); `boundary_entropy` adds boundaries before the highest-entropy tokens
  that are not boundaries yet. `keyword` with `num_segments` set uses the entropy-free analogue
  (merge the adjacent pair with the fewest tokens; split the longest segment at its middle), so
  the sweep can compare keyword-aligned cuts with and without entropy at the same K.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

from rredcot.block_checks import check_known_keys
from rredcot.credit.segment_counts import MERGE_SCORES, all_tokens, fit_count, token_count

KEYWORDS: tuple[str, ...] = ("\n\n", "\n")
DISCOURSE_MARKERS: tuple[str, ...] = (
    "Wait",
    "But",
    "So",
    "Alternatively",
    "Therefore",
    "However",
    "Let me",
)
_NONSPACE = re.compile(r"\S")


@dataclass(frozen=True)
class SegmentationConfig:
    """The `segmentation` config block (METHOD.md §2); every field has a documented default.

    Fields a strategy does not use are ignored by it: `keywords`/`discourse_markers` matter for
    `keyword` and `hybrid`, `merge_score` for `hybrid`, `topq` for `entropy_topq` and
    `prob_threshold` for `low_prob_cutpoints` (the last two only when `num_segments` is None).
    """

    strategy: str = "hybrid"
    """One of `STRATEGIES`: keyword | fixed | entropy_topq | low_prob_cutpoints | hybrid."""
    num_segments: int | None = 4
    """Target K (≥ 1), hit exactly when T ≥ K. None: the strategy's own count (not allowed for
    `fixed` and `hybrid`): all keyword boundaries, the top-q tokens, every token below the
    probability threshold."""
    keywords: tuple[str, ...] = KEYWORDS
    """Literal strings that open a new segment (boundary before each occurrence)."""
    discourse_markers: bool = False
    """Also split before the whole words in `DISCOURSE_MARKERS` (case-sensitive)."""
    merge_score: str = "pair_entropy_sum"
    """One of `MERGE_SCORES`: pair_entropy_sum (sum of H over both segments) | boundary_entropy
    (H of the right segment's first token)."""
    topq: float = 0.05
    """`entropy_topq` without K: ⌊topq·T⌋ boundaries (at most T−1), before the highest-H tokens.
    0.05 is a reconstruction default (about one boundary per 20 tokens)."""
    prob_threshold: float = 0.9
    """`low_prob_cutpoints` without K: a boundary before every token with π < prob_threshold.
    0.9 is a reconstruction default in the spirit of SPO's cutpoints, not a value from a paper."""

    def __post_init__(self) -> None:
        _check_choice("strategy", self.strategy, STRATEGIES)
        _check_choice("merge_score", self.merge_score, MERGE_SCORES)
        k = self.num_segments
        if k is None:
            if self.strategy in ("fixed", "hybrid"):
                raise ValueError(
                    f"segmentation.num_segments: None is not allowed for strategy "
                    f"{self.strategy!r}; give an integer ≥ 1"
                )
        elif isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
            raise ValueError(
                f"segmentation.num_segments: expected an integer ≥ 1 or None, got {k!r}"
            )
        else:
            object.__setattr__(self, "num_segments", int(k))
        object.__setattr__(self, "keywords", _check_keywords(self.keywords))
        if not isinstance(self.discourse_markers, bool):
            raise ValueError(
                f"segmentation.discourse_markers: expected true or false, got "
                f"{self.discourse_markers!r}"
            )
        _check_fraction("topq", self.topq, low_open=True, high_closed=False)
        _check_fraction("prob_threshold", self.prob_threshold, low_open=True, high_closed=True)

    @property
    def reads_token_scores(self) -> bool:
        """Whether the strategy reads per-token entropies or log-probs (callers run the
        teacher-forced pass that gives them only then)."""
        return self.strategy in ("hybrid", "entropy_topq", "low_prob_cutpoints")

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> SegmentationConfig:
        """Build from a config mapping (e.g. `config["segmentation"]`); unknown keys are errors."""
        check_known_keys("segmentation", cls, mapping)
        values = dict(mapping)
        if isinstance(values.get("keywords"), list):
            values["keywords"] = tuple(values["keywords"])
        return cls(**values)


def study_segmentation(
    segmentation: Mapping[str, Any], overrides: Mapping[str, Any] | None
) -> SegmentationConfig:
    """The studies' segmentation: the `segmentation` block with `studies.segmentation`'s keys
    on top (None: the block as is)."""
    return SegmentationConfig.from_dict({**segmentation, **(overrides or {})})


def _check_choice(field: str, value: object, registry: Mapping[str, object]) -> None:
    if value not in registry:
        raise ValueError(
            f"segmentation.{field}: {value!r} is not allowed; choose one of {sorted(registry)}"
        )


def _check_keywords(keywords: object) -> tuple[str, ...]:
    if isinstance(keywords, str) or not isinstance(keywords, Sequence):
        raise ValueError(f"segmentation.keywords: expected a list of strings, got {keywords!r}")
    for kw in keywords:
        if not isinstance(kw, str) or not kw:
            raise ValueError(
                f"segmentation.keywords: every keyword must be a non-empty string, got {kw!r}"
            )
    return tuple(keywords)


def _check_fraction(field: str, value: object, *, low_open: bool, high_closed: bool) -> None:
    ok = (
        isinstance(value, Real)
        and not isinstance(value, bool)
        and value > 0
        and (value <= 1 if high_closed else value < 1)
    )
    if not ok:
        interval = "(0, 1]" if high_closed else "(0, 1)"
        raise ValueError(f"segmentation.{field}: expected a number in {interval}, got {value!r}")


# --------------------------------------------------------------------------- input checks


def _as_vector(
    values: object, name: str, num_tokens: int | None = None, *, allow_neg_inf: bool = False
) -> np.ndarray:
    """Per-token values as float64 (T,); NaN, +inf (and −inf unless allowed) are errors."""
    if values is None:
        raise ValueError(f"{name}: required by this strategy, got None")
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or (num_tokens is not None and arr.shape[0] != num_tokens):
        want = "T" if num_tokens is None else str(num_tokens)
        raise ValueError(f"{name}: expected shape ({want},) (one value per token), got {arr.shape}")
    bad = np.isnan(arr) | (arr == np.inf)
    if not allow_neg_inf:
        bad |= arr == -np.inf
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}: token {j} has the non-finite value {arr[j]}")
    return arr


def check_boundaries(boundaries: Sequence[int], num_tokens: int) -> np.ndarray:
    """Boundaries as int64 (K+1,); ValueError unless 0 = b_0 < b_1 < … < b_K = T."""
    b = np.asarray(boundaries)
    if b.ndim != 1 or b.size == 0 or not np.issubdtype(b.dtype, np.integer):
        raise ValueError(f"boundaries: expected a non-empty list of ints, got {boundaries!r}")
    b = b.astype(np.int64)
    if b[0] != 0 or b[-1] != num_tokens:
        raise ValueError(
            f"boundaries: must start at 0 and end at T={num_tokens}, got {b[0]} … {b[-1]}"
        )
    if (np.diff(b) <= 0).any():
        raise ValueError(f"boundaries: must be strictly increasing, got {b.tolist()}")
    return b


def _result(cuts: np.ndarray | Sequence[int], num_tokens: int) -> list[int]:
    """[0] + sorted unique interior cuts (1 … T−1) + [T], as Python ints."""
    interior = np.unique(np.asarray(cuts, dtype=np.int64))
    interior = interior[(interior > 0) & (interior < num_tokens)]
    return [0, *interior.tolist(), num_tokens] if num_tokens > 0 else [0]


def _top_tokens(scores: np.ndarray, count: int) -> np.ndarray:
    """Indices (among 1 … T−1) of the `count` largest scores; ties go to the lowest index."""
    candidates = scores[1:]
    order = np.argsort(-candidates, kind="stable")  # stable: equal scores keep index order
    return order[:count] + 1


# --------------------------------------------------------------------------- keyword split


def _keyword_pattern(keywords: Sequence[str], discourse_markers: bool) -> re.Pattern[str] | None:
    """One alternation, longest literal first, so "\\n\\n" wins over "\\n" at the same place."""
    items = [(kw, re.escape(kw)) for kw in keywords]
    if discourse_markers:
        items += [(m, rf"\b{re.escape(m)}\b") for m in DISCOURSE_MARKERS]
    if not items:
        return None
    items.sort(key=lambda item: -len(item[0]))  # stable: equal lengths keep the given order
    return re.compile("|".join(pattern for _, pattern in items))


def _keyword_char_starts(text: str, pattern: re.Pattern[str] | None) -> list[int]:
    """Character offsets that open a segment: the start of each run of keyword occurrences.

    A piece (from one opening to the next) must hold some non-whitespace text outside keyword
    matches; an occurrence met while the current piece has none joins it instead of opening a new
    one, and a final piece with none is folded into the previous one.
    """
    if pattern is None:
        return []
    starts: list[int] = []
    prev_end = 0
    for match in pattern.finditer(text):
        if _NONSPACE.search(text, prev_end, match.start()) is not None:
            starts.append(match.start())
        prev_end = match.end()
    if starts and _NONSPACE.search(text, prev_end) is None:
        starts.pop()
    return starts


def _token_ends(token_texts: Sequence[str]) -> np.ndarray:
    """Cumulative character end of each token in the concatenated response (one pass)."""
    lengths = np.fromiter((len(t) for t in token_texts), dtype=np.int64, count=len(token_texts))
    return np.cumsum(lengths)


def _snap_to_tokens(char_starts: Sequence[int], token_ends: np.ndarray) -> np.ndarray:
    """Token index holding each character offset (a keyword starting mid-token → that token)."""
    return np.searchsorted(token_ends, np.asarray(char_starts, dtype=np.int64), side="right")


def _drop_blank_segments(cuts: np.ndarray, text: str, token_ends: np.ndarray) -> list[int]:
    """Boundaries without whitespace-only segments: snapping can move a line's only text into the
    next segment (tokens "\\n", "b\\n"); such a segment joins the next one (the last joins the
    previous one). One regex probe per boundary, not per token."""
    num_tokens = len(token_ends)
    char_start = np.concatenate(([0], token_ends))  # character offset where token j starts

    def has_text(first: int, stop: int) -> bool:
        return _NONSPACE.search(text, int(char_start[first]), int(char_start[stop])) is not None

    kept = [0]
    for b in _result(cuts, num_tokens)[1:-1]:
        if has_text(kept[-1], b):
            kept.append(b)
    if len(kept) > 1 and not has_text(kept[-1], num_tokens):
        kept.pop()
    return [*kept, num_tokens] if num_tokens > 0 else kept


def _keyword_split(
    token_texts: Sequence[str], keywords: Sequence[str], discourse_markers: bool
) -> np.ndarray:
    """Boundaries (int64) of the plain keyword split, before any count fitting."""
    text = "".join(token_texts)
    starts = _keyword_char_starts(text, _keyword_pattern(keywords, discourse_markers))
    ends = _token_ends(token_texts)
    return np.asarray(_drop_blank_segments(_snap_to_tokens(starts, ends), text, ends), np.int64)


# --------------------------------------------------------------------------- strategies


def keyword_boundaries(
    token_texts: Sequence[str],
    *,
    keywords: Sequence[str] = KEYWORDS,
    discourse_markers: bool = False,
    num_segments: int | None = None,
) -> list[int]:
    """Boundary before every keyword run (see the module docstring for snapping and runs).

    `num_segments` None keeps every keyword boundary; an integer K fits the split to exactly K
    segments without entropy (merge the shortest adjacent pair / split the longest segment).
    """
    bounds = _keyword_split(token_texts, keywords, discourse_markers)
    if num_segments is None:
        return bounds.tolist()
    return fit_count(bounds, num_segments, *token_count())


def fixed_boundaries(num_tokens: int, *, num_segments: int = 4) -> list[int]:
    """K segments of nearly equal size: b_k = ⌊k·T/K⌋ (sizes differ by at most one)."""
    if num_tokens < num_segments:
        return all_tokens(num_tokens)
    return [k * num_tokens // num_segments for k in range(num_segments + 1)]


def entropy_topq_boundaries(
    entropies: np.ndarray, *, num_segments: int | None = None, topq: float = 0.05
) -> list[int]:
    """Boundaries before the highest-entropy tokens (decision points), token 0 excluded.

    With K: exactly the K−1 highest. Without: ⌊topq·T⌋ of them (at most T−1).
    """
    h = _as_vector(entropies, "entropies")
    num_tokens = h.shape[0]
    if num_segments is not None and num_tokens < num_segments:
        return all_tokens(num_tokens)
    count = num_segments - 1 if num_segments is not None else int(math.floor(topq * num_tokens))
    return _result(_top_tokens(h, min(count, max(num_tokens - 1, 0))), num_tokens)


def low_prob_boundaries(
    logprobs: np.ndarray, *, num_segments: int | None = None, prob_threshold: float = 0.9
) -> list[int]:
    """SPO-style cutpoints: boundaries before low-probability tokens, token 0 excluded.

    Without K: every token with π_j < prob_threshold (log π_j < log prob_threshold).
    With K: the K−1 lowest-probability tokens.
    """
    lp = _as_vector(logprobs, "logprobs", allow_neg_inf=True)
    num_tokens = lp.shape[0]
    if num_segments is None:
        return _result(np.flatnonzero(lp < math.log(prob_threshold)), num_tokens)
    if num_tokens < num_segments:
        return all_tokens(num_tokens)
    return _result(_top_tokens(-lp, num_segments - 1), num_tokens)


def hybrid_boundaries(
    token_texts: Sequence[str],
    entropies: np.ndarray,
    *,
    num_segments: int = 4,
    keywords: Sequence[str] = KEYWORDS,
    discourse_markers: bool = False,
    merge_score: str = "pair_entropy_sum",
) -> list[int]:
    """RREDCoT's hybrid keyword–entropy split (METHOD.md §2.3).

    Keyword split, then while S > K merge the adjacent pair with the lowest merge score
    (`pair_entropy_sum`: Σ H over both segments; `boundary_entropy`: H of the right segment's first
    token); while S < K split by the same score's inverse (module docstring).
    """
    _check_choice("merge_score", merge_score, MERGE_SCORES)
    h = _as_vector(entropies, "entropies", len(token_texts))
    bounds = _keyword_split(token_texts, keywords, discourse_markers)
    return fit_count(bounds, num_segments, *MERGE_SCORES[merge_score](h))


Strategy = Callable[[Sequence[str], Any, Any, SegmentationConfig], list[int]]


def _run_keyword(texts: Sequence[str], entropies: Any, logprobs: Any, cfg: SegmentationConfig):
    return keyword_boundaries(
        texts,
        keywords=cfg.keywords,
        discourse_markers=cfg.discourse_markers,
        num_segments=cfg.num_segments,
    )


def _run_fixed(texts: Sequence[str], entropies: Any, logprobs: Any, cfg: SegmentationConfig):
    return fixed_boundaries(len(texts), num_segments=cfg.num_segments)


def _run_topq(texts: Sequence[str], entropies: Any, logprobs: Any, cfg: SegmentationConfig):
    h = _as_vector(entropies, "entropies", len(texts))
    return entropy_topq_boundaries(h, num_segments=cfg.num_segments, topq=cfg.topq)


def _run_low_prob(texts: Sequence[str], entropies: Any, logprobs: Any, cfg: SegmentationConfig):
    lp = _as_vector(logprobs, "logprobs", len(texts), allow_neg_inf=True)
    return low_prob_boundaries(lp, num_segments=cfg.num_segments, prob_threshold=cfg.prob_threshold)


def _run_hybrid(texts: Sequence[str], entropies: Any, logprobs: Any, cfg: SegmentationConfig):
    return hybrid_boundaries(
        texts,
        entropies,
        num_segments=cfg.num_segments,
        keywords=cfg.keywords,
        discourse_markers=cfg.discourse_markers,
        merge_score=cfg.merge_score,
    )


STRATEGIES: dict[str, Strategy] = {
    "keyword": _run_keyword,
    "fixed": _run_fixed,
    "entropy_topq": _run_topq,
    "low_prob_cutpoints": _run_low_prob,
    "hybrid": _run_hybrid,
}


def schema_fragments() -> dict[str, list[str]]:
    """The parts of the config schema that list segmentation's names, built from
    `STRATEGIES` and `SegmentationConfig`'s fields (`rredcot.config.load_schema` puts them in
    place), so a new strategy or key needs no second list."""
    return {
        "strategies": list(STRATEGIES),
        "keys": [f.name for f in dataclasses.fields(SegmentationConfig)],
    }


def segment(
    token_texts: Sequence[str],
    entropies: np.ndarray | None = None,
    logprobs: np.ndarray | None = None,
    config: SegmentationConfig | None = None,
) -> list[int]:
    """Boundaries [0 = b_0 < … < b_K = T] of one response under `config` (default: hybrid, K=4).

    token_texts: each token's decoded text (concatenated: the response), length T.
    entropies: (T,) H_j of the distribution that produced token j (entropy_topq, hybrid).
    logprobs: (T,) log π(z_j | x, z_{<j}) (low_prob_cutpoints).
    """
    cfg = SegmentationConfig() if config is None else config
    if isinstance(token_texts, str):
        raise ValueError("token_texts: expected a sequence of str (one per token), got one str")
    return STRATEGIES[cfg.strategy](token_texts, entropies, logprobs, cfg)


# --------------------------------------------------------------------------- per-segment views


def segment_texts(token_texts: Sequence[str], boundaries: Sequence[int]) -> list[str]:
    """The text of each segment; "".join(result) is the response text."""
    b = check_boundaries(boundaries, len(token_texts)).tolist()
    return ["".join(token_texts[start:end]) for start, end in zip(b[:-1], b[1:], strict=True)]


def segment_of_char(token_texts: Sequence[str], boundaries: Sequence[int], char_offset: int) -> int:
    """Index k (0-based) of the segment holding character `char_offset` of the response text.

    Used to find the segment containing the first erroneous step (METHOD.md §5). A character
    belongs to the token whose text contains it (empty tokens hold no character).
    """
    b = check_boundaries(boundaries, len(token_texts))
    ends = _token_ends(token_texts)
    length = int(ends[-1]) if len(ends) else 0
    if isinstance(char_offset, bool) or not isinstance(char_offset, Integral):
        raise ValueError(f"char_offset: expected an int, got {char_offset!r}")
    if not 0 <= char_offset < length:
        raise ValueError(
            f"char_offset: {char_offset} is outside the response text (0 … {length - 1})"
        )
    token = int(np.searchsorted(ends, char_offset, side="right"))
    return int(np.searchsorted(b, token, side="right")) - 1


def segment_entropy_summary(
    entropies: np.ndarray, boundaries: Sequence[int]
) -> dict[str, list[float] | list[int]]:
    """Per segment: token count and Σ, mean, max of H over its tokens (lists of length K)."""
    h = np.asarray(entropies, dtype=np.float64)
    if h.ndim != 1:
        raise ValueError(f"entropies: expected shape (T,), got {h.shape}")
    b = check_boundaries(boundaries, h.shape[0])
    if b.size == 1:
        return {"num_tokens": [], "entropy_sum": [], "entropy_mean": [], "entropy_max": []}
    counts = np.diff(b)  # (K,)
    sums = np.add.reduceat(h, b[:-1])  # (K,) segments are non-empty, so reduceat is exact
    return {
        "num_tokens": counts.tolist(),
        "entropy_sum": sums.tolist(),
        "entropy_mean": (sums / counts).tolist(),
        "entropy_max": np.maximum.reduceat(h, b[:-1]).tolist(),
    }
