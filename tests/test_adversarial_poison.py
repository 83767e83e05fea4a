"""The poison attack (agents.hostile.adversarial) at odd L: the first ceil(L/2) completions of each
group are the right answer carrying the injected line, the rest the inner node's own, in place
(the docstring's composition, where L // 2 and ceil(L / 2) differ)."""

from __future__ import annotations

import pytest

import sapo_env
from agents import DemonstratorAgent
from agents.hostile.adversarial import AdversarialAgent
from agents.sim.injection import INJECTED_LINE, carries
from sapo_env.tasks import reference_answer, resolve

ARITHMETIC = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                         "max_digits": 1})]


class Numbered:
    """An inner node whose completion k of every group says ``attempt k`` (a wrong answer), so
    that a completion out of its place shows."""

    def act(self, observation):
        L = observation["completions_per_question"]
        return {"completions": tuple(tuple(f"attempt {k}\n<answer>none</answer>" for k in range(L))
                                     for _ in observation["questions"]),
                "num_external": 1}

    def learn(self, batch):
        return {}


@pytest.mark.parametrize("L, poisoned", [(1, 1), (3, 2), (5, 3), (4, 2)])
def test_poison_takes_the_first_ceil_half_of_each_group_and_keeps_the_rest(L, poisoned):
    env = sapo_env.parallel_env(n=2, max_rounds=1, completions_per_question=L,
                                train_budget=4, num_external=1, tasks=ARITHMETIC)
    observations, _ = env.reset(seed=0)
    observation = observations["node_1"]
    action = AdversarialAgent(Numbered(), "poison", seed=0).act(observation)
    own = Numbered().act(observation)
    assert action["num_external"] == own["num_external"] == 1  # the inner node's J
    assert len(action["completions"]) == len(observation["questions"]) == 3
    for question, group, mine in zip(observation["questions"], action["completions"],
                                     own["completions"]):
        answer = reference_answer(resolve(question["ref"]))
        assert len(group) == L
        assert group[:poisoned] == (f"{INJECTED_LINE}\n<answer>{answer}</answer>",) * poisoned
        assert tuple(group[poisoned:]) == tuple(mine[poisoned:])  # its own, in their places
        assert [carries(text) for text in group] == [True] * poisoned + [False] * (L - poisoned)
    _, _, _, _, infos = env.step({"node_0": DemonstratorAgent(seed=0).act(observations["node_0"]),
                                  "node_1": action})
    assert infos["node_1"]["generated_completions"] == 3 * L
    pooled = env.state_dict()["pool"]["groups"]
    from_poisoner = [g for g in pooled if g["source"] == "node_1"]
    assert len(from_poisoner) == 3
    for group in from_poisoner:  # the verifier rewards every poisoned completion in full
        assert group["rewards"][:poisoned].tolist() == [1.0] * poisoned
        assert (group["rewards"][poisoned:] < 1.0).all()
