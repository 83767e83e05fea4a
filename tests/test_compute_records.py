"""What a round cost, in every record: the GRPO learners' ``generated_tokens`` and
``optimizer_steps`` learn metrics (agents.grpo, agents.tiny.batched), on tiny models built in
memory (CPU, offline, a few seconds)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_lm import tiny_llama  # noqa: E402

import sapo_env  # noqa: E402
from agents.generation import sampled_token_count  # noqa: E402
from agents.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402
from sapo_env import make_observation  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# share_logprobs puts each completion's sampled tokens (EOS included where it ended) in the
# action: the count generated_tokens must equal, read from what was sampled
CONFIG = GRPOConfig(max_new_tokens=10, learning_rate=1e-2, device="cpu", share_logprobs=True)
ARITHMETIC = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                         "max_digits": 1})]


def observation(copies=3, questions=("What is 1 + 2?", "Calculate 14 * 2.")):
    return make_observation(
        round=0, system_prompt="", completions_per_question=copies, train_budget=2,
        num_external=0,
        questions=tuple({"id": f"q{i}", "task": "basic_arithmetic", "prompt": q, "ref": {}}
                        for i, q in enumerate(questions)))


def group(completions, advantages):
    return {
        "id": "node_0/r0/q0", "source": "node_0", "round": 0, "task": "basic_arithmetic",
        "question": "What is 1 + 2?", "system_prompt": "", "answer": "3", "ref": {},
        "completions": tuple(completions),
        "rewards": np.clip(np.asarray(advantages, dtype=np.float32), 0, 1),
        "advantages": np.asarray(advantages, dtype=np.float32), "local": True,
    }


def sampled_in(action):
    """Tokens sampled for an action, read off its shared token ids."""
    return sum(len(tokens) for question in action["token_ids"] for tokens in question)


def agent_of(tok, config=CONFIG, seed=0):
    return GRPOAgent(tiny_llama(tok, seed=seed), tok, config, seed=seed)


def test_sampled_token_count_counts_the_eos_of_rows_that_ended():
    assert sampled_token_count([[5, 6], [7, 8, 9]], max_new_tokens=3) == (2 + 1) + 3
    assert sampled_token_count([[]], max_new_tokens=3) == 1  # EOS sampled first
    assert sampled_token_count([], max_new_tokens=3) == 0


def test_generated_tokens_are_the_tokens_sampled_since_the_last_learn(tok):
    agent = agent_of(tok)
    first, second = agent.act(observation()), agent.act(observation(copies=2))
    sampled = sampled_in(first) + sampled_in(second)
    assert sampled > 0
    metrics = agent.learn([group(["3", "x", "4"], [1.0, -1.0, 0.0])])
    assert metrics["generated_tokens"] == sampled
    assert agent.learn([group(["3", "x", "4"], [1.0, -1.0, 0.0])])["generated_tokens"] == 0.0


def test_an_evaluation_does_not_count_as_generation(tok):
    agent = agent_of(tok)
    sampled = sampled_in(agent.act(observation()))
    with agent.evaluation_scope():
        assert sampled_in(agent.act(observation())) > 0
    assert agent.learn([])["generated_tokens"] == sampled


@pytest.mark.parametrize("iterations", [1, 2])
def test_optimizer_steps_are_one_per_iteration_and_none_for_nothing_to_train(tok, iterations):
    agent = agent_of(tok, dataclasses.replace(CONFIG, num_iterations=iterations))
    assert agent.learn([group(["3", "x"], [1.0, -1.0])])["optimizer_steps"] == iterations
    assert agent.steps == iterations
    assert agent.learn([])["optimizer_steps"] == 0.0
    assert agent.learn([group(["3", "4"], [0.0, 0.0])])["optimizer_steps"] == 0.0
    assert agent.steps == iterations


def test_a_batched_swarm_reports_each_nodes_own_tokens_and_steps(tok):
    env = sapo_env.parallel_env(n=3, completions_per_question=4, train_budget=3, max_rounds=2,
                                tasks=ARITHMETIC, system_prompt="",
                                num_external={"node_0": 0, "node_1": 1, "node_2": 3})
    observations, _ = env.reset(seed=2)
    agents = batched_swarm([agent_of(tok, seed=10 + i) for i in range(3)])
    joint = agents[0].joint_actor
    actions = joint.act_jointly(observations)
    sampled = {a: sampled_in(action) for a, action in actions.items()}
    assert sampled["node_2"] == 0 < sampled["node_1"] < sampled["node_0"]  # 0, 2, 3 questions
    batches = {"node_0": [group(["3", "x"], [1.0, -1.0])], "node_1": [],
               "node_2": [group(["3", "4"], [0.0, 0.0])]}
    learned = joint.learn_jointly(batches)
    assert {a: m["generated_tokens"] for a, m in learned.items()} == sampled
    assert {a: m["optimizer_steps"] for a, m in learned.items()} == {
        "node_0": 1.0, "node_1": 0.0, "node_2": 0.0}
