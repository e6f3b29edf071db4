"""RREDCoT estimator (METHOD.md §3): value variants, Φ/h/σ, continuations, conservativeness."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.credit.redistribution import (
    potential,
    raw_credit,
    redistribute,
    redistribute_batch,
)
from rredcot.credit.rredcot import (
    VALUE_VARIANTS,
    ReferencePath,
    ReferenceScores,
    RREDCoTConfig,
    Trace,
    build_continuations,
    credit_from_scores,
    draw_suffixes,
    join_at_state,
    reads_suffixes,
    rredcot_credit,
    rredcot_credit_batch,
    rredcot_variants_batch,
    split_lines,
    state_kinds,
    value_estimate,
)
from rredcot.credit.rredcot_queries import Columns
from rredcot.credit.segmentation import keyword_boundaries
from rredcot.credit.segmented_trace import SegmentedTrace
from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.scoring.logprobs import sequence_logprob_naive
from rredcot.scoring.packed import encode_traces
from rredcot.tasks import get_task

LOG = math.log

# --------------------------------------------------------------------------- value variants

# Two states (K = 1), J = 2 suffixes. Probabilities chosen so every variant is easy by hand.
#   π(C*_j | s_k):     s_0: C*_0 = 0.1, C*_1 = 0.2     s_1: C*_0 = 0.3, C*_1 = 0.05
#   π(answer | s_k):   s_0: 0.25                       s_1: 0.5
#   π(U* ⊕ A | s_k):   s_0: 0.4                        s_1: 0.6
#   |C*| = 4 tokens
SCORES = ReferenceScores(
    answer_now=torch.tensor([LOG(0.25), LOG(0.5)]),
    suffixes=torch.tensor([[LOG(0.1), LOG(0.2)], [LOG(0.3), LOG(0.05)]]),
    path_prefix=torch.tensor([LOG(0.4), LOG(0.6)]),
    path_num_tokens=4,
)

EXPECTED_V = {
    "ref_suffix_sum": [0.1 + 0.2, 0.3 + 0.05],
    "ref_suffix_max": [0.2, 0.3],
    "ref_path_geomean": [0.1**0.25, 0.3**0.25],  # 0.56234, 0.74008
    "ref_path_joint": [0.1, 0.3],
    "ref_answer_after_path": [0.1 / 0.4, 0.3 / 0.6],  # 0.25, 0.5
    "ref_path_ratio": [0.0, LOG(0.3 / 0.1)],  # log 3 = 1.09861
}


def test_every_variant_has_a_hand_computed_case():
    assert set(EXPECTED_V) == set(VALUE_VARIANTS)


@pytest.mark.parametrize("variant", sorted(EXPECTED_V))
def test_value_variant_matches_hand_computation(variant):
    v_hat = value_estimate(variant, SCORES)
    assert v_hat.dtype == torch.float64
    assert v_hat.shape == (2,)
    torch.testing.assert_close(v_hat, torch.tensor(EXPECTED_V[variant], dtype=torch.float64))


def test_suffix_sum_is_stable_when_every_probability_underflows():
    # π = e^-800 each: exp would underflow term by term, logsumexp keeps the sum at 2·e^-800 = 0
    # in float64 (no NaN), and e^-700·2 stays representable.
    scores = ReferenceScores(
        answer_now=torch.tensor([-1.0, -1.0]),
        suffixes=torch.tensor([[-700.0, -700.0], [-800.0, -float("inf")]]),
    )
    v_hat = value_estimate("ref_suffix_sum", scores)
    assert v_hat[0].item() == pytest.approx(2 * math.exp(-700), rel=1e-12)
    assert v_hat[1].item() == 0.0


def test_answer_now_reward_and_potential_of_the_default():
    r_hat, v_hat, phi, h, sigma = credit_from_scores(SCORES, 1.0, RREDCoTConfig())
    torch.testing.assert_close(r_hat, torch.tensor([0.25, 0.5], dtype=torch.float64))
    # Φ = R̂ + Σ_j π(C*_j): [0.25 + 0.3, 0.5 + 0.35] = [0.55, 0.85]; h = 0.3;
    # σ_K = h_K + (R − Φ_K) = 0.3 + 0.15 = 0.45 = R − Φ_0.
    torch.testing.assert_close(phi, torch.tensor([0.55, 0.85], dtype=torch.float64))
    torch.testing.assert_close(h, torch.tensor([0.3], dtype=torch.float64))
    torch.testing.assert_close(sigma, torch.tensor([0.45], dtype=torch.float64))


def test_unknown_variant_lists_the_names():
    with pytest.raises(ValueError, match="ref_suffix_sum.*ref_path_ratio"):
        value_estimate("ref_whatever", SCORES)


def test_variants_that_need_extra_inputs_say_which():
    bare = ReferenceScores(answer_now=SCORES.answer_now, suffixes=SCORES.suffixes)
    with pytest.raises(ValueError, match="path_prefix"):
        value_estimate("ref_answer_after_path", bare)
    with pytest.raises(ValueError, match="path_num_tokens"):
        value_estimate("ref_path_geomean", bare)


def test_geomean_accepts_a_per_state_token_count():
    scores = ReferenceScores(
        answer_now=SCORES.answer_now, suffixes=SCORES.suffixes, path_num_tokens=torch.tensor([4, 2])
    )
    torch.testing.assert_close(
        value_estimate("ref_path_geomean", scores),
        torch.tensor([0.1**0.25, 0.3**0.5], dtype=torch.float64),
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"answer_now": torch.zeros(2, 1)}, "answer_now"),
        ({"suffixes": torch.zeros(3, 2)}, "suffixes"),
        ({"suffixes": torch.zeros(2, 0)}, "suffixes"),
        ({"suffixes": torch.tensor([[0.5, -1.0], [-1.0, -1.0]])}, "suffixes"),
        ({"answer_now": torch.tensor([float("nan"), -1.0])}, "answer_now"),
        ({"path_prefix": torch.zeros(3)}, "path_prefix"),
        ({"path_num_tokens": 0}, "path_num_tokens"),
        ({"path_num_tokens": True}, "path_num_tokens"),
    ],
)
def test_reference_scores_refuse_bad_tables(kwargs, field):
    base = {"answer_now": torch.tensor([-1.0, -1.0]), "suffixes": torch.full((2, 2), -1.0)}
    with pytest.raises(ValueError, match=field):
        ReferenceScores(**{**base, **kwargs})


# --------------------------------------------------------------------------- Φ, h, σ


def test_potential_weights():
    # Φ = 2·[0.1, 0.2] + 0.5·[0.4, 0.6] = [0.4, 0.7]
    phi = potential([0.1, 0.2], [0.4, 0.6], w_R=2.0, w_v=0.5)
    torch.testing.assert_close(phi, torch.tensor([0.4, 0.7], dtype=torch.float64))


def test_potential_refuses_mismatched_or_infinite_inputs():
    with pytest.raises(ValueError, match="r_hat/v_hat"):
        potential([0.1, 0.2], [0.4])
    with pytest.raises(ValueError, match="v_hat"):
        potential([0.1, 0.2], [0.4, -float("inf")])


PHI = [0.2, 0.5, 0.4, 0.9]  # h = [0.3, −0.1, 0.5], Σh = 0.7


def test_raw_credit_is_the_potential_difference():
    torch.testing.assert_close(raw_credit(PHI), torch.tensor([0.3, -0.1, 0.5], dtype=torch.float64))


def test_terminal_correction_by_hand():
    # σ = [0.3, −0.1, 0.5 + (1 − 0.9)] = [0.3, −0.1, 0.6]; Σσ = 0.8 = R − Φ_0
    sigma = redistribute(PHI, 1.0)
    torch.testing.assert_close(sigma, torch.tensor([0.3, -0.1, 0.6], dtype=torch.float64))
    # R = 0: σ_K = 0.5 − 0.9 = −0.4
    sigma0 = redistribute(PHI, 0.0)
    torch.testing.assert_close(sigma0, torch.tensor([0.3, -0.1, -0.4], dtype=torch.float64))


def test_rescale_by_hand():
    # σ = h · R / Σh = [0.3, −0.1, 0.5] / 0.7
    sigma = redistribute(PHI, 1.0, mode="rescale")
    torch.testing.assert_close(sigma, torch.tensor([3 / 7, -1 / 7, 5 / 7], dtype=torch.float64))
    assert redistribute(PHI, 0.0, mode="rescale").abs().max().item() == 0.0


def test_rescale_falls_back_to_terminal_correction_when_the_potential_does_not_move():
    # Φ = [0.3, 0.5, 0.3]: Σh = 0 → σ = [0.2, −0.2 + (1 − 0.3)] = [0.2, 0.5]
    sigma = redistribute([0.3, 0.5, 0.3], 1.0, mode="rescale")
    torch.testing.assert_close(sigma, torch.tensor([0.2, 0.5], dtype=torch.float64))
    # |Σh| = 1e-9 ≤ eps = 1e-8 falls back too; with eps = 0 it rescales.
    phi = [0.3, 0.3 + 1e-9]
    assert redistribute(phi, 1.0, mode="rescale").item() == pytest.approx(1.0 - 0.3)
    assert redistribute(phi, 1.0, mode="rescale", eps=0.0).item() == pytest.approx(1.0)


def test_redistribute_refuses_bad_arguments():
    with pytest.raises(ValueError, match="mode.*terminal_correction"):
        redistribute(PHI, 1.0, mode="spread")
    with pytest.raises(ValueError, match="phi"):
        redistribute([0.3], 1.0)
    with pytest.raises(ValueError, match="R"):
        redistribute(PHI, float("nan"))
    with pytest.raises(ValueError, match="eps"):
        redistribute(PHI, 1.0, eps=-1.0)


def test_redistribute_batch_handles_traces_of_different_length():
    out = redistribute_batch([PHI, [0.55, 0.85]], [1.0, 1.0])
    assert [s.shape[0] for s in out] == [3, 1]
    torch.testing.assert_close(out[1], torch.tensor([0.45], dtype=torch.float64))
    with pytest.raises(ValueError, match="phis/returns"):
        redistribute_batch([PHI], [1.0, 0.0])


_phis = st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=20)
_returns = st.floats(-5, 5, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(phi=_phis, R=_returns)
def test_terminal_correction_sums_to_return_minus_phi0(phi, R):  # noqa: N803
    sigma = redistribute(phi, R)
    h = raw_credit(phi)
    assert sigma.sum().item() == pytest.approx(R - phi[0], abs=1e-9)
    torch.testing.assert_close(sigma[:-1], h[:-1])  # only the last segment is corrected
    assert sigma[-1].item() == pytest.approx(R - phi[-2], abs=1e-9)  # Φ_K cancels


@settings(max_examples=200, deadline=None)
@given(phi=_phis, R=_returns)
def test_rescale_sums_to_the_return_when_the_potential_moves(phi, R):  # noqa: N803
    sigma = redistribute(phi, R, mode="rescale", eps=1e-3)
    total_h = phi[-1] - phi[0]
    if abs(total_h) > 1e-3:
        assert sigma.sum().item() == pytest.approx(R, abs=1e-6)
        # proportional to h: same signs wherever h is clearly non-zero
        h = raw_credit(phi)
        ratio = R / total_h
        torch.testing.assert_close(sigma, h * ratio)
    else:
        assert sigma.sum().item() == pytest.approx(R - phi[0], abs=1e-9)


# --------------------------------------------------------------------------- config


def test_config_defaults_follow_method():
    cfg = RREDCoTConfig()
    assert (cfg.value, cfg.w_R, cfg.w_v) == ("ref_suffix_sum", 1.0, 1.0)
    assert cfg.return_equivalence == "terminal_correction"
    assert cfg.end_with_eos is True and cfg.join == "line" and cfg.suffixes == "all"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("value", "mc"),
        ("w_R", "1"),
        ("w_v", float("inf")),
        ("return_equivalence", "spread"),
        ("eps", -1.0),
        ("end_with_eos", 1),
        ("join", "space"),
        ("answer_now", "both"),
        ("max_tokens_per_pass", 0),
        ("layout", "tree"),
        ("suffixes", 0),
        ("suffixes", "some"),
        ("suffixes", True),
        ("suffixes", 1.5),
    ],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"estimator.rredcot.{field}"):
        RREDCoTConfig(**{field: value})


def test_sampled_suffixes_only_for_the_suffix_sum():
    assert RREDCoTConfig(suffixes=2).suffixes == 2
    with pytest.raises(ValueError, match="suffixes.*ref_suffix_max"):
        RREDCoTConfig(value="ref_suffix_max", suffixes=1)


# --------------------------------------------------------------------------- sampled suffixes

# K+1 = 3 states, J = 4 suffixes; log π(C*_j | s_k) by hand, one suffix impossible (−inf).
TABLE = torch.tensor(
    [
        [LOG(0.01), LOG(0.02), LOG(0.05), LOG(0.1)],
        [LOG(0.03), LOG(0.2), -math.inf, LOG(0.15)],
        [LOG(0.3), LOG(0.25), LOG(0.1), LOG(0.02)],
    ],
    dtype=torch.float64,
)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_sampled_suffix_sum_is_unbiased_by_enumeration(m):
    """E_S[(J/m)·Σ_{j∈S} π(C*_j | s_k)] over all m-subsets S (each equally likely under a
    uniform draw without replacement) is exactly Σ_j π(C*_j | s_k), at every state."""
    answer = torch.full((3,), LOG(0.5), dtype=torch.float64)
    full = value_estimate("ref_suffix_sum", ReferenceScores(answer, TABLE))
    subsets = list(itertools.combinations(range(4), m))
    estimates = torch.stack(
        [
            value_estimate(
                "ref_suffix_sum",
                ReferenceScores(answer, TABLE[:, list(s)], suffix_weight=4 / m),
            )
            for s in subsets
        ]
    )  # (subsets, K+1)
    torch.testing.assert_close(estimates.mean(0), full, atol=1e-15, rtol=1e-12)
    torch.testing.assert_close(full, torch.tensor([0.18, 0.38, 0.67], dtype=torch.float64))
    if m < 4:  # the check has power: single draws miss the sum by a lot
        assert (estimates - full).abs().max() > 0.1


def test_draw_suffixes_is_uniform_seeded_and_complete_when_m_reaches_j():
    assert draw_suffixes(3, 3, random.Random(0)) == (0, 1, 2)
    assert draw_suffixes(3, 7, random.Random(0)) == (0, 1, 2)
    a = [draw_suffixes(5, 2, random.Random(f"s/{i}")) for i in range(2000)]
    assert a == [draw_suffixes(5, 2, random.Random(f"s/{i}")) for i in range(2000)]
    assert all(len(s) == 2 and s[0] < s[1] for s in a)
    counts = np.bincount([j for s in a for j in s], minlength=5) / len(a)
    np.testing.assert_allclose(counts, 2 / 5, atol=0.04)  # P(j ∈ S) = m/J


def test_reference_scores_refuse_a_weight_below_one():
    with pytest.raises(ValueError, match="suffix_weight"):
        ReferenceScores(torch.zeros(2), torch.zeros(2, 1), suffix_weight=0.5)


def test_config_from_dict_refuses_unknown_keys():
    assert RREDCoTConfig.from_dict({"value": "ref_suffix_max"}).value == "ref_suffix_max"
    with pytest.raises(ValueError, match="unknown estimator.rredcot key.*'w_x'"):
        RREDCoTConfig.from_dict({"w_x": 1.0})


# --------------------------------------------------------------------------- reference path

SOLUTION = "d=a+b=3+8=1\ne=d*a=1*3=3\nf=e-c=3-2=1\nAnswer: 1."
ROW = {"id": "p0", "problem": "a=3, b=8, c=2. d=a+b. e=d*a. f=e-c. Find f.", "answer": "1"}
ROW["solution"] = SOLUTION


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("a\nb\nc", ["a\n", "b\n", "c"]),
        ("a\n\nb\nc\n", ["a\n\n", "b\n", "c\n"]),
        ("\n\na\nb", ["\n\na\n", "b"]),
        ("one line", ["one line"]),
        ("\n \n", ["\n \n"]),
    ],
)
def test_split_lines_keeps_each_newline_with_its_line(text, segments):
    assert split_lines(text) == segments
    assert "".join(segments) == text


def test_reference_path_from_a_synthetic_row():
    ref = ReferencePath.from_row(get_task("synthetic"), ROW)
    assert ref.segments == ("d=a+b=3+8=1\n", "e=d*a=1*3=3\n", "f=e-c=3-2=1")
    assert ref.answer == "1" and ref.num_segments == 3
    assert ref.reasoning == "d=a+b=3+8=1\ne=d*a=1*3=3\nf=e-c=3-2=1"


def test_reference_path_refuses_bad_segments():
    with pytest.raises(ValueError, match="concatenation"):
        ReferencePath.from_text("ab\ncd", "1", segments=["ab\n", "c"])
    with pytest.raises(ValueError, match="entries \\[1\\]"):
        ReferencePath(("ab", ""), "1")
    with pytest.raises(ValueError, match="answer"):
        ReferencePath(("ab",), " ")
    with pytest.raises(ValueError, match="at least one segment"):
        ReferencePath((), "1")


@pytest.mark.parametrize(
    ("text", "kind", "rule", "joined"),
    [
        ("\nAnswer: ", "newline", "line", "Answer: "),  # no blank line after the prompt's "\n"
        ("\nAnswer: ", "line_end", "line", "\nAnswer: "),
        ("f=e-c\n", "line_end", "line", "\nf=e-c\n"),  # a step line starts on its own line
        ("f=e-c\n", "newline", "line", "f=e-c\n"),
        ("\n\nFinal answer: ", "newline", "line", "\nFinal answer: "),  # one paragraph break
        ("\nAnswer: ", "mid_line", "line", "Answer: "),  # no newline forced into a step
        ("f=e-c", "mid_line", "line", "f=e-c"),
        ("\nAnswer: ", "newline", "verbatim", "\nAnswer: "),
        ("f=e-c", "line_end", "verbatim", "f=e-c"),
    ],
)
def test_join_at_state(text, kind, rule, joined):
    assert join_at_state(text, kind, rule) == joined


def test_join_at_state_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="state kind"):
        join_at_state("x", True, "line")  # type: ignore[arg-type]


def test_state_kinds(tokenizer):
    prompt = tokenizer("a=1.\n")["input_ids"]
    response = tokenizer("d=a+b=3\ne=d*a=1")["input_ids"]
    # s_0 ends with the prompt's "\n"; b=7 ends the first line; b=3 and b=12 cut inside a line;
    # b=T is the end of the response
    assert state_kinds(tokenizer, prompt, response, [0, 3, 7, 8, 12, len(response)]) == [
        "newline",
        "mid_line",
        "line_end",
        "newline",
        "mid_line",
        "line_end",
    ]


@pytest.fixture(scope="module")
def tokenizer():
    return build_byte_tokenizer()


def test_continuations_after_the_prompt_reproduce_the_solution(tokenizer):
    # At s_0 (the prompt ends with "\n") C*_0 is exactly the SFT target: prompt ⊕ solution ⊕ EOS.
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    conts = build_continuations(task, ref, tokenizer, state_kind="newline")
    eos = tokenizer.eos_token_id
    assert conts.texts == [
        "Answer: 1.",
        SOLUTION,
        "e=d*a=1*3=3\nf=e-c=3-2=1\nAnswer: 1.",
        "f=e-c=3-2=1\nAnswer: 1.",
    ]
    for ids, text in zip([conts.answer_now, *conts.suffixes], conts.texts, strict=True):
        assert ids[-1] == eos and eos not in ids[:-1]
        assert tokenizer.decode(ids[:-1]) == text
    assert conts.path_prefix is None
    assert len(conts.all_ids()) == 1 + 3


def test_continuations_after_a_step_line_start_with_the_newline(tokenizer):
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    conts = build_continuations(task, ref, tokenizer, state_kind="line_end", with_path_prefix=True)
    assert conts.texts == [
        "\nAnswer: 1.",
        "\n" + SOLUTION,
        "\ne=d*a=1*3=3\nf=e-c=3-2=1\nAnswer: 1.",
        "\nf=e-c=3-2=1\nAnswer: 1.",
        "\nd=a+b=3+8=1\ne=d*a=1*3=3\nf=e-c=3-2=1\nAnswer: ",
    ]
    # U* ⊕ A is a token prefix of C*_0; what is left is y* ⊕ close ⊕ EOS.
    rest = conts.suffixes[0][len(conts.path_prefix) :]
    assert rest == tokenizer("1.")["input_ids"] + [tokenizer.eos_token_id]
    assert len(conts.all_ids()) == 1 + 3 + 1


def test_continuations_without_eos_and_verbatim(tokenizer):
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    conts = build_continuations(
        task, ref, tokenizer, end_with_eos=False, state_kind="newline", join="verbatim"
    )
    assert conts.texts[0] == "\nAnswer: 1."
    assert conts.answer_now == tokenizer("\nAnswer: 1.")["input_ids"]


# --------------------------------------------------------------------------- toy policy

# A tabular policy over 4 symbols + EOS (id 4) whose next-token distribution depends on the
# position and the previous token; at position L only EOS is possible. A response is correct
# (r = 1) when its tokens before EOS end with the answer ANSWER = A ⊕ y* ⊕ close = [3, 1, 2].
# Every EOS-terminated sequence up to length L can be enumerated, so V(s) is exact.
EOS, VOCAB, L = 4, 5, 8
ANSWER = (3, 1, 2)


def toy_policy(seed: int, scale: float) -> np.ndarray:
    """log π(v | position, previous token): (L+1, VOCAB, VOCAB); previous = 4 at position 0."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, scale, size=(L + 1, VOCAB, VOCAB))
    log_pi = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    log_pi[L] = -np.inf
    log_pi[L, :, EOS] = 0.0  # forced stop at the length limit
    return log_pi


