"""Observations hold read-only copies: whatever an agent does to what it is shown,
the pool, the batches, the questions dealt, the config and what the other nodes are shown
stay as they were. Observations handed out the pool's own dicts: an in-process agent could
rewrite another node's pooled rewards."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest

import sapo_env
from sapo_env.observations import ReadOnlyDict

EASY = {"min_terms": 2, "max_terms": 3}


def _actions(observations):
    return {a: {"num_external": 2, "completions": [
        [f"<answer>{k}</answer>" for k in range(o["completions_per_question"])]
        for _ in o["questions"]]} for a, o in observations.items()}


def _vandalise(observation):
    """Everything an agent could try on its observation, each attempt allowed to fail."""
    attempts = []
    for group in (*observation["pool"], *observation["batch"]):
        attempts += [
            lambda g=group: g.__setitem__("rewards", np.ones(len(g["completions"]))),
            lambda g=group: g.update(source="node_x"),
            lambda g=group: g.pop("answer"),
            lambda g=group: g["ref"].__setitem__("seed", 0),
            lambda g=group: g["ref"]["config"].__setitem__("max_terms", 99),
            lambda g=group: setattr(g["rewards"].flags, "writeable", True),
            lambda g=group: g["rewards"].__setitem__(slice(None), 1.0),
            lambda g=group: g["advantages"].__setitem__(slice(None), 9.0),
            lambda g=group: g["rewards"].base.__setitem__(0, 1),
            lambda g=group: setattr(g["rewards"].base.flags, "writeable", True),
        ]
    for question in observation["questions"]:
        attempts += [
            lambda q=question: q.__setitem__("prompt", "Say hello."),
            lambda q=question: q["ref"]["config"].__setitem__("max_terms", 99),
            lambda q=question: q["ref"].clear(),
        ]
    refused = 0
    for attempt in attempts:
        try:
            attempt()
        except (TypeError, ValueError, AttributeError):
            refused += 1
    return len(attempts), refused


def _frozen(value):
    """A comparable snapshot of the env's state."""
    return pickle.dumps(value)


def test_an_agent_cannot_change_the_env_through_its_observation():
    env = sapo_env.parallel_env(n=3, max_rounds=4, tasks=[["basic_arithmetic", 1.0, EASY]])
    observations, _ = env.reset(seed=0)
    for _ in range(2):
        observations, *_ = env.step(_actions(observations))
    state, config = _frozen(env.state_dict()), json.dumps(env.config.tasks[0].config)
    shown = _frozen([observations["node_1"][k] for k in ("pool", "batch", "questions")])
    tried, refused = _vandalise(observations["node_0"])
    assert tried and refused == tried  # every attempt refused
    assert _frozen(env.state_dict()) == state
    assert json.dumps(env.config.tasks[0].config) == config
    assert _frozen([observations["node_1"][k] for k in ("pool", "batch", "questions")]) == shown
    # going around the guard changes the round's copies (shared by the nodes' views of the
    # pool), never the env's state
    for group in (*observations["node_0"]["pool"], *observations["node_0"]["batch"]):
        dict.__setitem__(group, "source", "node_x")
        dict.__setitem__(group["ref"], "seed", 0)
        group["rewards"].shape = (2, -1)
    assert _frozen(env.state_dict()) == state
    # and the next round runs on the pool as it was
    again = sapo_env.parallel_env(n=3, max_rounds=4, tasks=[["basic_arithmetic", 1.0, EASY]])
    again.reset(options={"state": pickle.loads(state)})
    assert env.step(_actions(observations))[1] == again.step(_actions(observations))[1]


def test_observations_are_read_only_copies_that_keep_the_spaces_and_plain_use():
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_actions(observations))
    observation = observations["node_0"]
    assert env.observation_space("node_0").contains(observation)
    pool = env.state_dict()["pool"]["groups"]
    for shown in observation["pool"]:
        assert isinstance(shown, ReadOnlyDict) and isinstance(shown, dict)
        assert not any(shown is g for g in pool)
        assert shown["rewards"].flags.writeable is False
    group = observation["pool"][0]
    with pytest.raises(TypeError, match="read-only"):
        group["rewards"] = np.zeros(8, np.float32)
    mine = {**group, "rewards": np.zeros(8, np.float32)}  # a node's own copy is its own
    mine["id"] = "changed"
    assert type(dict(group)) is dict and dict(group) == group
    assert type(pickle.loads(pickle.dumps(group))) is ReadOnlyDict
    assert copy.deepcopy(observation)["pool"][0]["id"] == group["id"]
    assert json.loads(json.dumps(group["ref"])) == dict(group["ref"])
