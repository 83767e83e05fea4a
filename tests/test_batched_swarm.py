"""A batched swarm of tiny GRPO nodes equals the same nodes run one by one (agents.tiny.batched)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_lm import tiny_llama  # noqa: E402

import sapo_env  # noqa: E402
import sapo_env.runtime  # noqa: E402
from agents.lm.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402
from agents.tiny.grouped_llama import grouped_forward, stack_weights  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARITHMETIC = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                         "max_digits": 1})]
CONFIG = GRPOConfig(max_new_tokens=10, learning_rate=3e-3, device="cpu")


def nodes(tok, n=3, config=CONFIG, hidden=64):
    """n GRPO agents on tiny Llamas of different weights; a second call gives equal copies."""
    return [GRPOAgent(tiny_llama(tok, seed=10 + i, hidden=hidden), tok, config, seed=i,
                      num_external=1)
            for i in range(n)]


def digit_of(completion):
    """Untrained models never answer right; reading a digit off the completion's characters
    makes about one completion in ten right, so groups carry advantages to learn from."""
    return str(sum(map(ord, completion)) % 10)


def env_of(n=3, rounds=3, **kwargs):
    return sapo_env.parallel_env(n=n, completions_per_question=4, train_budget=3,
                                 max_rounds=rounds, tasks=ARITHMETIC, system_prompt="",
                                 answer_format=digit_of, **kwargs)


def padded(tok, texts_per_model):
    """(N, B, T) left-padded ids, mask and positions of each model's texts."""
    encoded = [[tok(t, add_special_tokens=False)["input_ids"] for t in texts]
               for texts in texts_per_model]
    width = max(len(ids) for texts in encoded for ids in texts)
    shape = (len(encoded), max(len(t) for t in encoded), width)
    ids = torch.full(shape, tok.pad_token_id)
    mask = torch.zeros(shape, dtype=torch.long)
    for n, texts in enumerate(encoded):
        for b, row in enumerate(texts):
            ids[n, b, width - len(row):] = torch.tensor(row)
            mask[n, b, width - len(row):] = 1
    return ids, mask, (mask.cumsum(dim=2) - 1).clamp(min=0)


def test_grouped_forward_equals_each_models_own_forward(tok):
    models = [tiny_llama(tok, seed=s) for s in range(3)]
    texts = [["What is 3 + 4?", "12"], ["<answer>7</answer>", "a"], ["x y z", "9 - 2 ="]]
    ids, mask, positions = padded(tok, texts)
    with torch.no_grad():
        logits, _ = grouped_forward(stack_weights(models), models[0].config, ids, mask, positions)
        for n, model in enumerate(models):
            own = model(input_ids=ids[n], attention_mask=mask[n], position_ids=positions[n]).logits
            real = mask[n].bool()
            assert torch.allclose(logits[n][real], own[real], atol=1e-5), n


def test_cached_steps_equal_a_full_forward(tok):
    models = [tiny_llama(tok, seed=s) for s in range(2)]
    ids, mask, positions = padded(tok, [["What is 3 + 4?", "1 + 1"], ["abc", "<answer>"]])
    weights, config = stack_weights(models), models[0].config
    with torch.no_grad():
        full, _ = grouped_forward(weights, config, ids, mask, positions)
        _, cache = grouped_forward(weights, config, ids[:, :, :-2], mask[:, :, :-2],
                                   positions[:, :, :-2])
        for t in (-2, -1):
            step, cache = grouped_forward(weights, config, ids[:, :, t:][:, :, :1],
                                          mask[:, :, t:][:, :, :1],
                                          positions[:, :, t:][:, :, :1], cache=cache)
            assert torch.allclose(step[:, :, 0], full[:, :, t], atol=1e-5)


def test_gradients_reach_each_model_alone(tok):
    models = [tiny_llama(tok, seed=s) for s in range(2)]
    ids, mask, positions = padded(tok, [["What is 3 + 4?"], ["abc"]])
    logits, _ = grouped_forward(stack_weights(models), models[0].config, ids, mask, positions)
    logits[0].sum().backward()  # depends on model 0 only
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in models[0].parameters())
    assert all(p.grad is None or not p.grad.any() for p in models[1].parameters())


