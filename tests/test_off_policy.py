"""Off-policy corrections of external groups (agents.lm.off_policy): the pure functions on numbers
worked by hand, which rows get the sender's log-probs (agents.lm.encoding), and two tiny GRPO nodes
where the receiver weighs the sender's completions by them."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_lm import tiny_llama  # noqa: E402

import sapo_env  # noqa: E402
import sapo_env.runtime  # noqa: E402
from agents.lm.encoding import training_set  # noqa: E402
from agents.lm.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.lm.loss import grpo_loss  # noqa: E402
from agents.lm.off_policy import (  # noqa: E402
    correction_weights,
    ftis_keep,
    graft_gate,
    sequence_log_ratio,
    tis_weights,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAN = float("nan")


# --- the pure functions, by hand ------------------------------------------------------------

def test_tis_weight_is_the_ratio_truncated_at_the_cap():
    old = torch.tensor([[-1.0, -3.0, -2.0]])
    sender = torch.tensor([[-2.0, -1.0, -2.0]])
    # exp(1) = 2.718 -> 2 (cut), exp(-2) = 0.1353, exp(0) = 1
    assert torch.allclose(tis_weights(old, sender, cap=2.0),
                          torch.tensor([[2.0, math.exp(-2.0), 1.0]]))
    assert torch.allclose(tis_weights(old, sender, cap=3.0)[0, 0], torch.tensor(math.e))


def test_a_lying_sender_gets_at_most_the_cap_and_never_overflows():
    old = torch.tensor([[-0.1, -5.0]])
    honest_looking = torch.zeros(1, 2)  # "I was certain of every token"
    assert torch.allclose(tis_weights(old, honest_looking, 2.0),
                          torch.tensor([[math.exp(-0.1), math.exp(-5.0)]]))  # <= 1
    lowest = torch.full((1, 2), -3.0e38)  # the most negative float32 the schema lets through
    weights = tis_weights(old, lowest, 2.0)
    assert torch.equal(weights, torch.full((1, 2), 2.0))


def test_sequence_log_ratio_sums_sender_minus_receiver_over_the_completion_tokens():
    old = torch.tensor([[-1.0, -2.0, NAN], [-0.5, -0.5, -0.5]])
    sender = torch.tensor([[-3.0, -1.0, 0.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # (-3 + 1) + (-1 + 2) = -1; padding (nan) ignored; identical policies: 0
    assert sequence_log_ratio(old, sender, mask).tolist() == [-1.0, 0.0]


def test_ftis_drops_only_far_completions_with_negative_advantage():
    old = torch.tensor([[-5.0, -5.0], [-5.0, -5.0], [-1.0, -1.0], [-5.0, -5.0]])
    sender = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]])
    mask = torch.ones(4, 2)
    advantages = torch.tensor([1.0, -1.0, -1.0, 0.0])
    # divergences: 8, 8, 0, 8 against g = 5: only row 1 is negative *and* far
    keep = ftis_keep(advantages, old, sender, mask, threshold=5.0)
    assert keep.tolist() == [True, False, True, True]
    assert ftis_keep(advantages, old, sender, mask, threshold=8.0).all()  # 8 is not above 8


def test_correction_weights_apply_only_to_rows_with_sender_logprobs():
    old = torch.tensor([[-1.0, -1.0], [-3.0, NAN], [-1.0, -1.0]])
    sender = torch.tensor([[-2.0, -0.5], [-0.1, 0.0], [-9.0, -9.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    advantages = torch.tensor([1.0, -1.0, -1.0])
    corrected = torch.tensor([True, True, False])  # row 2: no usable log-probs
    tis = correction_weights("tis", old, sender, advantages, mask, corrected, cap=2.0,
                             threshold=1.0)
    expected = torch.tensor([[2.0, math.exp(-0.5)], [math.exp(-2.9), 1.0], [1.0, 1.0]])
    assert torch.allclose(tis.weights, expected)
    assert (tis.tokens, tis.truncated, tis.filtered) == (3, 1, 0)
    assert tis.weight_sum == pytest.approx(2.0 + math.exp(-0.5) + math.exp(-2.9))
    # row 1: advantage -1, divergence -0.1 + 3 = 2.9 > 1: filtered; row 2 is not corrected
    ftis = correction_weights("ftis", old, sender, advantages, mask, corrected, cap=2.0,
                              threshold=1.0)
    assert torch.allclose(ftis.weights, torch.tensor([[2.0, math.exp(-0.5)], [0.0, 1.0],
                                                      [1.0, 1.0]]))
    assert (ftis.tokens, ftis.filtered) == (3, 1)
    none = correction_weights("none", old, sender, advantages, mask, corrected)
    assert torch.equal(none.weights, torch.ones(3, 2)) and none.truncated == 0
    with pytest.raises(ValueError, match="off_policy_correction must be one of"):
        correction_weights("is", old, sender, advantages, mask, corrected)


def test_token_weights_scale_the_clipped_term_and_not_the_normaliser():
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]])
    advantages = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 2)
    weights = torch.tensor([[2.0, 0.5], [1.0, 0.0]])
    # ratio 1: per token -w * A: -(2 + 0.5) + (1 + 0) over 4 tokens
    out = grpo_loss(logp, logp, advantages, mask, token_weights=weights)
    assert float(out.loss) == pytest.approx(-(2.0 + 0.5 - 1.0 - 0.0) / 4)
    assert float(grpo_loss(logp, logp, advantages, mask, token_weights=torch.ones(2, 2)).loss) \
        == float(grpo_loss(logp, logp, advantages, mask).loss)
    with pytest.raises(ValueError, match="token_weights"):
        grpo_loss(logp, logp, advantages, mask, token_weights=torch.ones(2, 3))


def test_grpo_config_checks_the_correction_fields():
    assert GRPOConfig().off_policy_correction == "none" and GRPOConfig().tis_cap == 2.0
    for kwargs, field in [({"off_policy_correction": "vis"}, "off_policy_correction"),
                          ({"tis_cap": 0.5}, "tis_cap"), ({"tis_cap": math.inf}, "tis_cap"),
                          ({"ftis_kl_threshold": math.nan}, "ftis_kl_threshold"),
                          ({"share_logprobs": 1}, "share_logprobs")]:
        with pytest.raises(ValueError, match=field):
            GRPOConfig(**kwargs)


# --- which rows get the sender's log-probs ---------------------------------------------------

def _encoder(groups_ids):
    """An encoder that returns fixed ids per group id (prompt [9], every completion ended)."""
    def encode(group):
        ids = groups_ids[group["id"]]
        return [9], ids, [True] * len(ids)
    return encode


def _group(gid, local, **fields):
    return {"id": gid, "question": "q", "system_prompt": "", "completions": ("a", "b"),
            "advantages": np.array([1.0, -1.0], np.float32), "local": local, **fields}


def test_only_external_groups_whose_ids_match_are_corrected():
    lp = (np.array([-0.5, -1.0], np.float32), np.array([-2.0], np.float32))
    ids = {"ext": [[5, 2], [6]], "bad": [[5, 2], [7]], "own": [[5, 2], [6]], "none": [[5], [6]]}
    sent = (np.array([5, 2], np.int32), np.array([6], np.int32))
    batch = [_group("ext", False, logprobs=lp, token_ids=sent),
             _group("bad", False, logprobs=lp, token_ids=sent),  # 7 re-encodes as 6: no
             _group("own", True, logprobs=lp, token_ids=sent),  # own groups: ratio 1
             _group("none", False)]  # nothing sent
    config = GRPOConfig(off_policy_correction="tis", device="cpu")
    data = training_set(batch, _encoder(ids), config)
    senders = [None if r.sender_logprobs is None else r.sender_logprobs.tolist()
               for r in data.rows]
    assert senders == [[-0.5, -1.0], [-2.0], None, None, None, None, None, None]
    assert (data.corrected_groups, data.uncorrected_groups) == (1, 2)
    plain = training_set(batch, _encoder(ids), GRPOConfig(device="cpu"))
    assert all(r.sender_logprobs is None for r in plain.rows)
    assert (plain.corrected_groups, plain.uncorrected_groups) == (0, 0)


# --- tiny GRPO nodes -----------------------------------------------------------------------

ARITHMETIC = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                         "max_digits": 1})]


def digit_of(completion):
    """Reads a digit off the characters, so untrained models' groups carry advantages."""
    return str(sum(map(ord, completion)) % 10)


