"""A sender's per-token log-probs and token ids (sapo_env.sender_logprobs): checked in a node's
own action (ValueError naming node, field, index and what was expected), in a received packet
(rejected with a counted reason, never raised), and carried to receivers in pool and batch."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import mixed_actions

import sapo_env
from sapo_env.defenses import transport_attacks
from sapo_env.defenses.packet_schema import GROUP_FIELDS, admit, parse_packet

L = 4


def _env(**kwargs):
    return sapo_env.parallel_env(n=2, max_rounds=3, completions_per_question=L, train_budget=2,
                                 num_external=1, **kwargs)


def _with_logprobs(actions, ids=True):
    """Each completion claims three tokens (1, 2, 3) drawn with log-probs -0.5, -1, -2."""
    out = {}
    for node, action in actions.items():
        B = len(action["completions"])
        out[node] = {**action, "logprobs": [[[-0.5, -1.0, -2.0]] * L] * B}
        if ids:
            out[node]["token_ids"] = [[[1, 2, 3]] * L] * B
    return out


def test_groups_carry_the_senders_logprobs_to_pool_batch_and_observation_space():
    env = _env()
    observations, _ = env.reset(seed=0)
    actions = mixed_actions(observations)
    actions = {**actions, **_with_logprobs({"node_0": actions["node_0"]})}
    observations, *_ = env.step(actions)
    from_0 = observations["node_1"]["pool"]
    assert from_0 and all(g["source"] == "node_0" for g in from_0)
    for group in from_0:
        assert len(group["logprobs"]) == L and len(group["token_ids"]) == L
        assert group["logprobs"][0].dtype == np.float32 and not group["logprobs"][0].flags.writeable
        assert group["logprobs"][0].tolist() == [-0.5, -1.0, -2.0]
        assert group["token_ids"][0].dtype == np.int32
        assert group["token_ids"][0].tolist() == [1, 2, 3]
    # node_1 sent none: its groups have no such keys (None through .get)
    assert all(g.get("logprobs") is None and "token_ids" not in g
               for g in observations["node_0"]["pool"])
    external = [g for g in observations["node_1"]["batch"] if not g["local"]]
    assert external and all("logprobs" in g for g in external)
    for node in env.agents:
        assert env.observation_space(node).contains(observations[node])


def test_a_swarm_that_sends_none_runs_exactly_as_before():
    """Same seed, same actions: the observations are those of a run without the fields, key
    for key (no new key appears in any group)."""
    runs = []
    for _ in range(2):
        env = _env()
        observations, _ = env.reset(seed=3)
        seen = []
        for _ in range(3):
            observations, rewards, *_ = env.step(mixed_actions(observations))
            seen.append((rewards, [sorted(g) for g in observations["node_0"]["pool"]]))
        runs.append(seen)
    assert runs[0] == runs[1]
    assert all(set(keys) == GROUP_FIELDS for _, pool in runs[0] for keys in pool)


def test_logprobs_without_token_ids_are_carried_alone():
    env = _env()
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_with_logprobs(mixed_actions(observations), ids=False))
    group = observations["node_1"]["pool"][0]
    assert "logprobs" in group and "token_ids" not in group


@pytest.mark.parametrize("change, message", [
    (lambda a: {**a, "logprobs": [[[-0.5, float("nan")]] * L] * len(a["completions"])},
     r"node_0: logprobs\[0\]\[0\] must be finite log-probabilities <= 0 \(as float32\), got nan"),
    (lambda a: {**a, "logprobs": [[[-0.5, 0.25]] * L] * len(a["completions"])},
     r"logprobs\[0\]\[0\] must be finite log-probabilities <= 0 .* got 0.25"),
    (lambda a: {**a, "logprobs": [[[-1e39]] * L] * len(a["completions"])},  # -inf in float32
     r"logprobs\[0\]\[0\] must be finite .* got -inf"),
    (lambda a: {**a, "logprobs": [[[-0.5, "x"]] * L] * len(a["completions"])},
     r"logprobs\[0\]\[0\] must hold numbers, got 'x' \(str\)"),
    (lambda a: {**a, "logprobs": [[[-0.5, True]] * L] * len(a["completions"])},
     r"logprobs\[0\]\[0\] must hold numbers, got True \(bool\)"),
    (lambda a: {**a, "logprobs": [[[-0.5]] * (L - 1)] * len(a["completions"])},
     r"logprobs\[0\] must be a list of 4 sequences \(one per completion\), got 3"),
    (lambda a: {**a, "logprobs": [[[-0.5]] * L] * (len(a["completions"]) + 1)},
     r"logprobs must be a sequence of \d+ sequences \(one per question\)"),
    (lambda a: {**a, "logprobs": [[[-0.1] * 65] * L] * len(a["completions"])},
     r"logprobs\[0\]\[0\] has 65 entries, more than max_completion_tokens=64"),
    (lambda a: {**a, "token_ids": [[[1]] * L] * len(a["completions"])},
     r"node_0: token_ids needs logprobs"),
    (lambda a: {**a, "logprobs": [[[-0.5, -1.0]] * L] * len(a["completions"]),
                "token_ids": [[[1]] * L] * len(a["completions"])},
     r"token_ids\[0\]\[0\] has 1 ids but logprobs\[0\]\[0\] 2 values"),
    (lambda a: {**a, "logprobs": [[[-0.5]] * L] * len(a["completions"]),
                "token_ids": [[[-1]] * L] * len(a["completions"])},
     r"token_ids\[0\]\[0\] must be in \[0, 2\*\*31\), got -1"),
    (lambda a: {**a, "logprobs": [[[-0.5]] * L] * len(a["completions"]),
                "token_ids": [[[1.0]] * L] * len(a["completions"])},
     r"token_ids\[0\]\[0\] must hold ints, got 1.0 \(float\)"),
])
def test_a_bad_field_in_an_own_action_raises_naming_node_field_and_index(change, message):
    env = _env(max_completion_chars=64)
    observations, _ = env.reset(seed=0)
    actions = mixed_actions(observations)
    before = env.state_dict()
    with pytest.raises(ValueError, match=message):
        env.step({**actions, "node_0": change(actions["node_0"])})
    after = env.state_dict()
    assert after["round"] == before["round"]  # the env is as it was


def test_arrays_and_tuples_are_valid_actions():
    env = _env()
    observations, _ = env.reset(seed=0)
    actions = mixed_actions(observations)
    B = len(actions["node_0"]["completions"])
    node_0 = {**actions["node_0"],
              "logprobs": tuple(np.full((L, 2), -0.5, np.float32) for _ in range(B)),
              "token_ids": tuple(tuple(np.array([3, 4]) for _ in range(L)) for _ in range(B))}
    observations, *_ = env.step({**actions, "node_0": node_0})
    assert observations["node_1"]["pool"][0]["token_ids"][0].tolist() == [3, 4]


@pytest.fixture(scope="module")
def group_with_logprobs():
    env = _env()
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_with_logprobs(mixed_actions(observations)))
    return dict(observations["node_1"]["pool"][0])


@pytest.mark.parametrize("change, reason", [
    (lambda g: g, None),
    (lambda g: {k: v for k, v in g.items() if k != "token_ids"}, None),
    (lambda g: {**g, "logprobs": [list(map(float, lp)) for lp in g["logprobs"]]}, None),
    (lambda g: {k: v for k, v in g.items() if k != "logprobs"}, "malformed"),  # ids alone
    (lambda g: {**g, "logprobs": [[0.5]] * L, "token_ids": [[1]] * L}, "malformed"),
    (lambda g: {**g, "logprobs": [[float("inf")]] * L, "token_ids": [[1]] * L}, "malformed"),
    (lambda g: {**g, "logprobs": [["-1"]] * L, "token_ids": [[1]] * L}, "malformed"),
    (lambda g: {**g, "logprobs": [[-1.0]] * (L + 1), "token_ids": [[1]] * (L + 1)}, "malformed"),
    (lambda g: {**g, "logprobs": np.zeros((L, 1)), "token_ids": [[1]] * L}, "malformed"),
    (lambda g: {**g, "token_ids": [[1, 2]] * L}, "malformed"),  # 2 ids for 3 log-probs
    (lambda g: {**g, "token_ids": [[2**31, 1, 1]] * L}, "malformed"),
    (lambda g: {**g, "logprobs": [[-1.0] * 65] * L, "token_ids": [[1] * 65] * L}, "oversized"),
    (lambda g: {**g, "logprob": g["logprobs"]}, "malformed"),  # an unknown field
])
def test_a_received_packet_with_bad_fields_is_rejected_with_a_reason(group_with_logprobs,
                                                                      change, reason):
    parsed = parse_packet(change(group_with_logprobs), 5, L, 64)
    if reason is None:
        assert isinstance(parsed, dict)
        assert all(a.dtype == np.float32 and not a.flags.writeable for a in parsed["logprobs"])
    else:
        assert parsed == reason


def test_rejected_packets_are_counted_against_their_sender(group_with_logprobs):
    bad = {**group_with_logprobs, "logprobs": [[float("nan")]] * L, "token_ids": [[1]] * L}
    admitted, rejected = admit([("node_0", bad), ("node_0", group_with_logprobs)], [], 0,
                               sapo_env.SwarmConfig(completions_per_question=L))
    assert len(admitted) == 1 and rejected == {"node_0": 1}


def test_a_sender_lying_in_transit_costs_only_its_own_groups(monkeypatch):
    """node_1's packets are altered on the way to claim log-probs > 0: they are rejected and
    counted, the round goes on, and node_0's groups keep theirs."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards",
                        lambda group, extract, eps: [{**group, "logprobs": [[1.0]] * L,
                                                      "token_ids": [[1]] * L}])
    env = _env(adversaries={"node_1": "forge_rewards"})
    observations, _ = env.reset(seed=0)
    for _ in range(2):
        observations, _, _, _, infos = env.step(_with_logprobs(mixed_actions(observations)))
        assert infos["node_1"]["rejected_groups"] >= 1
        assert all(g["source"] != "node_1" for g in observations["node_0"]["pool"])
        assert all("logprobs" in g for g in observations["node_1"]["pool"])
