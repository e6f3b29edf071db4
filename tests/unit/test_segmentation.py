"""Segmentation (METHOD.md §2): hand-computed boundaries per strategy, properties of all of them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.credit.segment_counts import MERGE_SCORES
from rredcot.credit.segmentation import (
    DISCOURSE_MARKERS,
    STRATEGIES,
    SegmentationConfig,
    check_boundaries,
    entropy_topq_boundaries,
    fixed_boundaries,
    hybrid_boundaries,
    keyword_boundaries,
    low_prob_boundaries,
    segment,
    segment_entropy_summary,
    segment_of_char,
    segment_texts,
)

# --------------------------------------------------------------------------- keyword


def test_keyword_boundary_goes_before_the_newline():
    tokens = ["x=1", "\n", "y=2", "\n", "z=3"]
    assert keyword_boundaries(tokens) == [0, 1, 3, 5]
    assert segment_texts(tokens, [0, 1, 3, 5]) == ["x=1", "\ny=2", "\nz=3"]


def test_synthetic_solution_splits_into_its_step_lines():
    # The synthetic world's byte-level tokens are single characters; one segment per line.
    text = "d=a+b=3+8=1\ne=d*a=1*3=3\nf=e-c=3-2=1\nAnswer: 1."
    tokens = list(text)
    bounds = keyword_boundaries(tokens)
    assert segment_texts(tokens, bounds) == [
        "d=a+b=3+8=1",
        "\ne=d*a=1*3=3",
        "\nf=e-c=3-2=1",
        "\nAnswer: 1.",
    ]
    # The first wrong step's line start, as a character offset, finds its segment.
    assert segment_of_char(tokens, bounds, text.index("f=")) == 2


def test_keyword_starting_inside_a_token_snaps_to_that_token():
    # "\n\n" straddles tokens 1 and 2 and starts inside token 1 -> boundary at token 1's start.
    assert keyword_boundaries(["x", "a\n", "\nb"], keywords=("\n\n",)) == [0, 1, 3]
    # The same keyword starting inside token 0 would give boundary 0, which is b_0 already.
    assert keyword_boundaries(["a\n", "\nb"], keywords=("\n\n",)) == [0, 2]
    assert keyword_boundaries(["a\n", "\nb"]) == [0, 2]


def test_keyword_spanning_tokens_starts_at_its_first_token():
    assert keyword_boundaries(["a", "\n", "\nb"], keywords=("\n\n",)) == [0, 1, 3]
    tokens = ["ok.", " Let", " me see"]  # "Let me" spans tokens 1 and 2
    assert keyword_boundaries(tokens, keywords=(), discourse_markers=True) == [0, 1, 3]


def test_keyword_runs_open_one_segment_and_trailing_runs_none():
    # "\n\n\n" is one run ("\n\n" then "\n"), "\n \n" too (only whitespace between).
    tokens = ["a", "\n", "\n", "\n", "b", "\n", " ", "\n", "c", "\n"]
    assert keyword_boundaries(tokens) == [0, 1, 5, 10]
    assert segment_texts(tokens, [0, 1, 5, 10]) == ["a", "\n\n\nb", "\n \nc\n"]
    # A leading run belongs to the first segment; a response of only keywords has one segment.
    assert keyword_boundaries(["\n\n", "a", "\n", "b"]) == [0, 2, 4]
    assert keyword_boundaries(["\n", "\n", " "]) == [0, 3]


def test_whitespace_only_segments_left_by_snapping_join_the_next():
    # "\n" at char 1 (token 1) and at char 3, inside token 2 "b\n": snapping leaves [1, 2) = "\n".
    tokens = ["a", "\n", "b\n", "c"]
    assert keyword_boundaries(tokens) == [0, 1, 4]
    # A trailing run of keywords alone (here a marker) opens no segment either.
    assert keyword_boundaries(["x", "\n", "So"], discourse_markers=True) == [0, 3]
    assert keyword_boundaries(["x", "\n", "So", " y"], discourse_markers=True) == [0, 1, 4]


def test_discourse_markers_are_whole_words_and_join_a_newline_run():
    tokens = ["Solve", " it.", " So", " x", "\n\n", "Wait", ", y"]
    assert keyword_boundaries(tokens) == [0, 4, 7]
    # "So" matches as a word but not inside "Solve"; "\n\nWait" is one run, one boundary.
    assert keyword_boundaries(tokens, discourse_markers=True) == [0, 2, 4, 7]
    assert "Let me" in DISCOURSE_MARKERS


def test_keyword_with_target_count_merges_shortest_pair_and_splits_longest_middle():
    tokens = ["a", "\nb", "\nc", "c", "c", "\nd"]  # keyword split [0, 1, 2, 5, 6]
    assert keyword_boundaries(tokens) == [0, 1, 2, 5, 6]
    # pair lengths 2 (b1), 4 (b2), 4 (b5): drop b1; then 5 (b2), 4 (b5): drop b5.
    assert keyword_boundaries(tokens, num_segments=3) == [0, 2, 5, 6]
    assert keyword_boundaries(tokens, num_segments=2) == [0, 2, 6]
    # one more segment: split the longest, [2, 5), at its middle token 2 + 3 // 2 = 3.
    assert keyword_boundaries(tokens, num_segments=5) == [0, 1, 2, 3, 5, 6]
    assert keyword_boundaries(tokens, num_segments=9) == [0, 1, 2, 3, 4, 5, 6]


def test_empty_token_texts_hold_no_characters():
    tokens = ["a", "", "\nb", "", "c"]
    assert keyword_boundaries(tokens) == [0, 2, 5]  # the "\n" is in token 2, not the empty one
    assert segment_of_char(tokens, [0, 2, 5], 1) == 1


# --------------------------------------------------------------------------- fixed, entropy, SPO


def test_fixed_equal_counts():
    assert fixed_boundaries(10, num_segments=4) == [0, 2, 5, 7, 10]
    assert fixed_boundaries(8, num_segments=4) == [0, 2, 4, 6, 8]
    assert fixed_boundaries(3, num_segments=5) == [0, 1, 2, 3]
    assert fixed_boundaries(0, num_segments=2) == [0]


def test_entropy_topq_boundaries_before_highest_entropy_tokens():
    h = np.array([9.0, 1.0, 5.0, 3.0, 5.0, 0.0])
    # token 0 is never a boundary; the two 5.0s tie and both are taken.
    assert entropy_topq_boundaries(h, num_segments=3) == [0, 2, 4, 6]
    # K−1 = 1: the tie goes to the lowest index.
    assert entropy_topq_boundaries(h, num_segments=2) == [0, 2, 6]
    # fraction: floor(0.5 * 6) = 3 boundaries.
    assert entropy_topq_boundaries(h, topq=0.5) == [0, 2, 3, 4, 6]
    assert entropy_topq_boundaries(h, topq=0.1) == [0, 6]  # floor(0.6) = 0
    assert entropy_topq_boundaries(h, num_segments=9) == list(range(7))


def test_low_prob_cutpoints():
    p = np.array([0.1, 0.95, 0.5, 0.99, 0.2, 0.5])
    lp = np.log(p)
    assert low_prob_boundaries(lp, prob_threshold=0.9) == [0, 2, 4, 5, 6]
    assert low_prob_boundaries(lp, prob_threshold=0.3) == [0, 4, 6]  # token 0 never
    # K = 3: the two lowest-probability tokens among 1 … 5: 0.2 (4), then 0.5 (2 before 5).
    assert low_prob_boundaries(lp, num_segments=3) == [0, 2, 4, 6]
    assert low_prob_boundaries(np.array([0.0, -np.inf, 0.0]), num_segments=2) == [0, 1, 3]


# --------------------------------------------------------------------------- hybrid

# Keyword split [0, 1, 3, 4, 7]: segments [0,1) [1,3) [3,4) [4,7) with ΣH = 1, 1, 4, 0.75.
HYB_TOKENS = ["a", "\nb", "b", "\nc", "\nd", "d", "d"]
HYB_H = np.array([1.0, 0.5, 0.5, 4.0, 0.25, 0.25, 0.25])


def test_hybrid_pair_entropy_sum_merges_lowest_pair_sum():
    # pair sums at b1, b3, b4: 2, 5, 4.75 -> merge at b1; then 6, 4.75 -> merge at b4.
    assert hybrid_boundaries(HYB_TOKENS, HYB_H, num_segments=4) == [0, 1, 3, 4, 7]
    assert hybrid_boundaries(HYB_TOKENS, HYB_H, num_segments=3) == [0, 3, 4, 7]
    assert hybrid_boundaries(HYB_TOKENS, HYB_H, num_segments=2) == [0, 3, 7]
    assert hybrid_boundaries(HYB_TOKENS, HYB_H, num_segments=1) == [0, 7]


def test_hybrid_boundary_entropy_drops_lowest_entropy_boundary():
    # boundary entropies H[1], H[3], H[4] = 0.5, 4, 0.25 -> drop b4, then b1.
    kw = {"merge_score": "boundary_entropy"}
    assert hybrid_boundaries(HYB_TOKENS, HYB_H, num_segments=3, **kw) == [0, 1, 3, 7]
    assert hybrid_boundaries(HYB_TOKENS, HYB_H, num_segments=2, **kw) == [0, 3, 7]


def test_hybrid_ties_merge_the_leftmost_pair():
    tokens = ["a", "\na", "\na", "\na"]
    h = np.ones(4)
    # pair sums 2, 2, 2 -> b1 goes; then 3 (b2), 2 (b3) -> b3 goes.
    assert hybrid_boundaries(tokens, h, num_segments=2) == [0, 2, 4]
    # boundary entropies all 1 -> b1, then b2 go.
    assert hybrid_boundaries(tokens, h, num_segments=2, merge_score="boundary_entropy") == [0, 3, 4]


def test_hybrid_too_few_keyword_segments_splits_to_reach_k():
    tokens = ["ab", "cd", "ef", "\ng", "h"]  # keyword split [0, 3, 5]
    h = np.array([1.0, 3.0, 2.0, 0.5, 2.5])
    # pair_entropy_sum: largest ΣH segment [0,3) (6) split before token 1 (H=3);
    # then [1,3) (5) beats [3,5) (3): split before token 2.
    assert hybrid_boundaries(tokens, h, num_segments=3) == [0, 1, 3, 5]
    assert hybrid_boundaries(tokens, h, num_segments=4) == [0, 1, 2, 3, 5]
    # boundary_entropy: add the highest-H free tokens: 1 (3.0), then 4 (2.5).
    kw = {"merge_score": "boundary_entropy"}
    assert hybrid_boundaries(tokens, h, num_segments=3, **kw) == [0, 1, 3, 5]
    assert hybrid_boundaries(tokens, h, num_segments=4, **kw) == [0, 1, 3, 4, 5]
    assert hybrid_boundaries(tokens, h, num_segments=6) == [0, 1, 2, 3, 4, 5]
    assert hybrid_boundaries(tokens, h, num_segments=7) == [0, 1, 2, 3, 4, 5]


def test_segment_dispatches_on_config():
    cfg = SegmentationConfig(strategy="hybrid", num_segments=3)
    assert segment(HYB_TOKENS, HYB_H, None, cfg) == [0, 3, 4, 7]
    assert segment(HYB_TOKENS, HYB_H) == [0, 1, 3, 4, 7]  # default: hybrid, K = 4
    cfg = SegmentationConfig(strategy="keyword", num_segments=None)
    assert segment(HYB_TOKENS, config=cfg) == [0, 1, 3, 4, 7]
    cfg = SegmentationConfig(strategy="low_prob_cutpoints", num_segments=2)
    assert segment(HYB_TOKENS, logprobs=-HYB_H, config=cfg) == [0, 3, 7]


# --------------------------------------------------------------------------- per-segment views


def test_segment_of_char_and_texts():
    tokens = ["ab", "\ncd", "e"]
    bounds = [0, 1, 3]
    assert segment_texts(tokens, bounds) == ["ab", "\ncde"]
    assert [segment_of_char(tokens, bounds, c) for c in range(6)] == [0, 0, 1, 1, 1, 1]
    text = "".join(tokens)
    assert segment_of_char(tokens, bounds, text.index("c")) == 1
    for bad in (-1, 6):
        with pytest.raises(ValueError, match="char_offset"):
            segment_of_char(tokens, bounds, bad)


def test_entropy_summary():
    summary = segment_entropy_summary(np.array([1.0, 2.0, 3.0, 4.0]), [0, 1, 4])
    assert summary == {
        "num_tokens": [1, 3],
        "entropy_sum": [1.0, 9.0],
        "entropy_mean": [1.0, 3.0],
        "entropy_max": [1.0, 4.0],
    }
    assert segment_entropy_summary(np.zeros(0), [0])["entropy_sum"] == []


# --------------------------------------------------------------------------- errors


def test_unknown_names_list_the_allowed_ones():
    with pytest.raises(ValueError, match="segmentation.strategy") as err:
        SegmentationConfig(strategy="sentences")
    assert all(name in str(err.value) for name in STRATEGIES)
    with pytest.raises(ValueError, match="segmentation.merge_score") as err:
        SegmentationConfig(merge_score="mean")
    assert all(name in str(err.value) for name in MERGE_SCORES)
    with pytest.raises(ValueError, match="merge_score"):
        hybrid_boundaries(["a"], np.ones(1), merge_score="mean")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_segments": 0}, "num_segments"),
        ({"num_segments": True}, "num_segments"),
        ({"num_segments": 2.0}, "num_segments"),
        ({"num_segments": None}, "num_segments"),  # hybrid needs K
        ({"strategy": "fixed", "num_segments": None}, "num_segments"),
        ({"keywords": "\n"}, "keywords"),
        ({"keywords": ("\n", "")}, "keywords"),
        ({"discourse_markers": "yes"}, "discourse_markers"),
        ({"topq": 0.0}, "topq"),
        ({"topq": 1.0}, "topq"),
        ({"prob_threshold": 1.5}, "prob_threshold"),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"segmentation.{field}"):
        SegmentationConfig(**kwargs)


def test_config_from_dict():
    cfg = SegmentationConfig.from_dict({"strategy": "keyword", "keywords": ["\n"]})
    assert cfg.keywords == ("\n",) and cfg.num_segments == 4
    assert SegmentationConfig(strategy="entropy_topq", num_segments=None).num_segments is None
    with pytest.raises(ValueError, match=r"unknown segmentation key\(s\) \['k'\]"):
        SegmentationConfig.from_dict({"k": 4})


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="entropies: expected shape"):
        segment(["a", "b"], np.ones(3))
    with pytest.raises(ValueError, match="entropies: token 1"):
        segment(["a", "b"], np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="entropies: required"):
        segment(["a", "b"])
    with pytest.raises(ValueError, match="logprobs: token 0"):
        low_prob_boundaries(np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="token_texts"):
        segment("ab", np.ones(2))
    for bad in ([1, 3], [0, 2, 2, 3], [0, 2], [], [0.0, 3.0]):
        with pytest.raises(ValueError, match="boundaries"):
            check_boundaries(bad, 3)


# --------------------------------------------------------------------------- properties

PIECES = ["a", "b", " ", "\n", "\n\n", "x\n", "\nx", "So", "Solve", " Wait", "Let", " me", ""]
token_lists = st.lists(st.sampled_from(PIECES), min_size=0, max_size=40)
values = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 3.5])  # few distinct values: many ties


@st.composite
def responses(draw):
    tokens = draw(token_lists)
    n = len(tokens)
    h = np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64)
    lp = -np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64)
    return tokens, h, lp


@st.composite
def configs(draw):
    strategy = draw(st.sampled_from(sorted(STRATEGIES)))
    options = [None] if strategy not in ("fixed", "hybrid") else []
    k = draw(st.sampled_from([*options, 1, 2, 3, 5, 8]))
    return SegmentationConfig(
        strategy=strategy,
        num_segments=k,
        merge_score=draw(st.sampled_from(sorted(MERGE_SCORES))),
        discourse_markers=draw(st.booleans()),
        topq=draw(st.sampled_from([0.05, 0.3, 0.9])),
        prob_threshold=draw(st.sampled_from([0.3, 0.9, 1.0])),
    )


@settings(max_examples=400, deadline=None)
@given(responses(), configs())
def test_boundaries_are_valid_and_hit_k(response, cfg):
    tokens, h, lp = response
    n = len(tokens)
    bounds = segment(tokens, h, lp, cfg)
    assert all(type(b) is int for b in bounds)
    assert bounds[0] == 0 and bounds[-1] == n
    assert all(a < b for a, b in zip(bounds, bounds[1:], strict=False))
    if cfg.num_segments is not None:
        assert len(bounds) - 1 == min(cfg.num_segments, n)
    assert segment(list(tokens), h.copy(), lp.copy(), cfg) == bounds  # deterministic
    assert "".join(segment_texts(tokens, bounds)) == "".join(tokens)
    summary = segment_entropy_summary(h, bounds)
    assert sum(summary["num_tokens"]) == n
    assert np.isclose(sum(summary["entropy_sum"]), h.sum())


@settings(max_examples=300, deadline=None)
@given(token_lists, st.booleans())
def test_keyword_boundaries_sit_on_keyword_tokens(tokens, markers):
    """Every boundary's token holds the start of a keyword occurrence, and every segment holds
    some non-whitespace text unless the whole response is whitespace."""
    bounds = keyword_boundaries(tokens, discourse_markers=markers)
    text = "".join(tokens)
    keys = ["\n", *(DISCOURSE_MARKERS if markers else ())]
    starts = np.concatenate(([0], np.cumsum([len(t) for t in tokens]))).astype(int)
    for b in bounds[1:-1]:
        chars = range(starts[b], starts[b + 1])
        assert any(text.startswith(k, c) for k in keys for c in chars), (tokens, b)
    pieces = segment_texts(tokens, bounds)
    if text.strip():
        assert all(piece.strip() for piece in pieces), pieces
    else:
        assert len(pieces) == (1 if tokens else 0)


@settings(max_examples=200, deadline=None)
@given(responses(), st.integers(1, 8))
def test_rank_strategies_match_sorting_reference(response, k):
    """entropy_topq / low_prob_cutpoints with K: the K−1 best tokens by (score, index)."""
    tokens, h, lp = response
    n = len(tokens)
    if n < k:
        return
    by_entropy = sorted(range(1, n), key=lambda j: (-h[j], j))[: k - 1]
    by_prob = sorted(range(1, n), key=lambda j: (lp[j], j))[: k - 1]
    assert entropy_topq_boundaries(h, num_segments=k) == [0, *sorted(by_entropy), n]
    assert low_prob_boundaries(lp, num_segments=k) == [0, *sorted(by_prob), n]


def _reference_pair_sum(tokens, h, k):
    """Plain-Python pair_entropy_sum merging, recomputing every sum from scratch."""
    bounds = keyword_boundaries(tokens)
    while len(bounds) - 1 > k:
        costs = [sum(h[bounds[i - 1] : bounds[i + 1]]) for i in range(1, len(bounds) - 1)]
        bounds.pop(costs.index(min(costs)) + 1)
    return bounds


@settings(max_examples=200, deadline=None)
@given(responses(), st.integers(1, 6))
def test_hybrid_merge_matches_plain_python_reference(response, k):
    tokens, h, _ = response
    bounds = keyword_boundaries(tokens)
    if len(bounds) - 1 >= k:  # merging only; splitting is covered by the hand cases
        assert hybrid_boundaries(tokens, h, num_segments=k) == _reference_pair_sum(tokens, h, k)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_reads_token_scores_says_which_strategies_need_the_scoring_pass(strategy):
    # A strategy that reads scores refuses to run without them; the others run on text alone.
    config = SegmentationConfig(strategy=strategy)
    texts = list("a=1\nb=2\nc=3\nd=4\ne=5\n")
    if config.reads_token_scores:
        with pytest.raises(ValueError, match="required by this strategy"):
            segment(texts, None, None, config)
    else:
        assert segment(texts, None, None, config)[-1] == len(texts)