def _env(rounds=4):
    return sapo_env.parallel_env(n=2, completions_per_question=4, train_budget=4,
                                 num_external=2, max_rounds=rounds, tasks=ARITHMETIC,
                                 system_prompt="", answer_format=digit_of)


def _nodes(tok, config, seeds=(10, 11)):
    return [GRPOAgent(tiny_llama(tok, seed=s), tok, config, seed=i, num_external=2)
            for i, s in enumerate(seeds)]


def test_sharing_logprobs_changes_no_completion_and_sends_what_learn_would_compute(tok):
    """The completions are those of a node that shares nothing (the forward pass draws no
    random number); the log-probs are the policy's at the sampling temperature, token for
    token what the receiver side computes for the same ids."""
    env = _env()
    observations, _ = env.reset(seed=0)
    obs = observations["node_0"]
    config = GRPOConfig(max_new_tokens=6, temperature=0.7, device="cpu")
    plain = _nodes(tok, config)[0].act(obs)
    sharing_node = _nodes(tok, GRPOConfig(max_new_tokens=6, temperature=0.7, device="cpu",
                                          share_logprobs=True))[0]
    shared = sharing_node.act(obs)
    assert shared["completions"] == plain["completions"]
    for q, texts in enumerate(shared["completions"]):
        for text, ids, lps in zip(texts, shared["token_ids"][q], shared["logprobs"][q]):
            assert len(ids) == len(lps) and all(v <= 0 for v in lps)
            assert tok.decode(ids, skip_special_tokens=True) == text
            prompt = sharing_node.prompt_ids(obs["questions"][q]["prompt"], "")
            with torch.no_grad():
                logits = sharing_node.model(torch.tensor([prompt + ids])).logits[0]
            expected = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, dim=-1)
            expected = expected.gather(1, torch.tensor(ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(lps), expected, atol=1e-4)


def test_with_correction_none_learning_is_unchanged(tok):
    """A receiver with off_policy_correction='none' takes bit for bit the step of one that
    never saw a log-prob, on the same batch."""
    env = _env(rounds=8)
    observations, _ = env.reset(seed=0)
    senders = _nodes(tok, GRPOConfig(max_new_tokens=6, device="cpu", share_logprobs=True))
    batch: tuple = ()
    while not any("logprobs" in g for g in batch if not g["local"]):
        actions = {a: s.act(observations[a]) for a, s in zip(env.agents, senders)}
        observations, *_ = env.step(actions)
        batch = observations["node_0"]["batch"]
    stripped = [{k: v for k, v in g.items() if k not in ("logprobs", "token_ids")} for g in batch]
    base = GRPOConfig(max_new_tokens=6, learning_rate=3e-3, device="cpu")
    plain = _nodes(tok, base, seeds=(20,))[0]
    explicit = _nodes(tok, replace(base, off_policy_correction="none"), seeds=(20,))[0]
    without_time = [{k: v for k, v in node.learn(b).items() if k != "seconds"}
                    for node, b in ((plain, stripped), (explicit, batch))]
    assert without_time[0] == without_time[1] and without_time[0]["groups"] > 0
    for a, b in zip(plain.model.parameters(), explicit.model.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("correction", ["tis", "ftis"])
def test_two_tiny_nodes_weigh_each_others_completions_by_the_senders_logprobs(tok, correction):
    """Two nodes of different weights share log-probs; each receiver's step uses them on the
    external groups whose ids it re-encodes exactly, with weights in [0, cap], and moves its
    weights differently from a receiver with ratio 1."""
    # untrained tiny models differ by a fraction of a nat over 5 tokens: g = 0 makes the filter
    # drop the negative-advantage completions their sender found the likelier
    config = GRPOConfig(max_new_tokens=5, learning_rate=3e-3, device="cpu", share_logprobs=True,
                        off_policy_correction=correction, ftis_kl_threshold=0.0)
    history = sapo_env.runtime.run(_env(), _nodes(tok, config), seed=0, progress=False)
    metrics = [m for per_round in history.learn_metrics for m in per_round.values()]
    assert sum(m["off_policy_groups"] for m in metrics) > 0
    corrected = [m for m in metrics if m["off_policy_tokens"] > 0]
    assert corrected
    for m in corrected:
        assert 0.0 <= m["off_policy_weight_mean"] <= config.tis_cap
        assert 0.0 <= m["off_policy_truncated_fraction"] <= 1.0
    # different models: the weights are not all 1
    assert any(abs(m["off_policy_weight_mean"] - 1.0) > 1e-3 for m in corrected)
    if correction == "ftis":
        assert sum(m["off_policy_filtered"] for m in metrics) > 0
    # the same run with ratio 1 ends elsewhere
    ratio_1 = _nodes(tok, replace(config, off_policy_correction="none"))
    corrected_nodes = _nodes(tok, config)
    sapo_env.runtime.run(_env(), ratio_1, seed=0, progress=False)
    sapo_env.runtime.run(_env(), corrected_nodes, seed=0, progress=False)
    assert not all(torch.equal(a, b) for a, b in zip(ratio_1[0].model.parameters(),
                                                     corrected_nodes[0].model.parameters()))


def test_identical_sender_and_receiver_weights_give_ratio_one(tok):
    """Sender and receiver with the same weights and no learning: every weight is 1 to float
    rounding (the sender's log-probs are the receiver's), none truncated."""
    config = GRPOConfig(max_new_tokens=5, learning_rate=0.0, device="cpu", share_logprobs=True,
                        off_policy_correction="tis")
    history = sapo_env.runtime.run(_env(rounds=3), _nodes(tok, config, seeds=(10, 10)), seed=0,
                                   progress=False)
    corrected = [m for per_round in history.learn_metrics for m in per_round.values()
                 if m["off_policy_tokens"] > 0]
    assert corrected
    for m in corrected:
        assert m["off_policy_weight_mean"] == pytest.approx(1.0, abs=1e-4)
        assert m["off_policy_truncated_fraction"] == 0.0


def test_a_batched_tiny_swarm_shares_the_logprobs_it_sampled_with(tok):
    """agents.tiny.batched reads the log-probs off its sampling step: the same tokens as the
    node-by-node act, log-probs equal to float rounding, and its learn step corrects."""
    from agents.tiny.batched import batched_swarm

    config = GRPOConfig(max_new_tokens=5, learning_rate=3e-3, device="cpu", share_logprobs=True,
                        off_policy_correction="tis")
    env = _env()
    observations, _ = env.reset(seed=0)
    alone = {a: node.act(observations[a]) for a, node in zip(env.agents, _nodes(tok, config))}
    joint = batched_swarm(_nodes(tok, config))[0].joint_actor.act_jointly(observations)
    for a in env.agents:
        assert joint[a]["completions"] == alone[a]["completions"]
        assert joint[a]["token_ids"] == alone[a]["token_ids"]
        for q, rows in enumerate(joint[a]["logprobs"]):
            for got, want in zip(rows, alone[a]["logprobs"][q]):
                assert np.allclose(got, want, atol=1e-4)
    history = sapo_env.runtime.run(_env(), batched_swarm(_nodes(tok, config)), seed=0,
                                   progress=False)
    assert sum(m["off_policy_groups"] for r in history.learn_metrics for m in r.values()) > 0


# --- the length-normalised F-TIS statistic and the rescue gate ---------------------------------

def test_the_mean_statistic_divides_by_the_completion_tokens():
    old = torch.tensor([[-1.0, -2.0, NAN], [-0.5, -0.5, -0.5], [NAN, NAN, NAN]])
    sender = torch.tensor([[-3.0, -1.0, 0.0], [-0.5, -0.5, -0.5], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    assert sequence_log_ratio(old, sender, mask, "mean").tolist() == [-0.5, 0.0, 0.0]
    with pytest.raises(ValueError, match="statistic"):
        sequence_log_ratio(old, sender, mask, "max")


def test_far_counts_say_what_each_statistic_would_drop():
    # 10 tokens, sender 0.6 nats a token likelier: sum 6 (under 50), mean 0.6 (over 0.5)
    old = torch.full((2, 10), -1.6)
    sender = torch.full((2, 10), -1.0)
    mask = torch.ones(2, 10)
    advantages = torch.tensor([-1.0, 1.0])  # only a negative advantage can be dropped
    corrected = torch.tensor([True, True])
    by_sum = correction_weights("ftis", old, sender, advantages, mask, corrected)
    assert (by_sum.filtered, by_sum.far_sum, by_sum.far_mean) == (0, 0, 1)
    by_mean = correction_weights("ftis", old, sender, advantages, mask, corrected,
                                 statistic="mean")
    assert (by_mean.filtered, by_mean.far_sum, by_mean.far_mean) == (1, 0, 1)
    assert float(by_mean.weights[0].sum()) == 0.0 and float(by_mean.weights[1].min()) > 0


def test_graft_gate_keeps_compatible_completions_and_never_weighs_above_one():
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]])
    sender = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, 0.0]])
    # receiver minus sender per token: 0, -0.1, +1 and -1 (one token)
    old = torch.tensor([[-1.0, -1.0], [-1.1, -1.1], [0.0, 0.0], [-2.0, NAN]])
    w = graft_gate(old, sender, mask, threshold=0.8)
    assert w.tolist() == pytest.approx([1.0, math.exp(-0.1), 1.0, 0.0])
    assert graft_gate(old, sender, mask, threshold=0.95).tolist()[1] == 0.0


