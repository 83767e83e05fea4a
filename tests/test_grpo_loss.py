"""The GRPO loss against hand computations (agents/lm/loss.py)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from hand_grpo import hand_token_losses  # noqa: E402

from agents.lm.loss import grpo_loss, token_logprobs  # noqa: E402

# tiny models on a shared machine: see one_torch_thread in conftest.py
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# Two completions, three token slots; the second has one padding slot holding garbage.
LOGP = [[-1.0, -2.0, -0.5], [-0.3, -1.2, float("nan")]]
# Ratios exp(logp - old): row 0 = [e^0.5, e^-0.5, e^0] = [1.65, 0.61, 1.0] (high and low clip),
# row 1 = [e^-0.4, e^0.1] = [0.67, 1.105].
OLD = [[-1.5, -1.5, -0.5], [0.1, -1.3, 0.0]]
ADV = [1.0, -2.0]
MASK = [[1, 1, 1], [1, 1, 0]]


def tensors():
    return (torch.tensor(LOGP), torch.tensor(OLD), torch.tensor(ADV), torch.tensor(MASK))


def test_token_normalization_with_clipping_matches_hand_computation():
    rows = hand_token_losses(LOGP, OLD, ADV, MASK)
    expected = sum(sum(r) for r in rows) / 5
    out = grpo_loss(*tensors(), normalization="token")
    assert float(out.loss) == pytest.approx(expected, rel=1e-6)
    # Clipping binds where the ratio left the range in the direction of the advantage:
    # row 0 token 0 (r=1.65 > 1.28, A > 0); row 1 token 0 (r=0.67 < 0.8, A < 0).
    # Row 0 token 1 (r=0.61, A > 0) is below the range but unclipped (min picks r * A).
    assert float(out.clipped_tokens) == 2
    assert float(out.tokens) == 5
    ratios = [math.exp(LOGP[i][t] - OLD[i][t]) for i in range(2) for t in range(3) if MASK[i][t]]
    assert float(out.ratio_sum) == pytest.approx(sum(ratios), rel=1e-6)


def test_sequence_normalization_matches_hand_computation():
    rows = hand_token_losses(LOGP, OLD, ADV, MASK)
    expected = (sum(rows[0]) / 3 + sum(rows[1]) / 2) / 2
    out = grpo_loss(*tensors(), normalization="sequence")
    assert float(out.loss) == pytest.approx(expected, rel=1e-6)
    token = grpo_loss(*tensors(), normalization="token")
    assert float(out.loss) != pytest.approx(float(token.loss))  # the two really differ


def test_kl_penalty_matches_hand_computation():
    ref = [[-1.2, -1.0, -0.7], [-0.2, -2.0, 0.0]]
    rows = hand_token_losses(LOGP, OLD, ADV, MASK, beta=0.1, ref=ref)
    out = grpo_loss(*tensors(), beta=0.1, ref_logp=torch.tensor(ref))
    assert float(out.loss) == pytest.approx(sum(sum(r) for r in rows) / 5, rel=1e-6)
    kl = sum(math.exp(ref[i][t] - LOGP[i][t]) - (ref[i][t] - LOGP[i][t]) - 1
             for i in range(2) for t in range(3) if MASK[i][t])
    assert float(out.kl_sum) == pytest.approx(kl, rel=1e-6)


def test_asymmetric_clip_range():
    # ratio 1.25 with A > 0 is inside [0.8, 1.28] (unclipped) but outside a symmetric 0.2 range
    logp, old = torch.tensor([[math.log(1.25)]]), torch.zeros(1, 1)
    adv, mask = torch.tensor([1.0]), torch.ones(1, 1)
    assert float(grpo_loss(logp, old, adv, mask).loss) == pytest.approx(-1.25)
    symmetric = grpo_loss(logp, old, adv, mask, epsilon_high=0.2)
    assert float(symmetric.loss) == pytest.approx(-1.2)
    assert float(symmetric.clipped_tokens) == 1


@pytest.mark.parametrize("normalization", ["token", "sequence"])
def test_micro_batches_add_up_to_the_whole_batch(normalization):
    logp, old, adv, mask = tensors()
    whole = grpo_loss(logp, old, adv, mask, normalization=normalization)
    parts = sum(
        float(grpo_loss(logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1],
                        normalization=normalization, total_tokens=5, total_sequences=2).loss)
        for i in range(2)
    )
    assert parts == pytest.approx(float(whole.loss), rel=1e-6)


def test_on_policy_gradient_is_minus_advantage_over_token_count():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -9.0]], requires_grad=True)
    adv, mask = torch.tensor([1.0, -2.0]), torch.tensor(MASK)
    grpo_loss(logp, logp.detach(), adv, mask).loss.backward()
    expected = torch.tensor([[-1.0, -1.0, -1.0], [2.0, 2.0, 0.0]]) / 5
    assert torch.allclose(logp.grad, expected)


def test_padding_garbage_never_reaches_the_loss_or_gradient():
    # A pad slot may hold inf or nan (the log-prob of an impossible token); nan * 0 is nan,
    # so the mask has to select, not multiply.
    logp = torch.tensor([[-1.0, float("inf")], [-0.5, float("nan")]], requires_grad=True)
    ref = torch.tensor([[-1.0, float("nan")], [-0.5, float("inf")]])
    mask = torch.tensor([[1, 0], [1, 0]])
    out = grpo_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, beta=0.1, ref_logp=ref)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.0)  # -(1 - 1) / 2 with ratio 1 and kl 0
    assert torch.isfinite(logp.grad).all()
    assert logp.grad[0, 1] == 0 and logp.grad[1, 1] == 0


def test_token_logprobs_equals_log_softmax_gather():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g)
    targets = torch.randint(0, 7, (2, 4), generator=g)
    expected = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, targets), expected, atol=1e-6)
    half = token_logprobs(logits.bfloat16(), targets)
    assert half.dtype == torch.float32
    assert torch.allclose(half, expected, atol=5e-2)


def test_invalid_arguments_name_the_problem():
    logp, old, adv, mask = tensors()
    with pytest.raises(ValueError, match="normalization"):
        grpo_loss(logp, old, adv, mask, normalization="batch")
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(logp, old, adv[:1], mask)
