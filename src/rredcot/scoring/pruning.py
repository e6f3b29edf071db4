"""Pruning rounds: stop scoring a continuation once it can no longer matter (METHOD.md §3).

RREDCoT sums probabilities of reference suffixes, and most suffixes at most states (those that
would redo steps the trace already took) are many orders of magnitude below the answer-now
probability after a few tokens. With pruning, blocks run their first `first_chunk` tokens; a
block whose running log-prob is already `nats` below its state's anchor column (answer-now, run
in full) is dropped (−inf: its probability is below e^−nats of the anchor's, and a running
log-prob only falls); the others run their next 2·, 4· … first_chunk tokens in later rounds,
each on the keys and values of the block's earlier tokens (kept between rounds) and its trace's
cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rredcot.scoring.encoding import EncodedTraces
from rredcot.scoring.layout import Passes, Placed, _Block, group_rows
from rredcot.scoring.passes import _Extras, run_rows
from rredcot.scoring.queries import Items


@dataclass(frozen=True)
class Pruning:
    """Stop scoring a continuation once it can no longer matter next to an anchor column.

    With pruning, continuations are scored in rounds: `first_chunk` tokens each in the first
    round (the `anchor` column in full), then 2·first_chunk, 4·first_chunk … tokens, each round
    on the keys and values of the tokens scored before it. After a round, a continuation m at
    state s whose running log-prob is below log π(c_anchor | s) − `nats` is dropped: its entry
    becomes −inf. A running log-prob only falls as tokens are added, so a dropped continuation
    has π(c_m | s) < e^−nats · π(c_anchor | s): a sum over the M columns of a state loses less
    than M · e^−nats of the anchor's probability (nats = 20: M · 2·10⁻⁹, far below the float32
    rounding of the scores themselves).
    """

    nats: float
    first_chunk: int = 16
    anchor: int = 0
    max_kept: int | None = None
    """Most continuation tokens whose keys and values are kept between rounds at once (memory):
    the continuations are taken in waves whose full lengths add up to at most this. None: all
    at once."""

    def __post_init__(self) -> None:
        if isinstance(self.nats, bool) or not math.isfinite(self.nats) or self.nats <= 0:
            raise ValueError(f"prune nats: expected a finite number > 0, got {self.nats!r}")
        if isinstance(self.first_chunk, bool) or self.first_chunk < 1:
            raise ValueError(
                f"prune first_chunk: expected an integer ≥ 1, got {self.first_chunk!r}"
            )
        if isinstance(self.anchor, bool) or self.anchor < 0:
            raise ValueError(f"prune anchor: expected a column index ≥ 0, got {self.anchor!r}")
        cap = self.max_kept
        if cap is not None and (isinstance(cap, bool) or cap < 1):
            raise ValueError(f"prune max_kept: expected an integer ≥ 1 or None, got {cap!r}")


def _waves(pending: list[int], sizes: list[int], prune: Pruning | None) -> list[list[int]]:
    """`pending` cut, in order, into waves whose summed `sizes` (inputs still to run, an upper
    bound of the keys kept for them) stay within `prune.max_kept` (an item above it alone)."""
    if not pending or prune is None or prune.max_kept is None:
        return [pending] if pending else []
    waves: list[list[int]] = [[]]
    total = 0
    for it, size in zip(pending, sizes, strict=True):
        if waves[-1] and total + size > prune.max_kept:
            waves.append([])
            total = 0
        waves[-1].append(it)
        total += size
    return waves


def _pruning_rounds(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    items: Items,
    scores: torch.Tensor,
    skips: Sequence[int],
    pending: list[int],
    kept: _Extras,
    prune: Pruning,
    passes: Passes,
    run: list[int],
) -> None:
    """Rounds 2, 3 … of `Pruning` on the items still `pending` after the first round (which ran
    `prune.first_chunk` of their inputs; `kept`: those inputs' keys and values): drop (−inf in
    `scores`) what is below its anchor − nats, run the next 2·, 4· … first_chunk inputs of the
    rest on the keys of what they ran before, until every item is finished or dropped. Adds
    the inputs run to `run[q]`. `packed` runs one block per row; `shared` and `split` pack a
    trace's surviving blocks into rows of `passes.row_tokens`."""
    device = scores.device
    done, length = 0, prune.first_chunk
    prompt_lengths = [len(p) for p in encoded.prompt_ids]
    while pending:
        where = [items.where(it) for it in pending]
        anchor = torch.tensor([items.at(q, a, prune.anchor) for q, a, _ in where], device=device)
        alive = scores[torch.tensor(pending, device=device)] >= scores[anchor] - prune.nats
        alive = alive.tolist()
        dropped = [it for it, ok in zip(pending, alive, strict=True) if not ok]
        scores[torch.tensor(dropped, dtype=torch.long, device=device)] = -math.inf
        survivors = [it for it, ok in zip(pending, alive, strict=True) if ok]
        if not survivors:
            return
        done += length
        length *= 2
        placed: dict[int, list[Placed]] = {}
        pending = []
        for it in survivors:
            q, a, m = items.where(it)
            todo = items.inputs(it) - skips[it] - done
            size = min(length, todo)
            if size < todo:
                pending.append(it)
            query = items.queries[q]
            b = query.states[a]
            block = _Block(q, a, m, b, done, size, skips[it])
            placed.setdefault(query.trace, []).append((b + skips[it], block, size))
            run[q] += size
        width = 1 if passes.layout == "packed" else passes.row_tokens  # packed: a row a block
        rows = group_rows(placed, prompt_lengths, width)
        new = run_rows(model, encoded, items, rows, scores, kept, set(pending), passes)
        kept = kept.then(new, pending) if pending else new