def test_grpo_config_checks_the_rescue_and_ftis_fields():
    for kwargs, field in [({"rescue_gate": "gate"}, "rescue_gate"),
                          ({"rescue_gate_threshold": -0.1}, "rescue_gate_threshold"),
                          ({"ftis_statistic": "max"}, "ftis_statistic"),
                          ({"ftis_mean_threshold": math.inf}, "ftis_mean_threshold")]:
        with pytest.raises(ValueError, match=field):
            GRPOConfig(**kwargs)


def test_rescue_groups_get_sender_logprobs_for_the_gate_even_without_a_correction():
    lp = (np.array([-0.5, -1.0], np.float32), np.array([-2.0], np.float32))
    sent = (np.array([5, 2], np.int32), np.array([6], np.int32))
    ids = {"rescue": [[5, 2], [6]], "ext": [[5, 2], [6]], "bare": [[5], [6]]}
    batch = [_group("rescue", False, rescue=True, logprobs=lp, token_ids=sent),
             _group("ext", False, logprobs=lp, token_ids=sent),
             _group("bare", False, rescue=True)]
    gated = training_set(batch, _encoder(ids), GRPOConfig(rescue_gate="graft", device="cpu"))
    assert [r.rescue for r in gated.rows] == [True, True, False, False, True, True]
    assert [r.sender_logprobs is not None for r in gated.rows] == [True, True] + [False] * 4
    assert (gated.rescue_groups, gated.rescue_ungated_groups) == (2, 1)
    assert (gated.corrected_groups, gated.uncorrected_groups) == (0, 0)
    plain = training_set(batch, _encoder(ids), GRPOConfig(device="cpu"))
    assert all(r.sender_logprobs is None for r in plain.rows) and plain.rescue_groups == 2


