"""The GRPO objective as pure tensor functions, testable by hand.

The clipped surrogate of PPO with group-relative advantages (GRPO, arXiv 2402.03300), with
the asymmetric clip range of DAPO (arXiv 2503.14476) that the SAPO paper used
(``epsilon_low=0.2``, ``epsilon_high=0.28``), an optional KL penalty to a reference policy
(the ``k3`` estimator ``exp(ref - logp) - (ref - logp) - 1``, as in GRPO and TRL) and two
normalizations:

``"token"`` (DAPO)
    sum of the per-token losses over every completion token of the batch, divided by the
    number of those tokens: long completions weigh more.
``"sequence"`` (GRPO)
    the mean per-token loss of each completion, then the mean over completions.

Per token ``t`` of completion ``i`` with ratio ``r = exp(logp - old_logp)``::

    loss_it = -min(r * A_i, clip(r, 1 - epsilon_low, 1 + epsilon_high) * A_i) + beta * kl_it

``token_weights`` (no gradient) multiplies the clipped term of each token: the off-policy
corrections of :mod:`agents.lm.off_policy` (None: weight 1, the paper's ratio 1 for every token).

Every tensor is ``(sequences, tokens)`` except ``advantages`` ``(sequences,)``; ``mask`` marks
completion tokens (padding and prompt are 0). Masked positions never reach the result, even
when they hold ``inf`` or ``nan``.

Micro-batching: pass ``total_tokens`` / ``total_sequences`` of the whole batch and the losses
of the micro-batches add up to the loss of the whole batch. The whole batch is what genrl and
TRL divide by: completions whose loss is zero (advantage 0, no KL) count even when the caller
never forwards them, and a completion whose mask is all zero (TRL's masked truncated ones)
counts no token but, under ``"sequence"``, one sequence.

Example::

    >>> import torch
    >>> logp = torch.tensor([[-1.0, -2.0]])
    >>> out = grpo_loss(logp, logp, torch.tensor([1.0]), torch.tensor([[1, 1]]))
    >>> float(out.loss)
    -1.0
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

LossNormalization = Literal["token", "sequence"]
NORMALIZATIONS: tuple[str, ...] = ("token", "sequence")


class GRPOLoss(NamedTuple):
    """The loss of a (micro-)batch and detached sums for logging, to add across micro-batches."""

    loss: torch.Tensor  #: scalar, differentiable
    tokens: torch.Tensor  #: completion tokens in this micro-batch
    clipped_tokens: torch.Tensor  #: tokens whose gradient the clip removed
    ratio_sum: torch.Tensor  #: sum of the importance ratios over completion tokens
    kl_sum: torch.Tensor  #: sum of the per-token KL estimates (0 when beta == 0)


UPCAST_CHUNK_BYTES = 64 * 2**20
"""Largest block of half-precision logits upcast to float32 at once by :func:`token_logprobs`."""


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-probability of each target token: ``log_softmax(logits)[..., target]``.

    ``logits`` ``(S, T, V)``, ``targets`` ``(S, T)`` -> ``(S, T)`` float32. Computed as
    ``logit[target] - logsumexp(logits)`` so the full ``(S, T, V)`` log-softmax is never
    materialised (V is 150k for Qwen); half-precision logits are upcast a block of rows at a
    time for the same reason, at most ``UPCAST_CHUNK_BYTES`` of float32 (one row at a time
    for a large vocabulary; every row at once for a small one, where a loop over rows would
    cost more than the arithmetic).
    """
    if logits.dtype in (torch.float32, torch.float64):
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return (picked - torch.logsumexp(logits, dim=-1)).float()
    rows_at_once = max(1, UPCAST_CHUNK_BYTES // max(1, 4 * logits[0].numel()))
    blocks = []
    for start in range(0, len(logits), rows_at_once):
        block = logits[start:start + rows_at_once].float()
        picked = block.gather(-1, targets[start:start + rows_at_once].unsqueeze(-1)).squeeze(-1)
        blocks.append(picked - torch.logsumexp(block, dim=-1))
    return torch.cat(blocks)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.28,
    normalization: LossNormalization = "token",
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    token_weights: torch.Tensor | None = None,
) -> GRPOLoss:
    """Clipped GRPO loss of a batch of completions; see the module docstring for the formula.

    Args:
        logp: token log-probabilities under the policy being trained (carries the gradient).
        old_logp: the same under the policy that produced the batch (no gradient).
        advantages: one advantage per completion, shared by its tokens.
        mask: 1 for completion tokens that enter the loss, 0 for prompt and padding.
        epsilon_low, epsilon_high: the ratio is clipped to ``[1 - low, 1 + high]``.
        normalization: ``"token"`` or ``"sequence"``.
        beta: weight of the KL penalty; needs ``ref_logp`` when > 0.
        ref_logp: token log-probabilities under the reference policy.
        total_tokens: denominator of the token normalization; default: the tokens in ``mask``.
        total_sequences: denominator of the sequence normalization; default: the rows here.
        token_weights: ``(S, C)`` weights of the clipped term (an off-policy correction,
            :mod:`agents.lm.off_policy`); they never change the denominators.
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    if beta > 0 and ref_logp is None:
        raise ValueError(f"beta={beta} > 0 needs ref_logp")
    if logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
            f"{tuple(mask.shape)} must have the same shape"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"advantages must have shape ({logp.shape[0]},), got {tuple(advantages.shape)}"
        )
    valid = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    # where() rather than multiplication by the mask: padding positions may hold inf/nan
    # (a log-prob of an impossible pad token) and nan * 0 is nan.
    log_ratio = torch.where(valid, logp - old_logp, zero)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logp.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if token_weights is not None:
        if token_weights.shape != logp.shape:
            raise ValueError(f"token_weights {tuple(token_weights.shape)} must have the shape of "
                             f"logp {tuple(logp.shape)}")
        per_token = per_token * torch.where(valid, token_weights.detach().to(per_token.dtype),
                                            zero)
    if beta > 0:
        assert ref_logp is not None
        delta = torch.where(valid, ref_logp - logp, zero)
        kl = torch.exp(delta) - delta - 1.0
        per_token = per_token + beta * kl
    else:
        kl = torch.zeros_like(per_token)
    per_token = torch.where(valid, per_token, zero)

    counts = valid.sum(dim=1)
    if normalization == "token":
        denominator = float(counts.sum()) if total_tokens is None else float(total_tokens)
        loss = per_token.sum() / max(denominator, 1.0)
    else:
        per_sequence = per_token.sum(dim=1) / counts.clamp(min=1).to(per_token.dtype)
        denominator = float(logp.shape[0]) if total_sequences is None else float(total_sequences)
        loss = per_sequence.sum() / max(denominator, 1.0)

    with torch.no_grad():
        # The clip removes the gradient only where it binds in the direction of the update
        # (same definition as TRL's clip_ratio/low_mean and high_mean).
        low = (ratio < 1.0 - epsilon_low) & (adv < 0)
        high = (ratio > 1.0 + epsilon_high) & (adv > 0)
        clipped_tokens = ((low | high) & valid).sum().float()
        ratio_sum = torch.where(valid, ratio, zero).sum()
        kl_sum = torch.where(valid, kl, zero).sum()
    return GRPOLoss(loss, counts.sum().float(), clipped_tokens, ratio_sum, kl_sum)
