"""Off-policy corrections for external groups, as pure tensor functions (beside agents/lm/loss.py).

A received completion was sampled by another node's policy ``mu`` (the *sender*), and the
receiver trains its own policy ``pi`` on it. SAPO's reference code (genrl) and this project
by default treat it as on-policy: the "old" log-probabilities are the receiver's own, so the
importance ratio is 1 at the first step ("ratio 1", ``"none"``). When a packet carries the
sender's per-token log-probabilities (:mod:`sapo_env.sender_logprobs`), two corrections are
available, chosen by ``GRPOConfig.off_policy_correction``:

``"none"``
    weight 1 on every token: the paper's and genrl's behaviour, the default.
``"tis"``
    truncated importance sampling: each external token's loss is multiplied by
    ``min(exp(old_logp - sender_logp), C)``, where ``old_logp`` is the receiver's (detached)
    log-probability of the token at the first iteration of the step and ``C`` is
    ``GRPOConfig.tis_cap`` (:func:`tis_weights`).
``"ftis"``
    the same weights, and the filter of F-TIS: an external completion with a negative
    advantage whose sender is far from the receiver (:func:`sequence_log_ratio` above
    ``GRPOConfig.ftis_kl_threshold``) gets weight 0 (:func:`ftis_keep`).

The weight multiplies the clipped surrogate of :func:`agents.lm.loss.grpo_loss` and nothing
else: the normaliser (tokens or completions of the batch) is unchanged, so a filtered
completion counts where it counted before, with zero loss, as F-TIS zeroes its advantage.

Where each correction comes from (truncated importance sampling, F-TIS, GRAFT's gate), and
which readings of its source this module rests on: docs/provenance.md, "Off-policy
corrections".

What a lying sender can do. The env checks that log-probs are finite and ``<= 0`` and that
there is one per token; it cannot check that they are the sender's. Every effect goes
through a weight in ``[0, C]``, on the liar's own completions only, with the receiver's own
verifier's advantages and an unchanged normaliser:

- claiming log-prob 0 (probability 1) for every token makes each weight
  ``min(pi(token), C) <= 1``: the liar's completions count *less* than under ratio 1 (and
  with ``"ftis"`` its negative-advantage completions drop out as soon as the receiver's
  log-likelihood of them is below ``-g``);
- claiming very low log-probs makes every weight C: the most any sender's completion can
  weigh, C times its weight under ratio 1, which an honest sender whose tokens are unlikely
  under its own policy but likely under the receiver's also gets; with ``"ftis"`` it keeps
  its negative-advantage completions in the step (at weight at most C);
- token ids that do not match the receiver's re-encoding of the text make the whole group
  fall back to ratio 1 (``GRPOUpdate`` counts it).

So correction on, a sender can move a receiver at most C times as far per token as it can
with ratio 1 (the clip of the surrogate binds as before), and the cheapest lie costs the liar
its own influence.

Example (two tokens of one external completion, cap 2)::

    >>> import torch
    >>> w = tis_weights(torch.tensor([[-1.0, -3.0]]), torch.tensor([[-2.0, -1.0]]), cap=2.0)
    >>> [round(v, 4) for v in w[0].tolist()]
    [2.0, 0.1353]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch

OffPolicyCorrection = Literal["none", "tis", "ftis"]
CORRECTIONS: tuple[str, ...] = ("none", "tis", "ftis")
RescueGate = Literal["none", "graft"]
GATES: tuple[str, ...] = ("none", "graft")


def tis_weights(old_logp: torch.Tensor, sender_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights ``min(exp(old_logp - sender_logp), cap)``, elementwise.

    Computed as ``exp(min(old_logp - sender_logp, log cap))``, which never overflows however
    low a sender claims its log-probabilities are. No gradient flows through them."""
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap!r}")
    with torch.no_grad():
        log_ratio = (old_logp - sender_logp).double()
        return torch.exp(torch.clamp(log_ratio, max=math.log(cap))).to(old_logp.dtype)


FTISStatistic = Literal["sum", "mean"]
FTIS_STATISTICS: tuple[str, ...] = ("sum", "mean")


def sequence_log_ratio(old_logp: torch.Tensor, sender_logp: torch.Tensor,
                       mask: torch.Tensor, statistic: FTISStatistic = "sum") -> torch.Tensor:
    """``(S,)``: for each completion, ``sender_logp - old_logp`` over its tokens (``mask``)
    summed (``"sum"``) or averaged (``"mean"``, 0 for a completion without tokens), in
    float64: how much more likely the sender found the completion than the receiver does, in
    nats (per token with ``"mean"``): this module's reading of F-TIS's per-sequence divergence
    (docs/provenance.md), or its length-normalised form, the per-token mean of TRL's
    ``off_policy_mask_threshold``. Masked positions are ignored even when they hold ``inf``
    or ``nan``."""
    if statistic not in FTIS_STATISTICS:
        raise ValueError(f"statistic must be one of {FTIS_STATISTICS}, got {statistic!r}")
    valid = mask.bool()
    diff = torch.where(valid, sender_logp.double() - old_logp.double(),
                       torch.zeros((), dtype=torch.float64, device=old_logp.device))
    total = diff.sum(dim=1)
    if statistic == "sum":
        return total
    return total / valid.sum(dim=1).clamp(min=1).to(total.dtype)