def _rescue_env(rounds=3):
    return sapo_env.parallel_env(n=3, completions_per_question=4, train_budget=4,
                                 num_external=0, max_rounds=rounds, tasks=ARITHMETIC,
                                 system_prompt="", answer_format=digit_of,
                                 shared_questions=True, rescue=True)


@pytest.mark.parametrize("threshold", [0.0, 2.0])
def test_tiny_nodes_train_on_rescue_groups_weighed_by_the_gate(tok, threshold):
    """Three nodes of different weights answer the same questions; every all-fail group with
    a solved peer group is replaced and the gate weighs the peer completions: all of them
    count at threshold 0 (weights in (0, 1]), none at 2 (a weight is at most 1)."""
    config = GRPOConfig(max_new_tokens=5, learning_rate=3e-3, device="cpu", share_logprobs=True,
                        rescue_gate="graft", rescue_gate_threshold=threshold)
    nodes = [GRPOAgent(tiny_llama(tok, seed=s), tok, config, seed=i, num_external=0)
             for i, s in enumerate((10, 11, 12))]
    history = sapo_env.runtime.run(_rescue_env(), nodes, seed=0, progress=False)
    rescued = sum(info["rescued_groups"] for r in history.infos for info in r.values())
    metrics = [m for per_round in history.learn_metrics for m in per_round.values()
               if m.get("rescue_groups")]
    assert rescued > 0 and sum(m["rescue_groups"] for m in metrics) == rescued
    gated = sum(m["rescue_gated_completions"] for m in metrics)
    # a completion the tokenizer re-encodes otherwise than it was sampled cannot be gated
    assert gated > 0 and sum(m["rescue_ungated_groups"] for m in metrics) < rescued
    zero = sum(m["rescue_gate_zero"] for m in metrics)
    if threshold == 0.0:
        assert zero == 0 and all(0 < m["rescue_gate_mean"] <= 1 for m in metrics)
    else:
        assert zero == gated and all(m["rescue_gate_mean"] == 0 for m in metrics
                                     if m["rescue_gated_completions"])
