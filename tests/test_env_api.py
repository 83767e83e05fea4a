"""PettingZoo's own API and seed tests, and the spaces holding whatever a model prints."""

import pettingzoo
import pytest
from conftest import SMALL, fixed_actions
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import sapo_env

# api_test's advice that observations "should be" Box or Discrete does not fit text envs
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")


def test_parallel_api():
    parallel_api_test(sapo_env.parallel_env(**SMALL), num_cycles=40)


def test_fixed_protocol_passes_the_api_tests():
    fixed = dict(SMALL, questions_per_round=2)
    parallel_api_test(sapo_env.parallel_env(**fixed), num_cycles=20)
    api_test(sapo_env.env(**fixed), num_cycles=20)
    parallel_seed_test(lambda: sapo_env.parallel_env(**fixed))


def test_random_actions_change_J_and_question_counts_every_round(small_env):
    """What PettingZoo's tests do: sample(observation["action_mask"]) is always valid, while
    the sampled J moves the next round's question count around, free riding included."""
    observations, _ = small_env.reset(seed=0)
    for k, a in enumerate(small_env.agents):
        small_env.action_space(a).seed(k)
    counts = set()
    for _ in range(15):
        actions = {a: small_env.action_space(a).sample(observations[a]["action_mask"])
                   for a in small_env.agents}
        actions["node_2"] = small_env.action_space("node_2").sample()  # no mask: also valid
        observations, rewards, *_ = small_env.step(actions)
        for a in small_env.agents:
            assert len(observations[a]["questions"]) == 3 - actions[a]["num_external"]
            counts.add(len(observations[a]["questions"]))
        assert all(r <= 0.1 for r in rewards.values())  # random text scores (almost) 0
    assert counts == {0, 1, 2, 3}


def test_parallel_seed():
    parallel_seed_test(lambda: sapo_env.parallel_env(**SMALL))


def test_aec_api():
    api_test(sapo_env.env(**SMALL), num_cycles=40)


def test_aec_seed():
    seed_test(lambda: sapo_env.env(**SMALL), num_cycles=20)


def test_window_and_self_replay_pass_the_api_test():
    parallel_api_test(sapo_env.parallel_env(**SMALL, pool_window=3, pool_capacity=10,
                                            external_source="self_replay"), num_cycles=10)


def test_factories_and_registry():
    env = sapo_env.parallel_env(n=3)
    assert env.possible_agents == ["node_0", "node_1", "node_2"]
    assert env.metadata["name"] == "sapo_swarm_v0"
    assert sapo_env.parallel_env(config=sapo_env.SwarmConfig(n_agents=5)).config.n_agents == 5
    assert sapo_env.parallel_env(max_cycles=7).config.max_rounds == 7
    with pytest.raises(ValueError, match="unknown SwarmConfig field "):
        sapo_env.parallel_env(questions=3)
    assert sapo_env.parallel_env(n=5, config=sapo_env.SwarmConfig(n_agents=5)).max_num_agents == 5
    aec = sapo_env.env(n=2)
    assert isinstance(aec, pettingzoo.AECEnv)
    made = pettingzoo.make("parallel", "sapo/Swarm-v0", n=2, max_cycles=3)
    assert isinstance(made, sapo_env.SwarmEnv) and made.config.max_rounds == 3
    assert isinstance(pettingzoo.make("aec", "sapo/Swarm-v0", n=2), pettingzoo.AECEnv)


UNICODE = ["🙂🚀 emoji", "数学答案 CJK", "¬(P ∧ Q) → (P ↔ ¬Q) ∨ ⊥", "\x00 control \u200b", ""]


def test_observations_contain_any_unicode(small_env):
    observations, _ = small_env.reset(seed=0)
    texts = iter(UNICODE * 100)
    actions = {a: {"completions": tuple(tuple(next(texts) for _ in range(3)) for _ in range(2)),
                   "num_external": 3} for a in small_env.agents}
    observations, *_ = small_env.step(actions)
    for a in small_env.agents:
        space = small_env.observation_space(a)
        assert space.contains(observations[a]), a
        # groups carry this text around, in the pool and in batches (with filter none too)
    env = sapo_env.parallel_env(**SMALL, filter="none")
    env.reset(seed=0)
    observations, *_ = env.step(actions)
    texts_seen = {c for o in observations.values() for g in o["pool"] for c in g["completions"]}
    assert set(UNICODE) <= texts_seen
    assert all(env.observation_space(a).contains(observations[a]) for a in env.agents)


def test_propositional_logic_questions_fit_the_space():
    env = sapo_env.parallel_env(n=2, tasks=["propositional_logic"], max_rounds=3)
    observations, _ = env.reset(seed=0)
    assert any("∨" in q["prompt"] for q in observations["node_0"]["questions"])
    assert env.observation_space("node_0").contains(observations["node_0"])


def test_action_mask_is_in_the_observation_space(small_env):
    observations, _ = small_env.reset(seed=0)
    space = small_env.observation_space("node_0")["action_mask"]
    assert observations["node_0"]["action_mask"] == {"completions": (2, None),
                                                     "num_external": None, "share": (2, None)}
    assert space.contains(observations["node_0"]["action_mask"])
    assert not space.contains({"completions": (4, None), "num_external": None,
                               "share": (4, None)})  # more than train_budget questions
    assert space.contains(space.sample())


def test_spaces_are_cached_objects(small_env):
    assert small_env.observation_space("node_1") is small_env.observation_space("node_1")
    assert small_env.action_space("node_1") is small_env.action_space("node_1")


def test_render_ansi():
    env = sapo_env.parallel_env(**SMALL, render_mode="ansi")
    observations, _ = env.reset(seed=0)
    env.step(fixed_actions(observations))
    text = env.render()
    assert "round 0" in text and "node_2" in text and "reward" in text
    with pytest.raises(ValueError, match="render_mode"):
        sapo_env.parallel_env(render_mode="human")


def test_reset_without_seed_continues_the_stream(small_env):
    first, _ = small_env.reset(seed=3)
    second, _ = small_env.reset()
    again, _ = small_env.reset(seed=3)
    assert data_equivalence(first, again)
    assert not data_equivalence(first, second)


@pytest.mark.parametrize("kwargs,message", [
    (dict(n=8, n_agents=4), "n=8 and n_agents=4"),
    (dict(n=8, config=sapo_env.SwarmConfig(n_agents=4)), "n=8 conflicts with config.n_agents=4"),
    (dict(max_cycles=5, max_rounds=6), "max_cycles=5 and max_rounds=6"),
])
def test_conflicting_arguments_are_an_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sapo_env.parallel_env(**kwargs)


def test_unknown_node_has_no_space(small_env):
    with pytest.raises(KeyError, match="node_9"):
        small_env.observation_space("node_9")