def seq_logprob(log_pi: np.ndarray, state: tuple[int, ...], cont: tuple[int, ...]) -> float:
    """log π(cont | state) under the tabular policy (−inf past the length limit)."""
    total, seq = 0.0, list(state)
    for tok in cont:
        pos = len(seq)
        if pos > L:
            return -math.inf
        prev = seq[-1] if seq else EOS
        total += log_pi[pos, prev, tok]
        seq.append(tok)
    return total


def exact_value(log_pi: np.ndarray, state: tuple[int, ...]) -> tuple[float, float]:
    """(V(s), total mass): Σ over every EOS-terminated continuation c of π(c | s)·r(s ⊕ c)."""
    value = mass = 0.0
    for n in range(L - len(state) + 1):
        for body in itertools.product(range(EOS), repeat=n):
            p = math.exp(seq_logprob(log_pi, state, (*body, EOS)))
            full = (*state, *body)
            mass += p
            value += p * (full[-len(ANSWER) :] == ANSWER)
    return value, mass


def toy_scores(log_pi, states, segments, end_with_eos=True) -> ReferenceScores:
    """The RREDCoT log-prob tables of the toy reference at each state."""
    tail = (*ANSWER, EOS) if end_with_eos else ANSWER
    suffixes = [tuple(t for seg in segments[j:] for t in seg) + tail for j in range(len(segments))]
    return ReferenceScores(
        answer_now=torch.tensor([seq_logprob(log_pi, s, tail) for s in states]),
        suffixes=torch.tensor([[seq_logprob(log_pi, s, c) for c in suffixes] for s in states]),
    )


