"""An agent whose act forgets to `return`: `run` says so instead of running silently to NaN,
while `sapo_env.churn.OFFLINE` stays the quiet way to sit a round out."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent, FixedRatio
from sapo_env.churn import OFFLINE, absence, is_offline
from sapo_env.runtime import History

CALLS = "sapo_env.runtime.agent_calls"


class Forgetful(DemonstratorAgent):
    """Builds its action and forgets to return it."""

    def act(self, observation):
        super().act(observation)


class SitsOut(DemonstratorAgent):
    """Sits the rounds in ``rounds`` out, the documented way."""

    def __init__(self, rounds, **kwargs):
        super().__init__(**kwargs)
        self.rounds = set(rounds)

    def act(self, observation):
        return OFFLINE if observation["round"] in self.rounds else super().act(observation)


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.name == CALLS]


def test_a_node_whose_act_returns_none_is_named_once(caplog):
    env = sapo_env.parallel_env(n=3, max_rounds=6)
    nodes = [Forgetful(seed=0), DemonstratorAgent(seed=1), DemonstratorAgent(seed=2)]
    with caplog.at_level(logging.WARNING, logger=CALLS):
        history = sapo_env.runtime.run(env, nodes, seed=0, progress=False)
    messages = warnings_of(caplog)
    assert len(messages) == 1, messages  # once, not every round
    assert messages[0].startswith("node_0:") and "returned None" in messages[0]
    assert "sapo_env.churn.OFFLINE" in messages[0] and "completions" in messages[0]
    assert np.isnan(history.node_rewards("node_0")).all()
    assert np.isfinite(history.cumulative_reward)


def test_every_node_returning_none_stops_the_run_in_its_first_round():
    env = sapo_env.parallel_env(n=3, max_rounds=50)
    with pytest.raises(ValueError, match=r"round 0: the act of every node \(node_0, node_1, "
                                         r"node_2\) returned None.*OFFLINE"):
        sapo_env.runtime.run(env, [Forgetful(seed=i) for i in range(3)], seed=0,
                             progress=False)


def test_offline_sits_out_quietly_even_when_every_node_does(caplog):
    """The documented sentinel: no warning, no error, no numpy warning, a ratio policy's J
    is not put into it, and a round nobody played adds nothing to the cumulative reward."""
    env = sapo_env.parallel_env(n=3, max_rounds=5)
    nodes = [SitsOut(rounds={1, 2}, seed=0), SitsOut(rounds={2}, seed=1),
             SitsOut(rounds={2}, seed=2)]
    with caplog.at_level(logging.WARNING, logger=CALLS), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "Mean of empty slice"
        history = sapo_env.runtime.run(env, nodes, seed=0, progress=False,
                                       ratio_policies={"node_0": FixedRatio(2)})
        swarm_mean = history.swarm_mean
        cumulative = history.cumulative_reward
    assert warnings_of(caplog) == []
    assert [info["node_0"]["status"] if "node_0" in info else "offline"
            for info in history.infos] == ["online", "offline", "offline", "online", "online"]
    assert np.isnan(swarm_mean[2]) and np.isfinite(swarm_mean[[0, 1, 3, 4]]).all()
    assert cumulative == pytest.approx(np.nansum(swarm_mean)) and np.isfinite(cumulative)


def test_offline_marker_is_exact():
    assert is_offline(OFFLINE) and is_offline(None) and is_offline({"offline": True})
    assert absence("node_0", OFFLINE) == absence("node_0", None) == "offline"
    assert not is_offline({"offline": False}) and not is_offline({})
    with pytest.raises(ValueError, match=r"node_1: an offline action is exactly "
                                         r"\{'offline': True\}"):
        absence("node_1", {"offline": True, "num_external": 2})


def test_history_of_rounds_and_nodes_without_data_gives_no_numpy_warning():
    rewards = np.array([[0.5, np.nan], [np.nan, np.nan], [0.25, 0.75]])
    history = History(("node_0", "node_1"), sapo_env.SwarmConfig(n_agents=2), rewards,
                      np.zeros((3, 2), dtype=np.int64), np.zeros((3, 2), dtype=np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        mean = history.swarm_mean
        cumulative = history.cumulative_reward
    np.testing.assert_array_equal(mean, [0.5, np.nan, 0.5])
    assert cumulative == 1.0
