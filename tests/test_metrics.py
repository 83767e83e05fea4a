"""Metric math on hand-made histories; held-out evaluation and TensorBoard on tiny real runs."""

from __future__ import annotations

import numpy as np
import pytest

import sapo_env
import sapo_env.runtime
from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig
from sapo_env.runtime import History, metrics


def make_history(rewards, infos=None, learn=None) -> History:
    rewards = np.asarray(rewards, dtype=np.float64)
    agents = tuple(f"node_{i}" for i in range(rewards.shape[1]))
    return History(agents=agents, config=SwarmConfig(n_agents=len(agents)), rewards=rewards,
                   num_external=np.zeros(rewards.shape, dtype=np.int64),
                   generated=np.full(rewards.shape, 64, dtype=np.int64),
                   infos=infos if infos is not None else [{} for _ in rewards],
                   learn_metrics=learn if learn is not None else [{} for _ in rewards])


def test_cumulative_reward_both_definitions():
    h = make_history([[0.0, 1.0], [0.5, 0.5], [1.0, 1.0]])
    assert metrics.cumulative_reward(h) == pytest.approx(0.5 + 0.5 + 1.0)
    assert metrics.cumulative_reward(h, "total") == pytest.approx(4.0)
    with pytest.raises(ValueError, match="kind"):
        metrics.cumulative_reward(h, "median")


def test_moving_average_is_trailing_and_skips_nan():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(metrics.moving_average(x, 2), [1.0, 1.5, 2.5, 3.5, 4.5])
    np.testing.assert_allclose(metrics.moving_average(x, 10), [1, 1.5, 2, 2.5, 3])
    y = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 2.0]])
    out = metrics.moving_average(y, 2)
    np.testing.assert_allclose(out[:, 0], [1.0, 1.0, 3.0])
    assert np.isnan(out[0, 1]) and np.isnan(out[1, 1]) and out[2, 1] == 2.0
    with pytest.raises(ValueError, match="window"):
        metrics.moving_average(x, 0)


def test_smoothed_reward_band_is_min_max_of_node_averages():
    h = make_history([[0.0, 1.0, 0.5], [0.0, 1.0, 0.5], [1.0, 0.0, 0.5]])
    s = metrics.smoothed_reward(h, window=2)
    np.testing.assert_allclose(s.mean, [0.5, 0.5, 0.5])
    np.testing.assert_allclose(s.low, [0.0, 0.0, 0.5])
    np.testing.assert_allclose(s.high, [1.0, 1.0, 0.5])
    assert s.per_node.shape == (3, 3)


def task_infos():
    return [
        {"node_0": {"task_scores": {"a": 1.0}}, "node_1": {"task_scores": {"a": 0.0, "b": 1.0}}},
        {"node_0": {"task_scores": {"b": 0.5}}, "node_1": {"task_scores": {"b": 0.0}}},
    ]