# A trace x ⊕ τ = [0] ⊕ [2, 1, 0] with boundaries [0, 1, 2, 3]; U* = [1][0] (J = 2).
STATES = [(0,), (0, 2), (0, 2, 1), (0, 2, 1, 0)]
SEGMENTS = [(1,), (0,)]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.5, 3.0))
def test_reference_estimates_never_exceed_the_true_value(seed, scale):
    log_pi = toy_policy(seed, scale)
    scores = toy_scores(log_pi, STATES, SEGMENTS)
    r_hat = scores.answer_now.exp()
    lower_bounds = {
        "ref_path_joint": value_estimate("ref_path_joint", scores),
        "ref_suffix_max": value_estimate("ref_suffix_max", scores),
        "ref_suffix_sum": value_estimate("ref_suffix_sum", scores),
        # Φ = R̂ + Σ_j π(C*_j) = Σ_{j=0..J} π(C*_j): disjoint EOS-terminated correct responses
        "phi": potential(r_hat, value_estimate("ref_suffix_sum", scores)),
    }
    for k, state in enumerate(STATES):
        value, mass = exact_value(log_pi, state)
        assert mass == pytest.approx(1.0, abs=1e-9)  # the enumeration is complete
        assert value > 0
        for name, estimate in lower_bounds.items():
            assert estimate[k].item() <= value + 1e-12, (name, k)


