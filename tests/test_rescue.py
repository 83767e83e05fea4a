"""Rescue of all-fail groups by peers' groups on the same question (sapo_env.rescue), and the
complementarity the env reports each round."""

import numpy as np
import pytest

import sapo_env
from agents import DemonstratorAgent
from sapo_env.rescue import (
    all_failed,
    candidate_index,
    choose_candidates,
    complementarity,
    is_candidate,
    question_key,
    rescue_batch,
    rescue_candidates,
    solved_questions,
    success_counts,
    successes,
)


def group(source, index, rewards, local=None, round_=0):
    g = {"id": f"{source}/r{round_}/q{index}", "source": source, "round": round_,
         "ref": {"task": "basic_arithmetic", "config": {}, "seed": 7, "index": index},
         "rewards": np.asarray(rewards, dtype=np.float32),
         "advantages": np.zeros(len(rewards), dtype=np.float32)}
    if local is not None:
        g["local"] = local
    return g


def test_successes_count_full_credit_only():
    assert successes(group("a", 0, [1, 0.5, 0.33, 0])) == 1
    assert all_failed(group("a", 0, [0.5, 0.5, 0, 0]))
    assert not all_failed(group("a", 0, [0, 0, 1, 0]))


def test_success_counts_count_each_row_as_successes_counts_its_group():
    rows = [[1, 0.5, 0.33, 0], [0.5, 0.5, 0, 0], [1, 1, 1, 1], [0.999, 1, 0, 1]]
    counts = success_counts(np.asarray(rows, dtype=np.float32))
    assert counts.tolist() == [successes(group("a", 0, r)) for r in rows] == [1, 0, 4, 2]
    assert success_counts(np.zeros((0, 4), np.float32)).tolist() == []


def test_known_counts_are_used_instead_of_the_rewards():
    own = [group("a", 0, [0, 0]), group("a", 1, [1, 0])]
    other = [group("b", 0, [1, 0]), group("b", 1, [0, 0])]
    # counts that contradict the rewards show that the functions read them, not the rewards
    solved = solved_questions(own + other, [1, 0, 0, 1])
    assert solved == {question_key(own[0]): {"a"}, question_key(own[1]): {"b"}}
    assert complementarity("a", own, solved, [0, 2]) == 0.0
    assert complementarity("a", own, solved, [1, 0]) == 1.0
    assert complementarity("a", own, solved) == complementarity(
        "a", own, solved, success_counts(np.stack([g["rewards"] for g in own])).tolist())


def test_a_candidate_has_some_but_not_all_successes():
    assert is_candidate(group("b", 0, [1, 0, 0, 0]))
    assert is_candidate(group("b", 0, [1, 1, 1, 0.5]))
    assert not is_candidate(group("b", 0, [1, 1, 1, 1]))
    assert not is_candidate(group("b", 0, [0.5, 0, 0, 0]))


def test_question_key_ignores_source_and_round():
    assert question_key(group("a", 3, [0])) == question_key(group("b", 3, [1], round_=5))
    assert question_key(group("a", 3, [0])) != question_key(group("a", 4, [0]))


def test_rescue_candidates_are_other_nodes_groups_on_the_same_question():
    own = group("a", 1, [0, 0, 0, 0])
    pool = [group("a", 1, [1, 0, 0, 0]),  # its own: never a candidate
            group("b", 1, [1, 0, 0, 0]),
            group("c", 2, [1, 0, 0, 0]),  # another question
            group("d", 1, [1, 1, 1, 1]),  # solved by every completion: no advantage
            group("e", 1, [0, 1, 1, 0])]
    assert [g["source"] for g in rescue_candidates("a", own, candidate_index(pool))] == [
        "b", "e"]
    assert list(candidate_index(pool)) == [question_key(own), question_key(pool[2])]


def test_choose_candidates_draws_only_when_there_are_more_than_k():
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert choose_candidates([1, 2], 2, rng) == [1, 2]
    assert choose_candidates([1, 2, 3], None, rng) == [1, 2, 3]
    assert rng.bit_generator.state == before
    chosen = choose_candidates(list(range(10)), 3, rng)
    assert len(chosen) == 3 and chosen == sorted(chosen) and len(set(chosen)) == 3


def test_complementarity_is_the_share_of_all_fail_questions_another_node_solved():
    own = [group("a", 0, [0, 0]), group("a", 1, [0, 0]), group("a", 2, [1, 0]),
           group("a", 3, [0, 0])]
    others = [group("b", 0, [1, 0]), group("c", 1, [0.5, 0]), group("b", 3, [1, 1])]
    solved = solved_questions(own + others)
    # all-fail: questions 0, 1, 3; solved by another: 0 (b) and 3 (b); 1 only partly
    assert complementarity("a", own, solved) == pytest.approx(2 / 3)
    b_own = [g for g in others if g["source"] == "b"]
    assert complementarity("b", b_own, solved) is None  # b has no all-fail group
    # a node's own success does not count as another node solving it
    assert complementarity("a", [group("a", 5, [0, 0])],
                           solved_questions([group("a", 5, [1, 0])])) == 0.0


