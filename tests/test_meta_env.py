"""The meta environments (sapo_experiments.meta): API checks, seeding, SuperSuit, a PPO toy problem,
the ratio features and SB3Ratio, and the training example's smoke run."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("supersuit")

import cloudpickle  # noqa: E402  (a dependency of stable-baselines3 and SuperSuit)
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

from agents.ratio.features import FEATURE_NAMES, RatioFeatures, feature_space  # noqa: E402
from agents.ratio.rules import FixedRatio  # noqa: E402
from agents.ratio.sb3 import SB3Ratio  # noqa: E402
from sapo_experiments import meta  # noqa: E402

# 3 nodes, budget 3 (J in 0..3), 3 completions a question, 8-round episodes: milliseconds a step
SMALL_META = dict(n=3, completions_per_question=3, train_budget=3, num_external=1,
                  max_rounds=8)


def play(env, seed, policy=lambda t, a: (t + int(a[-1])) % 4):
    """An episode of the parallel meta env with scripted J; everything it returned."""
    observations, _ = env.reset(seed=seed)
    trace, t = [observations], 0
    while env.agents:
        out = env.step({a: policy(t, a) for a in env.agents})
        trace.append(out)
        t += 1
    return trace


def assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def test_parallel_env_passes_pettingzoo_api_and_seed_tests():
    env = meta.parallel_env(**SMALL_META)
    parallel_api_test(env, num_cycles=20)
    parallel_seed_test(lambda: meta.parallel_env(**SMALL_META))
    assert env.metadata["name"] == "sapo_meta_ratio_v0"
    assert env.action_space("node_0").n == 4
    assert env.observation_space("node_0").shape == (len(FEATURE_NAMES),)


def test_aec_env_passes_pettingzoo_api_test_and_the_features_doctest():
    import doctest

    from pettingzoo.test import api_test

    import agents.ratio.features

    api_test(meta.env(**SMALL_META), num_cycles=20)
    result = doctest.testmod(agents.ratio.features)
    assert result.attempted > 0 and result.failed == 0


def test_same_seed_same_episode_and_a_new_episode_without_one():
    env = meta.parallel_env(**SMALL_META)
    first = play(env, 7)
    second = play(env, None)  # continues the seeded stream: the next, different, swarm
    assert_same(first, play(meta.parallel_env(**SMALL_META), 7))
    assert len(first) == 1 + 8

    def rewards(trace):
        return [step[1] for step in trace[1:]]

    assert any(r["node_0"] > 0 for r in rewards(first))  # the learners do answer
    assert rewards(second) != rewards(first)


def test_reset_with_a_seed_after_other_resets_gives_back_that_seeds_episode():
    """On one env: reset(seed=7) twice is the same episode; reset() without a seed then
    continues the stream (a different episode each time, the same ones as on a fresh env seeded
    7); reset(seed=7) after them is the first episode again."""
    env = meta.parallel_env(**SMALL_META)
    first = play(env, 7)
    assert_same(first, play(env, 7))
    second, third = play(env, None), play(env, None)
    assert_same(first, play(env, 7))

    def rewards(trace):
        return [step[1] for step in trace[1:]]

    assert rewards(second) != rewards(first) and rewards(third) != rewards(second)
    fresh = meta.parallel_env(**SMALL_META)
    play(fresh, 7)
    assert_same(second, play(fresh, None))


def test_the_focal_env_reseeds_the_same_way():
    def episode(env, seed):
        trace = [env.reset(seed=seed)]
        truncated = False
        while not truncated:
            step = env.step(np.int64(1))
            truncated = step[3]
            trace.append(step)
        return trace

    env = meta.FocalRatioEnv(**SMALL_META)
    first = episode(env, 5)
    assert_same(first, episode(env, 5))
    other = episode(env, None)
    assert [s[1] for s in other[1:]] != [s[1] for s in first[1:]]
    assert_same(first, episode(env, 5))


def test_actions_set_the_next_rounds_j_and_the_reward_modes():
    env = meta.parallel_env(**SMALL_META, generation_cost=0.01)
    env.reset(seed=0)
    _, rewards, _, _, infos = env.step({"node_0": 3, "node_1": 0, "node_2": 2})
    assert [infos[a]["num_external"] for a in env.agents] == [1, 1, 1]  # round 0: the config's
    _, rewards, _, _, infos = env.step({"node_0": 3, "node_1": 0, "node_2": 2})
    assert [infos[a]["num_external"] for a in env.agents] == [3, 0, 2]
    assert infos["node_0"]["generated_completions"] == 0 and rewards["node_0"] == 0.0
    for a in env.agents:  # own reward minus 0.01 per completion
        assert rewards[a] == pytest.approx(infos[a]["round_reward"]
                                           - 0.01 * infos[a]["generated_completions"])
    with pytest.raises(ValueError, match=r"num_external of node_1 must be an int in \[0, 3\]"):
        env.step({"node_0": 0, "node_1": 4, "node_2": 0})

    coop = meta.parallel_env(**SMALL_META, reward="swarm_mean", generation_cost=0.01)
    coop.reset(seed=0)
    _, rewards, _, _, infos = coop.step({a: 1 for a in coop.agents})
    net = [infos[a]["round_reward"] - 0.01 * infos[a]["generated_completions"]
           for a in coop.possible_agents]
    assert list(rewards.values()) == pytest.approx([np.mean(net)] * 3)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="reward must be one of"):
        meta.parallel_env(**SMALL_META, reward="best")
    with pytest.raises(ValueError, match="generation_cost must be a finite number >= 0"):
        meta.parallel_env(**SMALL_META, generation_cost=-1)
    with pytest.raises(ValueError, match="unknown SwarmConfig field "):
        meta.parallel_env(**SMALL_META, bogus=1)
    with pytest.raises(ValueError, match="focal must be one of the nodes"):
        meta.FocalRatioEnv(**SMALL_META, focal="node_9")
    with pytest.raises(ValueError, match="a mapping must name every node but the focal one"):
        meta.FocalRatioEnv(**SMALL_META, others={"node_1": FixedRatio(1)})


def test_focal_env_passes_sb3_check_env_and_drives_the_others():
    from stable_baselines3.common.env_checker import check_env

    check_env(meta.FocalRatioEnv(**SMALL_META))
    env = meta.FocalRatioEnv(**SMALL_META, others={"node_1": FixedRatio(0),
                                                   "node_2": FixedRatio(3)})
    observation, _ = env.reset(seed=1)
    assert env.observation_space.contains(observation)
    truncated, steps = False, 0
    while not truncated:
        observation, reward, terminated, truncated, info = env.step(np.int64(2))
        steps += 1
    assert steps == 8 and not terminated and info["num_external"] == 2
    assert env.inner.env.round == 8
    # the others followed their policies from round 1 on
    assert env.inner.observations["node_2"]["num_external"] == 3
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)


def test_supersuit_vector_env_steps_and_pickles():
    import supersuit as ss

    env = meta.parallel_env(**SMALL_META)
    env.reset(seed=0)
    clone = cloudpickle.loads(cloudpickle.dumps(env))  # mid-episode, learners and all
    actions = {a: 1 for a in env.agents}
    assert_same(clone.step(actions), env.step(actions))

    venv = ss.pettingzoo_env_to_vec_env_v1(meta.parallel_env(**SMALL_META))
    venv = ss.concat_vec_envs_v1(venv, 2, num_cpus=0, base_class="stable_baselines3")
    observations = venv.reset()
    assert observations.shape == (6, len(FEATURE_NAMES))  # 2 copies x 3 nodes
    dones = []
    for _ in range(9):  # past the end of an episode: SuperSuit resets it
        observations, rewards, done, infos = venv.step(np.ones(6, dtype=np.int64))
        dones.append(done.all())
    assert dones.index(True) == 7 and np.isfinite(rewards).all()
    venv.close()


@pytest.mark.slow
def test_ppo_learns_the_known_best_j():
    """Generation costs 0.25 per completion and a reward is at most 1: answering nothing
    (J = train_budget = 4) is best in every state, and PPO finds it."""
    import supersuit as ss
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed

    toy = dict(n=4, completions_per_question=2, train_budget=4, num_external=1, max_rounds=16,
               generation_cost=0.25)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        set_random_seed(0)
        venv = ss.pettingzoo_env_to_vec_env_v1(meta.parallel_env(**toy))
        venv = ss.concat_vec_envs_v1(venv, 1, num_cpus=0, base_class="stable_baselines3")
        venv.venv.reset(seed=0)
        model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=4,
                    learning_rate=3e-3, verbose=0).learn(2048)
    finally:
        torch.set_num_threads(threads)
    env = meta.parallel_env(**toy)
    observations, _ = env.reset(seed=123)  # a swarm it never trained on
    picks = []
    while env.agents:
        actions = {a: int(model.predict(observations[a], deterministic=True)[0])
                   for a in env.agents}
        picks += actions.values()
        observations, *_ = env.step(actions)
    assert np.mean(np.array(picks) == 4) >= 0.8


class Always:
    """A stand-in for a trained model: always predicts the same J."""

    def __init__(self, j):
        self.j, self.seen = j, []

    def predict(self, observation, deterministic=True):
        self.seen.append(observation)
        return np.array(self.j), None


def test_sb3_ratio_drives_sapo_run_with_the_features():
    import sapo_env.runtime
    from sapo_experiments.learners import simulated_learners

    env = sapo_env.parallel_env(n=2, max_rounds=4, train_budget=4, completions_per_question=2)
    model = Always(3)
    policies = {"node_0": SB3Ratio(model, max_rounds=4), "node_1": FixedRatio(1)}
    learners = simulated_learners(env.possible_agents, 2, np.random.SeedSequence(0))
    history = sapo_env.runtime.run(env, learners, seed=0, progress=False, ratio_policies=policies)
    assert history.num_external[:, 0].tolist() == [2, 3, 3, 3]
    assert len(model.seen) == 4 and all(feature_space().contains(o) for o in model.seen)
    assert [float(o[FEATURE_NAMES.index("progress")]) for o in model.seen] == [0, .25, .5, .75]
    with pytest.raises(ValueError, match=r"chose num_external=9, expected an int in \[0, 4\]"):
        SB3Ratio(Always(9), max_rounds=4).choose({"train_budget": 4, "num_external": 0,
                                                  "round": 0})


def test_sb3_ratio_load_round_trip(tmp_path):
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", meta.FocalRatioEnv(**SMALL_META), n_steps=8, batch_size=8)
    model.save(tmp_path / "ratio.zip")
    policy = SB3Ratio.load(tmp_path / "ratio.zip", max_rounds=8)
    j = policy.choose({"train_budget": 3, "num_external": 1, "round": 0})
    assert 0 <= j <= 3


def info(generated=8, pool=6, pool_reward=0.5, zero=0.25, taken=2, shortfall=(0, 1)):
    return {"generated_completions": generated, "pool_size_filtered": pool,
            "pool_mean_reward_filtered": pool_reward, "zero_advantage_fraction": zero,
            "local_shortfall": shortfall[0], "external_shortfall": shortfall[1],
            "taken_by_others": taken}


def test_ratio_features_values_defaults_and_bounds():
    observation = {"train_budget": 4, "num_external": 2, "round": 3}
    features = RatioFeatures(max_rounds=6, window=2)
    empty = features.values(observation)
    assert empty == {"reward_mean": 0.0, "reward_trend": 0.0, "pool_size": 0.0,
                     "pool_reward": 0.0, "zero_advantage": 1.0, "num_external": 0.5,
                     "shortfall": 0.0, "taken_by_others": 0.0, "progress": 0.5}
    for reward in (0.1, 0.3):
        features.update(reward, info())
    assert features.values(observation)["reward_trend"] == 0.0  # one window only
    features.update(0.0, info(generated=0, pool=0, pool_reward=None, zero=None))  # J = budget
    features.update(0.7, info(pool=100, taken=100))
    values = features.values(observation)
    assert values["reward_mean"] == pytest.approx(0.5)  # 0.3, 0.7: the skipped round ignored
    assert values["reward_trend"] == pytest.approx(0.5 - 0.1)
    assert values["pool_reward"] == pytest.approx(0.5)  # the empty pool ignored
    assert values["pool_size"] == pytest.approx(12.5)  # mean(0, 100) per budget of 4
    vector = features.vector(observation)
    assert vector.dtype == np.float32 and feature_space().contains(vector)
    assert vector[FEATURE_NAMES.index("pool_size")] == 4.0  # clipped
    assert np.isfinite(features.vector({"train_budget": 0, "num_external": 0,
                                        "round": 99})).all()
    with pytest.raises(ValueError, match="reward must be a finite number, got nan"):
        features.update(float("nan"), info())
    with pytest.raises(ValueError, match="window must be an int >= 1, got 0"):
        RatioFeatures(max_rounds=6, window=0)


@pytest.mark.slow
def test_training_example_quick_run(tmp_path, capsys):
    example = _training_example()
    results = example.main(["--quick", "--out", str(tmp_path)])
    assert set(results) == {"fixed J=0", "fixed J=4", "PPO (learned)"}
    assert (tmp_path / "ppo_ratio.zip").exists() and (tmp_path / "tensorboard").is_dir()
    out = capsys.readouterr().out
    assert "held-out evaluation" in out and "tensorboard --logdir" in out


def _training_example():
    import importlib.util
    from pathlib import Path

    pytest.importorskip("supersuit")
    path = Path(__file__).resolve().parents[1] / "examples" / "train_meta_agent.py"
    spec = importlib.util.spec_from_file_location("train_meta_agent", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_training_example_takes_the_learner_by_import_path(capsys):
    """The nodes PPO trains among are the calibrated simulated learners unless ``--learner``
    names another factory (the simulated track's, to evaluate the model on its tracks)."""
    from sapo_experiments.bench_ratio.tracks import BENCH_LEARNER
    from sapo_experiments.learners import simulated_learners

    example = _training_example()
    assert example.parse_args([]).learner is simulated_learners
    args = example.parse_args(["--learner", "sapo_experiments.bench_ratio.tracks:BENCH_LEARNER"])
    assert args.learner is BENCH_LEARNER
    with pytest.raises(SystemExit):
        example.parse_args(["--learner", "no_such_module:factory"])
    assert "--learner: invalid" in capsys.readouterr().err