def test_the_suffix_sum_is_exact_when_the_policy_only_follows_the_reference():
    # From the prompt [0] the policy picks C*_0 = 1 0 3 1 2 (0.5), C*_1 = 0 3 1 2 (0.25) or the
    # bare answer 3 1 2 (0.25), then follows it deterministically to EOS. Every correct response
    # is a reference suffix, so Φ = Σ_{j=0..J} π(C*_j | s_0) = 0.5 + 0.25 + 0.25 = V(s_0) = 1.
    log_pi = np.full((L + 1, VOCAB, VOCAB), -np.inf)
    log_pi[L, :, EOS] = 0.0
    log_pi[1, 0, [1, 0, 3]] = [LOG(0.5), LOG(0.25), LOG(0.25)]
    paths = [(1, 0, 3, 1, 2, EOS), (0, 3, 1, 2, EOS), (3, 1, 2, EOS)]
    for path in paths:  # (position, previous) keys differ between the paths after position 1
        for pos, (prev, tok) in enumerate(zip((0, *path), path, strict=False), start=1):
            if pos > 1:
                log_pi[pos, prev, tok] = 0.0
    scores = toy_scores(log_pi, [(0,)], SEGMENTS)
    phi = potential(scores.answer_now.exp(), value_estimate("ref_suffix_sum", scores))
    value, mass = exact_value(log_pi, (0,))
    assert mass == pytest.approx(1.0) and value == pytest.approx(1.0)
    assert phi.item() == pytest.approx(1.0)
    assert value_estimate("ref_path_joint", scores).item() == pytest.approx(0.5)


