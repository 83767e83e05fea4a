"""A remote node's malformed action costs only that node its round; a local one still raises."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

import sapo_env
from agents import DemonstratorAgent
from sapo_env.runner import Callback


class _BadInRound:
    """A demonstrator whose action in round ``bad_round`` asks for J = 99."""

    def __init__(self, bad_round: int, seed: int):
        self.inner = DemonstratorAgent(num_external=2, seed=seed)
        self.bad_round, self.round = bad_round, 0

    def act(self, observation):
        action = dict(self.inner.act(observation))
        if self.round == self.bad_round:
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
    history = sapo_env.run(env, agents, seed=0, progress=False, callbacks=[records],
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
        sapo_env.run(env, agents, seed=0, progress=False)