def test_rescue_batch_replaces_all_fail_own_groups_and_keeps_the_rest():
    batch = [group("a", 0, [0, 0, 0], local=True), group("a", 1, [1, 0, 0], local=True),
             group("a", 2, [0, 0, 0], local=True), group("b", 9, [1, 0, 0], local=False)]
    pool = [group("b", 0, [1, 0, 0]), group("c", 0, [0, 1, 1]), group("b", 9, [1, 0, 0])]
    out, rescued = rescue_batch("a", batch, candidate_index(pool), None,
                                np.random.default_rng(0))
    assert rescued == 1  # question 2 has no candidate and stays
    assert [(g["id"], g["local"], g.get("rescue", False)) for g in out] == [
        ("a/r0/q1", True, False), ("a/r0/q2", True, False),
        ("b/r0/q0", False, True), ("c/r0/q0", False, True), ("b/r0/q9", False, False)]
    one, _ = rescue_batch("a", batch, candidate_index(pool), 1, np.random.default_rng(0))
    assert sum(g.get("rescue", False) for g in one) == 1 and len(one) == len(batch)


def test_a_group_already_in_the_batch_is_not_added_again():
    batch = [group("a", 0, [0, 0], local=True), group("b", 0, [1, 0], local=False)]
    out, rescued = rescue_batch("a", batch, candidate_index([group("b", 0, [1, 0])]), None,
                                np.random.default_rng(0))
    assert rescued == 0 and [g["id"] for g in out] == ["a/r0/q0", "b/r0/q0"]


def _swarm(**overrides):
    env = sapo_env.parallel_env(n=3, max_rounds=3, shared_questions=True,
                                completions_per_question=4, num_external=0,
                                tasks=["basic_arithmetic"], **overrides)
    accuracies = {"node_0": 0.0, "node_1": 0.5, "node_2": 0.5}
    nodes = {a: DemonstratorAgent(accuracy=accuracies[a], num_external=0, seed=k)
             for k, a in enumerate(env.possible_agents)}
    return env, nodes


def _round(env, nodes, seed=0):
    obs, _ = env.reset(seed=seed)
    actions = {a: nodes[a].act(obs[a]) for a in env.agents}
    return env.step(actions)


def test_the_env_rescues_a_node_that_fails_every_question():
    env, nodes = _swarm(rescue=True)
    obs, _, _, _, infos = _round(env, nodes)
    batch = obs["node_0"]["batch"]
    rescue = [g for g in batch if g.get("rescue")]
    assert infos["node_0"]["all_fail_groups"] == 8
    assert infos["node_0"]["rescued_groups"] == len(rescue) > 0
    assert infos["node_0"]["local_groups"] == 8 - len(rescue)
    assert len(batch) == 8  # one candidate per rescued question, the default
    own_keys = {question_key(g) for g in batch if g["local"]}
    for g in rescue:
        assert g["source"] != "node_0" and not g["local"] and is_candidate(g)
        assert question_key(g) not in own_keys
        # the sender's advantages, computed in the sender's group
        r = g["rewards"].astype(np.float64)
        np.testing.assert_allclose(g["advantages"], (r - r.mean()) / (r.std(ddof=1) + 1e-6),
                                   rtol=1e-5)
    assert infos["node_0"]["complementarity"] == pytest.approx(
        infos["node_0"]["rescued_groups"] / 8)
    for a in ("node_1", "node_2"):
        assert all(not g.get("rescue") for g in obs[a]["batch"]) or \
            infos[a]["rescued_groups"] > 0
    assert env.observation_space("node_0").contains(obs["node_0"])


def test_without_rescue_the_batches_are_as_before_and_complementarity_is_still_reported():
    env, nodes = _swarm()
    obs, _, _, _, infos = _round(env, nodes)
    assert [g["local"] for g in obs["node_0"]["batch"]] == [True] * 8
    assert infos["node_0"]["rescued_groups"] == 0
    assert infos["node_0"]["complementarity"] > 0


def test_rescue_is_deterministic():
    first = _round(*_swarm(rescue=True, rescue_candidates=None))[0]
    second = _round(*_swarm(rescue=True, rescue_candidates=None))[0]
    assert [g["id"] for g in first["node_0"]["batch"]] == \
        [g["id"] for g in second["node_0"]["batch"]]


def test_rescue_survives_a_state_round_trip():
    env, nodes = _swarm(rescue=True)
    _round(env, nodes)
    state = env.state_dict()
    other, _ = _swarm(rescue=True)
    obs, _ = other.reset(options={"state": state})
    assert [g.get("rescue", False) for g in obs["node_0"]["batch"]] == \
        [g.get("rescue", False) for g in env._observations()["node_0"]["batch"]]


@pytest.mark.parametrize("changes, message", [
    ({"shared_questions": False}, "needs shared_questions=True"),
    ({"filter_local": True}, "filter_local drops"),
    ({"rescue_candidates": 0}, "rescue_candidates"),
    ({"rescue": 1}, "rescue must be a bool"),
])
def test_rescue_settings_are_checked(changes, message):
    settings = {"rescue": True, "shared_questions": True, **changes}
    with pytest.raises(ValueError, match=message):
        sapo_env.SwarmConfig(**settings)