def test_without_eos_the_answer_probability_overcounts_the_value():
    # A policy that seldom stops: π(A ⊕ y* ⊕ close | s) also counts responses that go on after
    # the answer and end wrong, so without EOS the "lower bound" exceeds V(s).
    log_pi = toy_policy(seed=0, scale=1.0)
    log_pi[:L, :, EOS] -= 5.0
    log_pi[:L] -= np.logaddexp.reduce(log_pi[:L], axis=-1, keepdims=True)
    state = (0,)
    value, _ = exact_value(log_pi, state)
    with_eos = toy_scores(log_pi, [state], SEGMENTS, end_with_eos=True)
    without = toy_scores(log_pi, [state], SEGMENTS, end_with_eos=False)
    phi_with = potential(with_eos.answer_now.exp(), value_estimate("ref_suffix_sum", with_eos))
    phi_without = potential(without.answer_now.exp(), value_estimate("ref_suffix_sum", without))
    assert phi_with.item() <= value
    assert phi_without.item() > value


# --------------------------------------------------------------------------- model end to end

ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "initializer_range": 0.1,  # scores depend clearly on the context
}
WRONG = "d=a+b=3+8=1\ne=d*a=1*3=4\nf=e-c=4-2=2\nAnswer: 2."


@pytest.fixture(scope="module")
def model(tokenizer):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    m = build_tiny_model(ARCH, tokenizer, seed=0).to(torch.float64)
    m.set_attn_implementation("sdpa")
    yield m
    torch.set_num_threads(threads)


def _run_tokens(continuations: list[list[int]], response: list[int], b: int) -> int:
    """Tokens the packed scorer runs for `continuations` at state b: each without its last
    token, less the leading ones that repeat τ[b:] (read off the trace's encoding)."""
    total = 0
    for c in continuations:
        k = 0
        while k < len(c) - 1 and b + k < len(response) and c[k] == response[b + k]:
            k += 1
        total += len(c) - 1 - k
    return total


def _trace(tokenizer, response: str) -> tuple[list[int], list[int], list[int]]:
    task = get_task("synthetic")
    prompt_ids = tokenizer(task.build_prompt(ROW["problem"]))["input_ids"]
    response_ids = tokenizer(response)["input_ids"]
    boundaries = keyword_boundaries([tokenizer.decode([t]) for t in response_ids])
    return prompt_ids, response_ids, boundaries


@pytest.mark.parametrize(
    ("variant", "answer_now"),
    [(v, "conditional") for v in sorted(VALUE_VARIANTS)] + [("ref_suffix_sum", "joint")],
)
def test_model_credit_matches_naive_scoring(model, tokenizer, variant, answer_now):
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    prompt_ids, response_ids, boundaries = _trace(tokenizer, WRONG)
    assert boundaries == [0, 11, 23, 35, 46]  # states end where a step line ends (K = 4)
    config = RREDCoTConfig(value=variant, prune_nats=None, answer_now=answer_now)  # no pruning
    result = rredcot_credit(
        model, tokenizer, task, prompt_ids, response_ids, boundaries, ref, 0.0, config
    )

    # Naive: one full forward pass per (state, continuation), continuations joined per state.
    answer, suffixes, prefix, lengths, naive_tokens = [], [], [], [], 0
    for b in boundaries:
        state = prompt_ids + response_ids[:b]
        after_newline = tokenizer.decode(state).endswith("\n")
        assert after_newline == (b == 0)  # the prompt ends with "\n"; no step state does
        kind = "newline" if after_newline else "line_end"  # states end before a line's "\n"
        conts = build_continuations(task, ref, tokenizer, state_kind=kind, with_path_prefix=True)
        if answer_now == "joint":  # log π(A ⊕ y* ⊕ close ⊕ EOS | s_k)
            answer.append(sequence_logprob_naive(model, state, conts.answer_now))
        else:  # log π(y* ⊕ close | s_k ⊕ A), A and y* ⊕ close as text joined to the state
            a = tokenizer(join_at_state(task.answer_trigger, kind), add_special_tokens=False)
            y = tokenizer(ROW["answer"] + task.answer_close, add_special_tokens=False)
            a_ids = list(a["input_ids"])
            answer.append(sequence_logprob_naive(model, state + a_ids, list(y["input_ids"])))
        suffixes.append([sequence_logprob_naive(model, state, c) for c in conts.suffixes])
        prefix.append(sequence_logprob_naive(model, state, conts.path_prefix))
        lengths.append(len(conts.suffixes[0]))
        naive_tokens += sum(len(state) + len(c) for c in conts.all_ids())
    scores = ReferenceScores(
        answer_now=answer,  # Python floats: ReferenceScores keeps them in float64
        suffixes=suffixes,
        path_prefix=prefix,
        path_num_tokens=torch.tensor(lengths),
    )
    torch.testing.assert_close(result.answer_logprob, scores.answer_now, atol=1e-9, rtol=0)
    torch.testing.assert_close(result.suffix_logprobs, scores.suffixes, atol=1e-9, rtol=0)
    if variant == "ref_answer_after_path":
        torch.testing.assert_close(
            result.path_prefix_logprobs, scores.path_prefix, atol=1e-9, rtol=0
        )
    else:
        assert result.path_prefix_logprobs is None
    r_hat, v_hat, phi, h, sigma = credit_from_scores(scores, 0.0, config)
    for got, want in zip(
        (result.r_hat, result.v_hat, result.phi, result.h, result.sigma),
        (r_hat, v_hat, phi, h, sigma),
        strict=True,
    ):
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-7)
    assert result.sigma.shape == (4,)
    assert result.sigma.sum().item() == pytest.approx(0.0 - result.phi[0].item(), abs=1e-12)
    assert 0 < result.forward_tokens < naive_tokens