def test_task_rewards_and_curves():
    h = make_history([[1, 0.5], [0.5, 0]], infos=task_infos())
    tasks = metrics.task_rewards(h)
    assert sorted(tasks) == ["a", "b"]
    np.testing.assert_array_equal(tasks["a"], [[1.0, 0.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(tasks["b"], [[np.nan, 1.0], [0.5, 0.0]])
    curves = metrics.task_curves(h, window=1)
    np.testing.assert_allclose(curves["a"], [0.5, np.nan])
    np.testing.assert_allclose(curves["b"], [1.0, 0.25])


def test_pool_health():
    infos = [
        {"node_0": {"shared_groups": 2, "shared_mean_reward": 1.0, "pool_size": 4,
                    "pool_size_filtered": 1, "taken_by_others": 1, "external_groups": 2,
                    "external_shortfall": 0},
         "node_1": {"shared_groups": 2, "shared_mean_reward": 0.0, "pool_size": 4,
                    "pool_size_filtered": 3, "taken_by_others": 2, "external_groups": 1,
                    "external_shortfall": 1}},
        {"node_0": {"shared_groups": 0, "shared_mean_reward": None, "pool_size": 0,
                    "pool_size_filtered": 0, "taken_by_others": 0, "external_groups": 0,
                    "external_shortfall": 2},
         "node_1": {"shared_groups": 1, "shared_mean_reward": 0.5, "pool_size": 2,
                    "pool_size_filtered": 2, "taken_by_others": 0, "external_groups": 0,
                    "external_shortfall": 2}},
    ]
    p = metrics.pool_health(make_history([[0, 0], [0, 0]], infos=infos))
    np.testing.assert_allclose(p.shared, [4, 1])
    np.testing.assert_allclose(p.shared_mean_reward, [0.5, 0.5])
    np.testing.assert_allclose(p.informative_fraction, [0.5, 1.0])
    np.testing.assert_allclose(p.informative, [2.0, 1.0])
    np.testing.assert_allclose(p.contribution, [[1, 2], [0, 0]])
    np.testing.assert_allclose(p.consumption, [[2, 1], [0, 0]])
    np.testing.assert_allclose(p.external_shortfall, [[0, 1], [2, 2]])


def test_propagation_first_half_all():
    curves = np.array([[0.0, 0.0, 0.0, 0.0],
                       [0.6, 0.0, 0.0, 0.0],
                       [0.7, 0.5, 0.0, 0.0],
                       [0.7, 0.6, 0.2, 0.0],
                       [0.7, 0.6, 0.9, 0.0]])
    p = metrics.propagation_of(curves, ("a", "b", "c", "d"), threshold=0.5)
    assert (p.first_round, p.first_node) == (1, "a")
    assert p.rounds_to_half == 1  # b at round 2
    assert p.rounds_to_all is None  # d never
    assert p.node_rounds == {"a": 1, "b": 2, "c": 4, "d": None}
    none = metrics.propagation_of(curves, ("a", "b", "c", "d"), threshold=2.0)
    assert none.first_round is None and none.rounds_to_half is None


def test_propagation_per_task_and_learn_metric():
    infos = [{"node_0": {"task_scores": {"t": float(r >= 1)}},
              "node_1": {"task_scores": {"t": float(r >= 3)}}} for r in range(5)]
    learn = [{"node_0": {"tag_prob": 0.1 * r}, "node_1": {}} for r in range(5)]
    h = make_history(np.zeros((5, 2)), infos=infos, learn=learn)
    p = metrics.propagation(h, threshold=0.5, window=1)["t"]
    assert (p.first_round, p.first_node, p.rounds_to_half, p.rounds_to_all) == (1, "node_0", 0, 2)
    tag = metrics.learn_metric(h, "tag_prob")
    np.testing.assert_allclose(tag[:, 0], [0.0, 0.1, 0.2, 0.3, 0.4])
    assert np.isnan(tag[:, 1]).all()


def test_held_out_questions_are_fixed_and_outside_training_blocks():
    config = SwarmConfig(n_agents=2)
    a = metrics.held_out_questions(config, 12, seed=1)
    b = metrics.held_out_questions(config, 12, seed=1)
    c = metrics.held_out_questions(config, 12, seed=2)
    assert [d.question["id"] for d in a] == [d.question["id"] for d in b]
    assert [d.question["id"] for d in a] != [d.question["id"] for d in c]
    last_block = 2**62 // MAX_QUESTIONS_PER_STREAM - 1
    for d in a:
        assert d.question["ref"]["seed"] // MAX_QUESTIONS_PER_STREAM == last_block
    env = sapo_env.parallel_env(n=2)
    observations, _ = env.reset(seed=0)
    for q in observations["node_0"]["questions"]:
        assert q["ref"]["seed"] // MAX_QUESTIONS_PER_STREAM < last_block


def test_held_out_evaluator_and_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from agents import DemonstratorAgent
    from sapo_env.runtime.tensorboard import TensorBoardCallback

    env = sapo_env.parallel_env(n=2, max_rounds=5)
    evaluator = metrics.HeldOutEvaluator(every=2, n_questions=8, seed=0)
    board = TensorBoardCallback(tmp_path, run_name="tiny", held_out=evaluator)
    agents = [DemonstratorAgent(accuracy=1.0, seed=0), DemonstratorAgent(accuracy=0.0, seed=1)]
    sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=[evaluator, board])
    result = evaluator.result
    assert result.rounds == [1, 3, 4]  # every 2 rounds, and after the last
    scores = result.as_array()
    assert scores.shape == (3, 2)
    assert scores[:, 0].min() > scores[:, 1].max()
    accumulator = EventAccumulator(str(tmp_path / "tiny"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    assert {"reward/node_0", "reward/swarm_mean", "pool/shared", "held_out/node_1",
            "sampling/num_external/node_0"} <= tags
    assert len(accumulator.Scalars("reward/swarm_mean")) == 5


def test_a_node_that_sits_out_or_has_left_scores_nan_in_held_out(tmp_path):
    """An offline node's act returns None, a node that has left returns {"leave": True}: the
    evaluation records NaN for it instead of raising (TypeError/KeyError before)."""
    from agents import DemonstratorAgent
    from agents.wrappers.churning import ChurningAgent
    from sapo_env.runtime.tensorboard import TensorBoardCallback

    env = sapo_env.parallel_env(n=3, max_rounds=4)
    evaluator = metrics.HeldOutEvaluator(every=1, n_questions=8, seed=0)
    board = TensorBoardCallback(tmp_path, run_name="churn", held_out=evaluator)
    nodes = [DemonstratorAgent(accuracy=1.0, seed=0),
             ChurningAgent(DemonstratorAgent(seed=1), offline_probability=0.5, seed=1),
             ChurningAgent(DemonstratorAgent(seed=2), leave_round=2)]
    sapo_env.runtime.run(env, nodes, seed=0, progress=False, callbacks=[evaluator, board])
    scores = evaluator.result.as_array()
    assert scores[:, 0].tolist() == [1.0] * 4
    offline = [nodes[1].offline_in(r) for r in range(4)]
    assert any(offline) and not all(offline)
    assert np.isnan(scores[:, 1]).tolist() == offline
    assert np.isnan(evaluator.result.as_task_array()[:, 1]).all(axis=1).tolist() == offline
    assert not np.isnan(scores[:2, 2]).any() and np.isnan(scores[2:, 2]).all()


def test_held_out_evaluation_does_not_change_a_simulated_run():
    from agents.sim.simulated import simulated_swarm

    def rewards(callbacks):
        env = sapo_env.parallel_env(n=2, max_rounds=6)
        nodes = simulated_swarm(env.possible_agents, seed=3, num_external=2)
        return sapo_env.runtime.run(env, nodes, seed=3, progress=False, callbacks=callbacks).rewards

    evaluator = metrics.HeldOutEvaluator(every=2, n_questions=8)
    np.testing.assert_array_equal(rewards([]), rewards([evaluator]))
    assert evaluator.result.as_array().shape == (3, 2)