def test_a_batched_round_equals_the_nodes_one_by_one(tok):
    env = env_of()
    observations, _ = env.reset(seed=2)  # a seed whose first round has rewards
    alone, together = nodes(tok), batched_swarm(nodes(tok))
    joint = together[0].joint_actor
    expected = {a: agent.act(observations[a]) for a, agent in zip(env.agents, alone)}
    actions = joint.act_jointly(observations)
    assert actions == expected
    observations, *_ = env.step(actions)
    batches = {a: observations[a]["batch"] for a in env.agents}
    assert any(any(g["advantages"]) for b in batches.values() for g in b)  # something to learn
    expected = {a: agent.learn(batches[a]) for a, agent in zip(env.agents, alone)}
    learned = joint.learn_jointly(batches)
    for a, one, other in zip(env.agents, alone, together):
        for key in ("loss", "grad_norm", "clip_fraction", "tokens", "groups"):
            assert learned[a][key] == pytest.approx(expected[a][key], rel=1e-4, abs=1e-6), key
        for p, q in zip(one.model.parameters(), other.model.parameters()):
            # Adam's first moment after one step is (1 - beta1) x the clipped gradient: equal
            # to float rounding. Adam divides by |gradient|, which turns rounding in a
            # near-zero element into up to a learning rate's step, hence the looser weights.
            moment = one.optimizer.state[p]["exp_avg"], other.optimizer.state[q]["exp_avg"]
            assert torch.allclose(*moment, rtol=1e-4, atol=1e-8)
            assert torch.allclose(p, q, atol=CONFIG.learning_rate * 1e-2)
        assert one.steps == other.steps == 1


def test_sapo_env_run_with_a_batched_swarm_equals_node_by_node(tok):
    def history(agents):
        return sapo_env.runtime.run(env_of(rounds=4), agents, seed=1, progress=False)

    alone = history(nodes(tok))
    calls = []
    together = batched_swarm(nodes(tok))
    joint = together[0].joint_actor
    learn = joint.learn_jointly
    joint.learn_jointly = lambda batches: calls.append(sorted(batches)) or learn(batches)
    batched = history(together)
    assert calls == [["node_0", "node_1", "node_2"]] * 4  # the runner learned jointly
    assert (batched.rewards == alone.rewards).all()
    assert batched.rewards.any()


def test_a_node_that_answers_nothing_draws_nothing(tok):
    env = env_of(n=2, num_external={"node_0": 3, "node_1": 1})
    observations, _ = env.reset(seed=0)
    together = batched_swarm(nodes(tok, n=2))
    state = together[0].rng.state_dict()
    actions = together[0].joint_actor.act_jointly(observations)
    assert actions["node_0"]["completions"] == ()
    assert len(actions["node_1"]["completions"]) == 2
    assert together[0].rng.state_dict()["cpu"].equal(state["cpu"])


@pytest.mark.parametrize("change, field", [
    ({"use_lora": True}, "use_lora"), ({"beta": 0.1}, "beta"),
    ({"temperature": 0.7}, "temperature"),
])
def test_unsupported_swarms_are_refused_by_name(tok, change, field):
    import dataclasses

    agents = nodes(tok, n=1) + nodes(tok, n=1, config=dataclasses.replace(CONFIG, **change))
    with pytest.raises(ValueError, match=field):
        batched_swarm(agents)


def test_models_of_other_shapes_are_refused(tok):
    agents = nodes(tok, n=1) + nodes(tok, n=1, hidden=32)
    with pytest.raises(ValueError, match="configuration differs"):
        batched_swarm(agents)


def test_one_batched_draw_is_each_nodes_own_multinomial(tok):
    """What ``_sample`` relies on: ``torch.multinomial(p, 1)`` is ``argmax(p / E)`` with E
    exponential draws of the stream, so the batched draw takes from each node's stream exactly
    what a multinomial per node takes, and draws the same tokens."""
    from agents.tiny.batched import _sample

    agents = nodes(tok, n=3)
    probs = torch.softmax(torch.randn(3, 6, 20, generator=torch.Generator().manual_seed(0)), -1)
    widths, drawing = [6, 4, 2], [True, True, False]
    start = [agent.rng.state_dict() for agent in agents]
    expected = []
    for agent, width, draws in zip(agents, widths, drawing):
        if draws:
            with agent.rng.scope():
                expected.append(torch.multinomial(probs[len(expected), :width], 1).squeeze(1))
    after = [agent.rng.state_dict()["cpu"] for agent in agents]
    for agent, state in zip(agents, start):
        agent.rng.load_state_dict(state)
    drawn = _sample(agents, probs, widths, drawing)
    assert torch.equal(drawn[0], expected[0]) and torch.equal(drawn[1, :4], expected[1])
    assert all(agent.rng.state_dict()["cpu"].equal(s) for agent, s in zip(agents, after))
    with pytest.raises(RuntimeError, match="nan"):
        _sample(agents, probs.index_fill(2, torch.tensor([0]), float("nan")), widths, drawing)