def test_model_credit_cost_and_batching(model, tokenizer):
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    traces = [
        Trace(*_trace(tokenizer, SOLUTION), ref, 1.0),
        Trace(*_trace(tokenizer, WRONG), ref, 0.0),
    ]
    # every suffix in full: the cost is a formula (the conditional answer-now, as counted below)
    exact = RREDCoTConfig(prune_nats=None, answer_now="conditional")
    batch = rredcot_credit_batch(model, tokenizer, task, traces, exact)
    alone = [
        rredcot_credit(
            model,
            tokenizer,
            task,
            trace.prompt_ids,
            trace.response_ids,
            trace.boundaries,
            ref,
            trace.reward,
            exact,
        )
        for trace in traces
    ]
    for got, one in zip(batch, alone, strict=True):
        torch.testing.assert_close(got.sigma, one.sigma, atol=1e-9, rtol=0)
        torch.testing.assert_close(got.phi, one.phi, atol=1e-9, rtol=0)
    # Cost by hand for the wrong trace alone: x ⊕ τ encoded once; state 0 (the prompt ends with
    # "\n") scores the after-newline continuations, states 1 … 4 the others; a continuation
    # runs its tokens without the last, less those that repeat τ's own next tokens (read off
    # the encoding: here the "\n" that starts every continuation after a step line).
    p, t = len(traces[1].prompt_ids), len(traces[1].response_ids)
    kw = {"with_conditional": True}  # the conditional answer_now scores A and A ⊕ y* ⊕ close too
    after = build_continuations(task, ref, tokenizer, state_kind="newline", **kw).all_ids()
    other = build_continuations(task, ref, tokenizer, state_kind="line_end", **kw).all_ids()
    response = traces[1].response_ids

    def cost(conts: list[list[int]], b: int) -> int:
        return _run_tokens(conts, response, b)

    state0 = cost(after, 0)
    # after a step line τ goes on with "\n", as every continuation starts: ≥ 1 token read off
    assert all(cost(other, b) <= sum(len(c) - 2 for c in other) for b in (11, 23, 35))
    steps = sum(cost(other, b) for b in traces[1].boundaries[1:])
    assert alone[1].forward_tokens == p + t + state0 + steps
    # In one batch the prompt's encoding and the states both traces have are counted at the
    # first: s_0 and s_1 = x ⊕ "d=a+b=3+8=1" (both responses start with that line).
    assert batch[0].forward_tokens == alone[0].forward_tokens
    shared_tokens = p + state0 + cost(other, 11)
    assert batch[1].forward_tokens == alone[1].forward_tokens - shared_tokens
    # The two responses share their first step line, so s_1 = x ⊕ "d=a+b=3+8=1" is scored once;
    # they differ in the second line ("=3" / "=4"), so s_2 is scored for each.
    assert traces[0].boundaries[:3] == traces[1].boundaries[:3] == [0, 11, 23]
    two = [Trace(tr.prompt_ids, tr.response_ids[:23], [0, 11, 23], ref, 0.0) for tr in traces]
    assert two[0].response_ids != two[1].response_ids
    pair = rredcot_credit_batch(model, tokenizer, task, two, exact)
    assert pair[1].forward_tokens == 23 + sum(len(c) - 1 for c in other)  # τ and s_2 only
    for a, b in (
        (pair[0].answer_logprob, pair[1].answer_logprob),
        (pair[0].suffix_logprobs, pair[1].suffix_logprobs),
    ):
        assert a[:2].tolist() == b[:2].tolist()  # read off the same scores
        assert (a[2] - b[2]).abs().min() > 1e-3  # scored apart


def test_model_credit_on_a_callers_encoding(model, tokenizer):
    """The method encodes each response once (for its segmentation) and hands the encoding
    over; traces may be cut short of the encoded response (terminal correction)."""
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    prompt_ids, response_ids, boundaries = _trace(tokenizer, WRONG)
    encoded = encode_traces(model, [prompt_ids], [response_ids])
    cut = Trace(prompt_ids, response_ids[: boundaries[-2]], boundaries[:-1], ref, 0.0)
    got = rredcot_credit_batch(model, tokenizer, task, [cut], encoded=encoded, encoded_rows=[0])
    want = rredcot_credit_batch(model, tokenizer, task, [cut])[0]
    torch.testing.assert_close(got[0].phi, want.phi, atol=1e-9, rtol=0)
    # the encoding is the caller's cost: only the continuations are counted here; and as the
    # caller's encoding goes on past the cut with τ's answer line, the continuations at the last
    # state read more of their tokens off it ("\nAnswer: " is τ's own next text there)
    assert got[0].forward_tokens < want.forward_tokens - len(prompt_ids) - boundaries[-2]
    with pytest.raises(ValueError, match="encoded_rows"):
        rredcot_credit_batch(model, tokenizer, task, [cut], encoded=encoded)
    with pytest.raises(ValueError, match=r"encoded_rows\[0\]"):
        rredcot_credit_batch(model, tokenizer, task, [cut], encoded=encoded, encoded_rows=[1])
    other = Trace(prompt_ids, response_ids[1:], [0, len(response_ids) - 1], ref, 0.0)
    with pytest.raises(ValueError, match="is not x ⊕ τ"):
        rredcot_credit_batch(model, tokenizer, task, [other], encoded=encoded, encoded_rows=[0])


