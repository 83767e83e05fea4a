"""The clipped GRPO loss written out with floats, for tests to check agents/lm/loss.py against."""

from __future__ import annotations

import math


def hand_token_losses(logp, old, adv, mask=None, low=0.2, high=0.28, beta=0.0, ref=None):
    """Per-token losses of each row (masked tokens left out): -min(r A, clip(r) A) + beta kl."""
    rows = []
    for i, row in enumerate(logp):
        out = []
        for t, value in enumerate(row):
            if mask is not None and not mask[i][t]:
                continue
            r = math.exp(value - old[i][t])
            clipped = min(max(r, 1 - low), 1 + high)
            loss = -min(r * adv[i], clipped * adv[i])
            if beta:
                d = ref[i][t] - value
                loss += beta * (math.exp(d) - d - 1)
            out.append(loss)
        rows.append(out)
    return rows


def hand_loss(logp, old, adv, normalization, low=0.2, high=0.28, mask=None):
    """The batch loss as genrl and TRL compute it: ``"token"`` sums every unmasked token / their
    count, ``"sequence"`` averages per row (a fully masked row counts, with loss 0), then over
    every row. Rows with advantage 0 count like the others."""
    rows = hand_token_losses(logp, old, adv, mask, low=low, high=high)
    if normalization == "token":
        return sum(map(sum, rows)) / sum(map(len, rows))
    return sum(sum(r) / max(len(r), 1) for r in rows) / len(rows)
