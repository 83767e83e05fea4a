"""A remote node's malformed action costs only that node its round; a local one still raises."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent
from sapo_env.runtime import Callback


class _BadInRound:
    """A demonstrator whose action in round ``bad_round`` (or every round of ``bad_rounds``)
    asks for J = 99."""

    def __init__(self, bad_round: int = -1, seed: int = 0, bad_rounds: tuple[int, ...] = ()):
        self.inner = DemonstratorAgent(num_external=2, seed=seed)
        self.bad_rounds, self.round = {bad_round, *bad_rounds}, 0

    def act(self, observation):
        action = dict(self.inner.act(observation))
        if self.round in self.bad_rounds:
            action["num_external"] = 99
        self.round += 1
        return action

    def learn(self, batch):
        return self.inner.learn(batch)


class _Remote(_BadInRound):
    """The same, as a node that runs elsewhere (``ConcurrentAgent``): calls return futures."""

    def submit_act(self, observation):
        future = Future()
        future.set_result(self.act(observation))
        return future

    def submit_learn(self, batch):
        future = Future()
        future.set_result(self.learn(batch))
        return future

    def submit_ready(self):
        future = Future()
        future.set_result(None)
        return future


class _Records(Callback):
    def __init__(self):
        self.records = []

    def on_round_end(self, record):
        self.records.append(record)


@pytest.mark.parametrize("deadline", [None, 5.0])
def test_a_remote_nodes_bad_action_makes_it_sit_the_round_out(deadline, caplog):
    env = sapo_env.parallel_env(n=3, max_rounds=6)
    agents = [DemonstratorAgent(num_external=2, seed=0), DemonstratorAgent(num_external=2, seed=1),
              _Remote(bad_round=3, seed=2)]
    records = _Records()
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=[records],
                           deadline=deadline)
    assert len(history.rewards) == 6
    refused = {r.round: r.refused for r in records.records if r.refused}
    assert list(refused) == [3] and "num_external" in refused[3]["node_2"]
    assert "node_2" not in records.records[3].rewards  # it sat round 3 out
    assert "node_2" in records.records[4].rewards  # and played the next one
    assert "node_2 sent an action the env refuses" in caplog.text


def test_a_local_nodes_bad_action_still_raises():
    env = sapo_env.parallel_env(n=3, max_rounds=6)
    agents = [DemonstratorAgent(num_external=2, seed=0), DemonstratorAgent(num_external=2, seed=1),
              _BadInRound(bad_round=3, seed=2)]
    with pytest.raises(ValueError, match="num_external"):
        sapo_env.runtime.run(env, agents, seed=0, progress=False)


@pytest.mark.parametrize("deadline", [None, 5.0])
def test_a_remote_node_refused_k_rounds_in_a_row_is_removed(deadline, caplog):
    """Refused in rounds 1, 3, 4: sits out 1 and 3, is removed in 4 (k = 2), and the run goes
    on for the others; refusals that are not in a row do not add up."""
    env = sapo_env.parallel_env(n=3, max_rounds=8)
    agents = [DemonstratorAgent(num_external=2, seed=0), DemonstratorAgent(num_external=2, seed=1),
              _Remote(seed=2, bad_rounds=(1, 3, 4))]
    records = _Records()
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=[records],
                           deadline=deadline, remove_after_refusals=2)
    assert len(history.rewards) == 8
    refused = {r.round: r.refused["node_2"] for r in records.records if r.refused}
    assert list(refused) == [1, 3, 4] and "removed" in refused[4] and "removed" not in refused[3]
    played = [r.round for r in records.records if "node_2" in r.rewards]
    assert played == [0, 2]
    assert np.isnan(history.rewards[4:, 2]).all() and not np.isnan(history.rewards[:, :2]).any()
    assert "node_2 is removed from the swarm" in caplog.text


def test_remove_after_refusals_none_never_removes_and_bad_values_are_refused():
    env = sapo_env.parallel_env(n=3, max_rounds=6)
    agents = [DemonstratorAgent(num_external=2, seed=0), DemonstratorAgent(num_external=2, seed=1),
              _Remote(seed=2, bad_rounds=(0, 1, 2, 3, 4))]
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False, remove_after_refusals=None)
    assert np.isnan(history.rewards[:5, 2]).all() and not np.isnan(history.rewards[5, 2])
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="remove_after_refusals"):
            sapo_env.runtime.run(env, agents, rounds=1, progress=False, remove_after_refusals=bad)