def test_model_credit_with_sampled_suffixes(model, tokenizer):
    """suffixes = m scores m of the J suffixes, the same j's at every state and for every trace
    of the prompt, each exactly as the full scoring does, and weighs their sum by J/m."""
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    assert ref.num_segments == 3
    traces = [
        Trace(*_trace(tokenizer, SOLUTION), ref, 1.0),
        Trace(*_trace(tokenizer, WRONG), ref, 0.0),
    ]
    full = rredcot_credit_batch(model, tokenizer, task, traces)
    config = RREDCoTConfig(suffixes=1)
    draws = set()
    for seed in range(6):
        sampled = rredcot_credit_batch(model, tokenizer, task, traces, config, seed=seed)
        again = rredcot_credit_batch(model, tokenizer, task, traces, config, seed=seed)
        assert sampled[0].suffix_columns == sampled[1].suffix_columns == again[0].suffix_columns
        (j,) = sampled[0].suffix_columns
        draws.add(j)
        for got, all_j in zip(sampled, full, strict=True):
            torch.testing.assert_close(
                got.suffix_logprobs, all_j.suffix_logprobs[:, [j]], atol=1e-9, rtol=0
            )
            want_v = 3 * all_j.suffix_logprobs[:, j].exp()
            torch.testing.assert_close(got.v_hat, want_v, atol=1e-12, rtol=1e-9)
            torch.testing.assert_close(got.r_hat, all_j.r_hat, atol=1e-12, rtol=1e-9)
        # cheaper: only one suffix per state
        assert sampled[1].forward_tokens < full[1].forward_tokens
    assert len(draws) > 1  # the seed moves the draw
    every = rredcot_credit_batch(model, tokenizer, task, traces, RREDCoTConfig(suffixes=3))
    for got, want in zip(every, full, strict=True):  # m = J: all of them, exact
        assert got.suffix_columns == (0, 1, 2)
        torch.testing.assert_close(got.phi, want.phi, atol=1e-12, rtol=0)


@pytest.mark.parametrize("answer_now", ["joint", "conditional"])
def test_answer_now_only_scores_no_suffix(model, tokenizer, answer_now):
    """w_v = 0 (Φ_k = w_R·R̂_k) scores the answer-now columns alone: the same R̂, Φ and σ as
    the pass that also scores every suffix, for fewer tokens; a pass any of whose variants reads
    v̂ still scores them."""
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    traces = [
        Trace(*_trace(tokenizer, SOLUTION), ref, 1.0),
        Trace(*_trace(tokenizer, WRONG), ref, 0.0),
    ]
    config = RREDCoTConfig(w_v=0.0, answer_now=answer_now)
    assert not reads_suffixes([config])
    assert reads_suffixes([config, RREDCoTConfig()])
    assert reads_suffixes([replace(config, value="ref_path_ratio")])  # v̂ would be NaN
    alone = rredcot_credit_batch(model, tokenizer, task, traces, config)
    both = rredcot_variants_batch(
        model, tokenizer, task, traces, {"w_v0": config, "default": replace(config, w_v=1.0)}
    )["w_v0"]
    for got, want in zip(alone, both, strict=True):
        assert got.suffix_columns == () and want.suffix_columns == (0, 1, 2)
        assert torch.isinf(got.suffix_logprobs).all() and (got.v_hat == 0).all()
        torch.testing.assert_close(got.r_hat, want.r_hat, atol=1e-12, rtol=1e-9)
        torch.testing.assert_close(got.phi, want.phi, atol=1e-12, rtol=1e-9)
        torch.testing.assert_close(got.sigma, want.sigma, atol=1e-12, rtol=1e-9)
        assert got.forward_tokens < want.forward_tokens


def test_verbatim_join_scores_one_continuation_set(model, tokenizer):
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    prompt_ids, response_ids, boundaries = _trace(tokenizer, WRONG)
    config = RREDCoTConfig(join="verbatim", end_with_eos=False, prune_nats=None, answer_now="joint")
    result = rredcot_credit(
        model, tokenizer, task, prompt_ids, response_ids, boundaries, ref, 1.0, config
    )
    # s_0 ⊕ A: the blank line "…Find f.\n\nAnswer: 1." exactly as the task's trigger writes it
    want = sequence_logprob_naive(model, prompt_ids, tokenizer("\nAnswer: 1.")["input_ids"])
    assert result.answer_logprob[0].item() == pytest.approx(want, abs=1e-9)
    conts = build_continuations(task, ref, tokenizer, end_with_eos=False, join="verbatim")
    p, t = len(prompt_ids), len(response_ids)
    runs = sum(_run_tokens(conts.all_ids(), response_ids, b) for b in boundaries)
    assert result.forward_tokens == p + t + runs


def test_pruned_credit_is_within_its_bound_and_cheaper(model, tokenizer):
    # Default pruning (30 nats below R̂_k): suffixes that cannot matter count as 0, so Φ_k
    # moves by less than J·e^−30·R̂_k and σ with it; the random model's long suffixes are far
    # below R̂_k, so fewer tokens run.
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    trace = Trace(*_trace(tokenizer, WRONG), ref, 0.0)
    exact, pruned = (
        rredcot_credit_batch(model, tokenizer, task, [trace], RREDCoTConfig(prune_nats=nats))[0]
        for nats in (None, 30.0)
    )
    assert RREDCoTConfig().prune_nats == 30.0
    dropped = torch.isinf(pruned.suffix_logprobs)
    assert dropped.any() and not torch.isinf(exact.suffix_logprobs).any()
    assert (
        exact.suffix_logprobs[dropped]
        < exact.answer_logprob[:, None].expand_as(dropped)[dropped] - 30
    ).all()
    kept = ~dropped
    torch.testing.assert_close(
        pruned.suffix_logprobs[kept], exact.suffix_logprobs[kept], atol=1e-9, rtol=0
    )
    bound = ref.num_segments * math.exp(-30) * exact.r_hat
    assert ((exact.phi - pruned.phi).abs() <= bound + 1e-300).all()
    assert pruned.forward_tokens < exact.forward_tokens