def ftis_keep(advantages: torch.Tensor, old_logp: torch.Tensor, sender_logp: torch.Tensor,
              mask: torch.Tensor, threshold: float, statistic: FTISStatistic = "sum"
              ) -> torch.Tensor:
    """``(S,)`` bool: completions F-TIS keeps. One is dropped when its advantage is negative
    *and* its :func:`sequence_log_ratio` (``statistic``) exceeds ``threshold``: a
    far-off-policy completion the receiver would be taught to avoid, which would push mass
    onto tokens the model would never write. Positive- and zero-advantage ones always stay."""
    far = sequence_log_ratio(old_logp, sender_logp, mask, statistic) > threshold
    return (advantages >= 0) | ~far.to(advantages.device)


def graft_gate(old_logp: torch.Tensor, sender_logp: torch.Tensor, mask: torch.Tensor,
               threshold: float = 0.8) -> torch.Tensor:
    """``(S,)`` weights of a compatibility gate after GRAFT's: ``w = 1[s > threshold]
    * min(s, 1)`` with ``s = exp(mean over the completion's tokens of (old_logp -
    sender_logp))``, the geometric-mean per-token likelihood ratio of receiver to sender.
    A peer completion this policy finds much less likely than its sender did (s at or below
    the threshold) is left out; one it finds about as likely counts nearly fully; none
    counts more than 1. The formula is one reading of GRAFT's gate (arXiv 2609.37868; 0.8:
    its cut), stated in docs/provenance.md. No gradient flows through the weights."""
    with torch.no_grad():
        s = torch.exp(-sequence_log_ratio(old_logp, sender_logp, mask, "mean"))
        return torch.where(s > threshold, s.clamp(max=1.0),
                           torch.zeros((), dtype=s.dtype, device=s.device)).to(old_logp.dtype)


class Correction(NamedTuple):
    """Per-token weights of a (micro-)batch and detached counts for the metrics."""

    weights: torch.Tensor  #: ``(S, C)``, 1 on rows without sender log-probs and on padding
    tokens: int  #: completion tokens of the corrected rows
    weight_sum: float  #: sum of their weights
    truncated: int  #: of those, tokens whose raw ratio exceeded the cap
    filtered: int  #: corrected completions the F-TIS filter dropped
    #: corrected completions with a negative advantage beyond the summed threshold and beyond
    #: the per-token-mean threshold: what the F-TIS filter drops (or would drop) under each
    #: statistic, counted whatever ``kind`` is
    far_sum: int = 0
    far_mean: int = 0


def _none(old, sender, advantages, mask, cap, threshold, statistic):
    return torch.ones_like(old), torch.ones(old.shape[0], dtype=torch.bool, device=old.device)


def _tis(old, sender, advantages, mask, cap, threshold, statistic):
    return tis_weights(old, sender, cap), torch.ones(old.shape[0], dtype=torch.bool,
                                                     device=old.device)


def _ftis(old, sender, advantages, mask, cap, threshold, statistic):
    keep = ftis_keep(advantages, old, sender, mask, threshold, statistic)
    return tis_weights(old, sender, cap) * keep.to(old.dtype)[:, None], keep


_WEIGHTS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "none": _none, "tis": _tis, "ftis": _ftis}


def correction_weights(
    kind: OffPolicyCorrection, old_logp: torch.Tensor, sender_logp: torch.Tensor,
    advantages: torch.Tensor, mask: torch.Tensor, corrected: torch.Tensor, *,
    cap: float = 2.0, threshold: float = 50.0, mean_threshold: float = 0.5,
    statistic: FTISStatistic = "sum",
) -> Correction:
    """The weights of correction ``kind`` for a batch of completions.

    Args:
        old_logp: ``(S, C)`` the receiver's log-probabilities at the first iteration.
        sender_logp: ``(S, C)`` the sender's, aligned with them (any value where unused).
        advantages: ``(S,)``.
        mask: ``(S, C)`` 1 for completion tokens.
        corrected: ``(S,)`` bool, rows that carry usable sender log-probs; every other row
            gets weight 1 (ratio 1), whatever ``kind``.
        cap, threshold, mean_threshold, statistic: ``GRPOConfig.tis_cap``,
            ``ftis_kl_threshold`` (the summed statistic's), ``ftis_mean_threshold`` (the
            per-token mean's) and ``ftis_statistic`` (which of the two the filter uses).
    """
    if kind not in _WEIGHTS:
        raise ValueError(f"off_policy_correction must be one of {CORRECTIONS}, got {kind!r}")
    valid = mask.bool()
    with torch.no_grad():
        zero = torch.zeros((), dtype=old_logp.dtype, device=old_logp.device)
        old = torch.where(valid, old_logp.detach(), zero)
        sender = torch.where(valid, sender_logp.to(old.dtype), zero)
        chosen = threshold if statistic == "sum" else mean_threshold
        weights, keep = _WEIGHTS[kind](old, sender, advantages, mask, cap, chosen, statistic)
        rows = corrected.bool()[:, None] & valid
        weights = torch.where(rows, weights, torch.ones_like(weights))
        truncated = (old - sender > math.log(cap)) & rows if kind != "none" else rows & False
        far = {s: int((corrected.bool() & ~ftis_keep(advantages, old, sender, mask, t, s)).sum())
               for s, t in (("sum", threshold), ("mean", mean_threshold))}
        return Correction(
            weights, int(rows.sum()), float(torch.where(rows, weights, zero).sum()),
            int(truncated.sum()), int((corrected.bool() & ~keep).sum()),
            far["sum"], far["mean"])
