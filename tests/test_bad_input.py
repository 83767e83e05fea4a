"""Every bad action raises ValueError naming the node and the field, and changes nothing."""

import copy

import numpy as np
import pytest
from conftest import SMALL, mixed_actions
from gymnasium.utils.env_checker import data_equivalence

import sapo_env


def good(observations):
    return mixed_actions(observations, num_external=1)  # J=1 keeps 2 questions a round


def spoil(mutate):
    def make(observations):
        actions = copy.deepcopy(good(observations))
        mutate(actions)
        return actions
    return make


def _set(path, value):
    def mutate(actions):
        target = actions
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _completions(node, fn):
    def mutate(actions):
        c = [list(q) for q in actions[node]["completions"]]
        fn(c)
        actions[node]["completions"] = c
    return mutate


BAD = {
    "missing node": (spoil(lambda a: a.pop("node_1")), "node_1"),
    "unknown node": (spoil(lambda a: a.update(node_9=a["node_0"])), "node_9"),
    "not a dict": (lambda obs: [1, 2, 3], "dict"),
    "action not a dict": (spoil(_set(["node_2"], "hello")), "node_2"),
    "unknown field": (spoil(_set(["node_0", "temperature"], 1.0)), "node_0.*temperature"),
    "missing completions": (spoil(lambda a: a["node_1"].pop("completions")),
                            "node_1.*completions"),
    "missing num_external": (spoil(lambda a: a["node_1"].pop("num_external")),
                             "node_1.*num_external"),
    "too few questions": (spoil(_completions("node_2", lambda c: c.pop())),
                          "node_2.*2 questions.*got 1"),
    "completions is a str": (spoil(_set(["node_0", "completions"], "abc")), "node_0.*sequence"),
    "too few completions": (spoil(_completions("node_1", lambda c: c[1].pop())),
                            "node_1: expected 3 completions for question 1"),
    "too many completions": (spoil(_completions("node_1", lambda c: c[0].append("x"))),
                             "node_1.*question 0.*got 4"),
    "non-str completion": (spoil(_completions("node_0", lambda c: c[1].__setitem__(2, 7))),
                           r"node_0: completions\[1\]\[2\] must be a str"),
    "bytes completion": (spoil(_completions("node_0", lambda c: c[0].__setitem__(0, b"x"))),
                         r"node_0: completions\[0\]\[0\] must be a str"),
    "completion too long": (spoil(_completions("node_2", lambda c: c[0].__setitem__(
        1, "x" * 16385))), r"node_2: completions\[0\]\[1\].*max_completion_chars"),
    "J too large": (spoil(_set(["node_1", "num_external"], 4)), "node_1.*num_external.*0, 3"),
    "J negative": (spoil(_set(["node_1", "num_external"], -1)), "node_1.*num_external"),
    "J float": (spoil(_set(["node_1", "num_external"], 1.0)), "node_1.*num_external.*int"),
    "J bool": (spoil(_set(["node_1", "num_external"], True)), "node_1.*num_external.*int"),
    "J str": (spoil(_set(["node_1", "num_external"], "2")), "node_1.*num_external.*int"),
    "share wrong length": (spoil(_set(["node_0", "share"], [1])), "node_0.*share"),
    "share not 0/1": (spoil(_set(["node_0", "share"], [1, 2])), r"node_0: share\[1\]"),
}


def snapshot(env):
    """Everything a step may change."""
    return {
        "round": env.round,
        "num_external": dict(env._run.num_external),
        "agents": list(env.agents),
        "pool": [g["id"] for g in env._run.pool.groups],
        "replay": {a: [g["id"] for g in p.groups] for a, p in env._run.replay.items()},
        "batches": {a: [g["id"] for g in b] for a, b in env._run.batches.items()},
        "questions": {a: [d.question["id"] for d in q] for a, q in env._run.drawn.items()},
        "rngs": {a: copy.deepcopy(r.bit_generator.state) for a, r in env._run.rngs.items()},
        "task_rngs": {o: copy.deepcopy(r.bit_generator.state)
                      for o, r in env._run.questions._task_rngs.items()},
        "streams": {o: [s.next_index for s in ss] for o, ss in env._run.questions._streams.items()},
    }


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_action_raises_and_changes_nothing(case):
    make_bad, message = BAD[case]
    env = sapo_env.parallel_env(**SMALL)
    reference = sapo_env.parallel_env(**SMALL)
    observations, _ = env.reset(seed=4)
    reference.reset(seed=4)
    observations, *_ = env.step(good(observations))  # a non-empty pool and batches
    ref_observations, *_ = reference.step(good(reference._observations()))
    before = snapshot(env)
    with pytest.raises(ValueError, match=message):
        env.step(make_bad(observations))
    assert data_equivalence(snapshot(env), before)
    # the next good round is exactly the round an env that never saw the bad action plays
    assert data_equivalence(env.step(good(observations)), reference.step(good(ref_observations)))


@pytest.mark.parametrize("external_source", ["swarm", "self_replay"])
def test_a_failing_custom_sampler_changes_nothing(external_source):
    def sampler(candidates, k, rng):
        rng.random()  # draws before failing: the stream must be put back too
        return list(candidates[:1]) * 2  # repeated groups: the env rejects them

    settings = dict(SMALL, pool_window=2, external_source=external_source, num_external=0)
    env = sapo_env.parallel_env(**settings, external_sampling=sampler)
    reference = sapo_env.parallel_env(**settings, external_sampling=sampler)
    observations, _ = env.reset(seed=4)
    ref_observations, _ = reference.reset(seed=4)
    # J=0 in force: no sampler call yet; J=2 from the next round
    observations, *_ = env.step(mixed_actions(observations, num_external=2))
    ref_observations, *_ = reference.step(mixed_actions(ref_observations, num_external=2))
    before = snapshot(env)
    with pytest.raises(ValueError, match="external_sampling must return distinct groups"):
        env.step(good(observations))
    assert data_equivalence(snapshot(env), before)
    assert data_equivalence(snapshot(env), snapshot(reference))  # as if it never happened


def test_numpy_values_are_accepted():
    env = sapo_env.parallel_env(**SMALL)
    observations, _ = env.reset(seed=0)
    actions = good(observations)
    for a in actions:
        actions[a]["num_external"] = np.int64(1)
        actions[a]["share"] = np.array([True, False])
        actions[a]["completions"] = [list(q) for q in actions[a]["completions"]]
    _, rewards, *_ = env.step(actions)
    assert set(rewards) == set(env.possible_agents)