@pytest.mark.parametrize("layout", ["packed", "split"])
@pytest.mark.parametrize("prune_nats", [None, 30.0])
def test_credit_is_the_same_in_every_scoring_layout(model, tokenizer, prune_nats, layout):
    # `layout` changes where suffix tokens meet the trace's cache, not what is computed.
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    traces = [Trace(*_trace(tokenizer, t), ref, r) for t, r in ((WRONG, 0.0), (SOLUTION, 1.0))]
    assert RREDCoTConfig().layout == "shared"
    shared, other = (
        rredcot_credit_batch(
            model, tokenizer, task, traces, RREDCoTConfig(prune_nats=prune_nats, layout=name)
        )
        for name in ("shared", layout)
    )
    for a, b in zip(shared, other, strict=True):
        assert a.forward_tokens == b.forward_tokens
        torch.testing.assert_close(a.suffix_logprobs, b.suffix_logprobs, atol=1e-9, rtol=0)
        torch.testing.assert_close(a.sigma, b.sigma, atol=1e-9, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prune_nats": 0}, "prune_nats"),
        ({"prune_nats": True}, "prune_nats"),
        ({"prune_first_chunk": 0}, "prune_first_chunk"),
        ({"prune_first_chunk": 1.5}, "prune_first_chunk"),
        ({"prune_max_kept_tokens": 0}, "prune_max_kept_tokens"),
    ],
)
def test_pruning_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field):
        RREDCoTConfig(**kwargs)


def test_variants_from_one_pass_equal_each_variant_alone(model, tokenizer):
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    traces = [
        Trace(*_trace(tokenizer, SOLUTION), ref, 1.0),
        Trace(*_trace(tokenizer, WRONG), ref, 0.0),
    ]
    variants = {
        f"{v}/{a}": RREDCoTConfig(value=v, answer_now=a, prune_nats=None)
        for v in sorted(VALUE_VARIANTS)
        for a in ("conditional", "joint")
    }
    shared = rredcot_variants_batch(model, tokenizer, task, traces, variants)
    assert list(shared) == list(variants)
    for name, cfg in variants.items():
        alone = rredcot_credit_batch(model, tokenizer, task, traces, cfg)
        for got, want in zip(shared[name], alone, strict=True):
            torch.testing.assert_close(got.sigma, want.sigma, atol=1e-9, rtol=1e-7)
            torch.testing.assert_close(got.phi, want.phi, atol=1e-9, rtol=1e-7)
    # one pass costs more than the cheapest variant alone and less than all of them
    total_alone = sum(
        sum(r.forward_tokens for r in rredcot_credit_batch(model, tokenizer, task, traces, c))
        for c in variants.values()
    )
    one = sum(r.forward_tokens for r in next(iter(shared.values())))
    assert one < total_alone / 4
    with pytest.raises(ValueError, match="one scoring pass"):
        rredcot_variants_batch(
            model,
            tokenizer,
            task,
            traces,
            {"a": RREDCoTConfig(join="line"), "b": RREDCoTConfig(join="verbatim")},
        )


# --------------------------------------------------------------------------- traces and columns


def test_a_segmented_trace_needs_segments_unless_the_response_is_empty():
    assert SegmentedTrace([1], [], [0]).num_segments == 0  # a completion the loss masks out
    assert SegmentedTrace([1], [5, 6], [0, 2]).num_segments == 1
    for boundaries in ([0], [0, 1], [0, 2, 2], [1, 2]):
        with pytest.raises(ValueError, match="boundaries"):
            SegmentedTrace([1], [5, 6], boundaries)
    with pytest.raises(ValueError, match="prompt_ids"):
        SegmentedTrace([], [5], [0, 1])


def test_rredcot_trace_is_a_segmented_trace_with_at_least_one_segment(tokenizer):
    ref = ReferencePath.from_row(get_task("synthetic"), ROW)
    trace = Trace([1], [5, 6], [0, 1, 2], ref, 1.0)
    assert isinstance(trace, SegmentedTrace) and trace.num_segments == 2
    with pytest.raises(ValueError, match="K ≥ 1"):
        Trace([1], [], [0], ref, 1.0)
    with pytest.raises(ValueError, match="reward"):
        Trace([1], [5], [0, 1], ref, float("nan"))


@pytest.mark.parametrize(("with_prefix", "conditional"), itertools.product([False, True], repeat=2))
def test_columns_name_where_each_continuation_is_scored(tokenizer, with_prefix, conditional):
    task = get_task("synthetic")
    ref = ReferencePath.from_row(task, ROW)
    conts = build_continuations(
        task,
        ref,
        tokenizer,
        state_kind="newline",
        with_path_prefix=with_prefix,
        with_conditional=conditional,
    )
    chosen = (0, 2)
    columns = Columns.layout(len(chosen), with_prefix, conditional)
    ids = columns.ids(conts, chosen)
    assert ids[columns.joint] == conts.answer_now
    assert ids[columns.suffixes] == [conts.suffixes[0], conts.suffixes[2]]
    named = [columns.path_prefix, columns.trigger, columns.answer_body]
    assert named == [
        1 + len(chosen) if with_prefix else None,
        *((len(ids) - 2, len(ids) - 1) if conditional else (None, None)),
    ]
    if with_prefix:
        assert ids[columns.path_prefix] == conts.path_prefix
    if conditional:
        assert ids[columns.trigger] == conts.trigger
        assert ids[columns.answer_body] == conts.answer_body
    assert len(ids) == 1 + len(chosen) + with_prefix + 2 * conditional
