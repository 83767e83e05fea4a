"""Numbers are checked in the type they are stored in: a reward, advantage or log-prob that is
finite as float64 but overflows float32 (``1e39`` is ``inf`` there) is refused, in a received
packet (a counted ``malformed`` rejection, charged to its sender) and in a node's own action (a
ValueError naming node, field and index), never stored as ``inf`` or raised as another error."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import mixed_actions

import sapo_env
from sapo_env.defenses.packet_schema import admit, parse_packet

L = 4
BEYOND_FLOAT32 = [1e39, -1e39, 10**39, np.float64(1e39), 10**400]
"""Values finite as Python or float64 numbers (but ``10**400``, which not even float64
holds) that float32 holds as ``±inf``."""


@pytest.fixture(scope="module")
def honest_group():
    env = sapo_env.parallel_env(n=2, max_rounds=3, completions_per_question=L, train_budget=2,
                                num_external=1)
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(mixed_actions(observations))
    return dict(observations["node_0"]["pool"][0])


@pytest.mark.parametrize("field", ["rewards", "advantages"])
@pytest.mark.parametrize("value", BEYOND_FLOAT32,
                         ids=["1e39", "-1e39", "10**39", "float64(1e39)", "10**400"])
def test_a_packet_number_beyond_float32_is_malformed(honest_group, field, value):
    numbers = [value, *honest_group[field].tolist()[1:]]
    for sent in (numbers, tuple(numbers)):
        assert parse_packet({**honest_group, field: sent}, 0, L, 16384) == "malformed"
    if isinstance(value, float):  # a float64 array holding it
        sent = np.array(numbers, dtype=np.float64)
        assert parse_packet({**honest_group, field: sent}, 0, L, 16384) == "malformed"
    config = sapo_env.SwarmConfig(completions_per_question=L)
    admitted, rejected = admit([(honest_group["source"], {**honest_group, field: numbers})],
                               [], 0, config)
    assert admitted == [] and rejected == {honest_group["source"]: 1}


def test_the_largest_float32_still_passes(honest_group):
    top = float(np.finfo(np.float32).max)
    parsed = parse_packet({**honest_group, "rewards": [top, -top, 0.0, 1.0]}, 0, L, 16384)
    assert isinstance(parsed, dict) and np.isfinite(parsed["rewards"]).all()


@pytest.mark.parametrize("value, shown", [(-10**400, "an int beyond float32's range"),
                                          (-1e39, "-inf"), (-(10**39), "-inf")])
def test_an_own_logprob_beyond_float32_raises_naming_node_field_and_index(value, shown):
    env = sapo_env.parallel_env(n=2, max_rounds=3, completions_per_question=L, train_budget=2,
                                num_external=1)
    observations, _ = env.reset(seed=0)
    actions = mixed_actions(observations)
    B = len(actions["node_1"]["completions"])
    bad = {**actions["node_1"], "logprobs": [[[-0.5]] * L] * (B - 1) + [[[-0.5]] * (L - 1)
                                                                        + [[-0.5, value]]]}
    with pytest.raises(ValueError, match=(rf"node_1: logprobs\[{B - 1}\]\[{L - 1}\] must be "
                                          rf"finite log-probabilities <= 0 \(as float32\), got "
                                          rf"{shown}")):
        env.step({**actions, "node_1": bad})


def test_a_packet_logprob_beyond_float32_is_malformed(honest_group):
    for value in (-1e39, -(10**400)):
        packet = {**honest_group, "logprobs": [[-0.5]] * (L - 1) + [[value]]}
        assert parse_packet(packet, 0, L, 16384) == "malformed"
