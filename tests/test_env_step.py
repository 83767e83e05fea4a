"""What one round does: scoring, rewards, publishing, assembly, infos; and determinism."""

import numpy as np
import pytest
from conftest import ARITHMETIC, SMALL, fixed_actions, mixed_actions
from gymnasium.utils.env_checker import data_equivalence

import sapo_env
from agents import DemonstratorAgent, RandomAgent
from sapo_env.tasks import reference_answer, resolve


def play(env, seed, rounds, make_actions):
    observations, _ = env.reset(seed=seed)
    trace = []
    for _ in range(rounds):
        out = env.step(make_actions(observations))
        observations = out[0]
        trace.append(out)
    return trace


def demonstrators(seed):
    agents = [DemonstratorAgent(0.7, num_external=2, seed=seed), RandomAgent(1, seed=seed),
              DemonstratorAgent(0.4, num_external=3, seed=seed)]
    return lambda obs: {a: agents[int(a[-1])].act(o) for a, o in obs.items()}


def test_same_seed_same_run_over_many_rounds():
    runs = [play(sapo_env.parallel_env(**SMALL), 11, 15, demonstrators(0)) for _ in range(2)]
    assert data_equivalence(runs[0], runs[1])
    # and the batches really differ round to round (the check is not vacuous)
    batches = [tuple(g["id"] for g in out[0]["node_0"]["batch"]) for out in runs[0]]
    assert len(set(batches)) > 10


def test_different_seeds_differ():
    a = play(sapo_env.parallel_env(**SMALL), 1, 3, demonstrators(0))
    b = play(sapo_env.parallel_env(**SMALL), 2, 3, demonstrators(0))
    assert not data_equivalence(a, b)


def test_rewards_are_mean_verifier_scores():
    env = sapo_env.parallel_env(**SMALL, tasks=ARITHMETIC)  # no partial credit for "wrong"
    observations, _ = env.reset(seed=0)
    observations, rewards, *_ = env.step(mixed_actions(observations))
    for a in env.agents:
        assert rewards[a] == pytest.approx(1 / 3)  # one right completion in three
        for g in observations[a]["batch"]:
            assert g["rewards"].dtype == np.float32 and g["advantages"].dtype == np.float32
            assert g["rewards"].tolist() == [1.0, 0.0, 0.0]
            np.testing.assert_allclose(g["advantages"], [1.155, -0.577, -0.577], atol=1e-3)


def test_groups_carry_text_answer_and_ref(small_env):
    observations, _ = small_env.reset(seed=0)
    questions = observations["node_1"]["questions"]
    actions = mixed_actions(observations)
    observations, *_ = small_env.step(actions)
    groups = [g for g in observations["node_0"]["pool"] if g["source"] == "node_1"]
    assert [g["id"] for g in groups] == ["node_1/r0/q0", "node_1/r0/q1"]
    for k, g in enumerate(groups):
        assert g["round"] == 0 and g["question"] == questions[k]["prompt"]
        assert g["system_prompt"] == small_env.config.system_prompt
        assert g["ref"] == questions[k]["ref"] and g["task"] == questions[k]["task"]
        assert g["answer"] == reference_answer(resolve(g["ref"]))
        assert g["completions"] == actions["node_1"]["completions"][k]
        assert not g["rewards"].flags.writeable  # shared between nodes: read-only


def test_batch_has_I_local_and_J_external_never_own():
    """Fixed protocol (B=4 questions whatever J); the J an action asks for is in force the
    round after."""
    env = sapo_env.parallel_env(n=4, questions_per_round=4, completions_per_question=2,
                                train_budget=5, num_external=0, max_rounds=6)
    observations, _ = env.reset(seed=0)
    for asked in [*range(1, 6), 0]:  # in force: 0, 1, ..., 5
        J = observations["node_0"]["num_external"]
        assert [len(o["questions"]) for o in observations.values()] == [4] * 4
        observations, _, _, _, infos = env.step(mixed_actions(observations, num_external=asked))
        for a in env.agents:
            assert infos[a]["num_external"] == J and observations[a]["num_external"] == asked
            batch = observations[a]["batch"]
            local = [g for g in batch if g["local"]]
            external = [g for g in batch if not g["local"]]
            assert all(g["source"] == a for g in local)
            assert all(g["source"] != a for g in external)
            assert len(external) == J and len({g["id"] for g in external}) == J
            assert len(local) == min(5 - J, 4)
            assert infos[a]["local_shortfall"] == max(0, 5 - J - 4)
            assert infos[a]["external_shortfall"] == 0
            assert infos[a]["generated_completions"] == 4 * 2


def test_paper_protocol_question_counts_follow_J_one_round_later():
    env = sapo_env.parallel_env(n=3, completions_per_question=2, max_rounds=6,
                                num_external={"node_0": 0, "node_1": 4, "node_2": 8})
    observations, _ = env.reset(seed=0)
    assert [observations[a]["num_external"] for a in env.agents] == [0, 4, 8]  # from the config
    assert [len(observations[a]["questions"]) for a in env.agents] == [8, 4, 0]
    plan = [[2, 6, 8], [8, 0, 3], [5, 5, 5], [0, 0, 0], [4, 4, 4]]  # J asked, per round
    in_force = [0, 4, 8]
    for asked in plan:
        actions = mixed_actions(observations)
        for a, j in zip(env.agents, asked):
            actions[a]["num_external"] = j
        observations, rewards, _, _, infos = env.step(actions)
        for k, a in enumerate(env.agents):
            num_local = 8 - in_force[k]
            assert infos[a]["num_external"] == in_force[k]
            assert infos[a]["generated_completions"] == 2 * num_local  # the generation cost
            assert infos[a]["local_groups"] == num_local
            assert infos[a]["external_groups"] + infos[a]["external_shortfall"] == in_force[k]
            assert observations[a]["num_external"] == asked[k]
            assert len(observations[a]["questions"]) == 8 - asked[k]
            assert env.observation_space(a).contains(observations[a])
        # the pool holds what the others generated: 7 x I at n=8, here the two others' groups
        assert len(env._run.pool) == sum(8 - j for j in in_force)
        in_force = asked


def test_free_rider_answers_nothing_and_only_consumes():
    env = sapo_env.parallel_env(n=3, completions_per_question=2, max_rounds=3,
                                num_external={"node_0": 8, "node_1": 2, "node_2": 2})
    observations, _ = env.reset(seed=0)
    free = observations["node_0"]
    assert free["questions"] == () and free["action_mask"]["completions"] == (0, None)
    actions = mixed_actions(observations, num_external=2)
    actions["node_0"] = {"completions": (), "num_external": 8, "share": []}
    observations, rewards, _, _, infos = env.step(actions)
    assert rewards["node_0"] == 0.0  # earned nothing: answered nothing
    assert infos["node_0"]["generated_completions"] == 0 and infos["node_0"]["shared_groups"] == 0
    assert infos["node_0"]["zero_advantage_fraction"] is None
    assert infos["node_0"]["task_scores"] == {}
    batch = observations["node_0"]["batch"]
    assert len(batch) == 8 and not any(g["local"] for g in batch)  # 2 x 6 informative groups
    assert {g["source"] for g in batch} == {"node_1", "node_2"}
    with pytest.raises(ValueError, match="node_0.*expected completions for 0 questions"):
        env.step({**mixed_actions(observations, num_external=8),
                  "node_0": {"completions": (("x", "y"),), "num_external": 8}})


def test_oversampled_filtered_baseline_trains_on_informative_groups_only():
    """The control that can falsify 'filtering explains SAPO': 16 questions, own
    zero-advantage groups dropped, up to 8 informative ones trained on."""
    env = sapo_env.parallel_env(n=2, completions_per_question=2, questions_per_round=16,
                                filter_local=True, num_external=0, max_rounds=2,
                                tasks=ARITHMETIC)
    observations, _ = env.reset(seed=0)
    assert [len(o["questions"]) for o in observations.values()] == [16, 16]
    actions = mixed_actions(observations, num_external=0)
    for k in range(0, 16, 2):  # every other group all right: zero advantage
        right = actions["node_0"]["completions"][k][0]
        actions["node_0"]["completions"] = (actions["node_0"]["completions"][:k] + ((right,) * 2,)
                                            + actions["node_0"]["completions"][k + 1:])
    observations, _, _, _, infos = env.step(actions)
    assert infos["node_0"]["generated_completions"] == 32
    batch = observations["node_0"]["batch"]
    assert len(batch) == 8 and all(g["local"] for g in batch)
    assert sorted(int(g["id"].rsplit("q", 1)[1]) for g in batch) == list(range(1, 16, 2))


def test_zero_advantage_groups_are_filtered_with_a_reported_shortfall(small_env):
    observations, _ = small_env.reset(seed=0)
    observations, _, _, _, infos = small_env.step(fixed_actions(observations, num_external=2))
    for a in small_env.agents:
        batch = observations[a]["batch"]
        assert [g["local"] for g in batch] == [True, True]  # I=2 local kept: the paper
        assert infos[a]["external_shortfall"] == 1  # filters only external groups
        assert infos[a]["pool_size"] == 4 and infos[a]["pool_size_filtered"] == 0
        assert infos[a]["pool_mean_reward_filtered"] is None
        assert infos[a]["zero_advantage_fraction"] == 1.0


def test_batch_mean_reward_is_the_mean_over_the_trained_batch_received_groups_included(
        small_env):
    observations, _ = small_env.reset(seed=0)
    for _ in range(2):  # round 1 has a pool to draw from
        observations, _, _, _, infos = small_env.step(
            mixed_actions(observations, num_external=2))
    for a in small_env.agents:
        batch = observations[a]["batch"]
        assert any(not g["local"] for g in batch)
        completions = [float(r) for g in batch for r in g["rewards"]]
        assert infos[a]["batch_mean_reward"] == pytest.approx(np.mean(completions))


def test_filter_local_and_filter_none():
    env = sapo_env.parallel_env(**SMALL, filter_local=True)
    observations, _ = env.reset(seed=0)
    observations, _, _, _, infos = env.step(fixed_actions(observations, num_external=1))
    assert observations["node_0"]["batch"] == () and infos["node_0"]["local_shortfall"] == 2
    env = sapo_env.parallel_env(**SMALL, filter="none")
    observations, _ = env.reset(seed=0)
    observations, _, _, _, infos = env.step(fixed_actions(observations, num_external=2))
    assert len(observations["node_0"]["batch"]) == 3


def test_custom_filter_callable():
    env = sapo_env.parallel_env(**SMALL, filter=lambda g: g["source"] == "node_2")
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(mixed_actions(observations, num_external=2))
    external = [g for g in observations["node_0"]["batch"] if not g["local"]]
    assert {g["source"] for g in external} == {"node_2"}


def test_share_mask_controls_publication(small_env):
    observations, _ = small_env.reset(seed=0)
    actions = mixed_actions(observations, num_external=3)
    actions["node_1"]["share"] = [0, 1]
    actions["node_2"]["share"] = np.array([0, 0])
    observations, _, _, _, infos = small_env.step(actions)
    ids = {g["id"] for g in observations["node_0"]["pool"]}
    assert ids == {"node_1/r0/q1"}
    assert infos["node_1"]["shared_groups"] == 1 and infos["node_2"]["shared_groups"] == 0
    assert infos["node_2"]["shared_mean_reward"] is None
    assert infos["node_1"]["taken_by_others"] == 2  # node_0 and node_2 took its one group
    assert infos["node_0"]["pool_size"] == 1 and infos["node_0"]["external_shortfall"] == 0


def test_taken_by_others_counts_other_nodes_batches_only():
    env = sapo_env.parallel_env(n=4, completions_per_question=2, num_external=3, max_rounds=3)
    observations, _ = env.reset(seed=5)
    for _ in range(2):
        observations, _, _, _, infos = env.step(mixed_actions(observations, num_external=6))
        for a in env.agents:
            by_others = sum(g["source"] == a for b in env.agents if b != a
                            for g in observations[b]["batch"] if not g["local"])
            assert infos[a]["taken_by_others"] == by_others
        assert sum(i["taken_by_others"] for i in infos.values()) == sum(
            i["external_groups"] for i in infos.values())


def test_window_keeps_stale_groups():
    env = sapo_env.parallel_env(**SMALL, pool_window=3)
    observations, _ = env.reset(seed=0)
    for t in range(4):
        observations, *_ = env.step(mixed_actions(observations, num_external=1))
        rounds = sorted({g["round"] for g in observations["node_0"]["pool"]})
        assert rounds == list(range(max(0, t - 2), t + 1))
        assert len(observations["node_0"]["pool"]) == 4 * len(rounds)


def test_capacity_bounds_the_pool():
    env = sapo_env.parallel_env(**SMALL, pool_window=5, pool_capacity=8)
    observations, _ = env.reset(seed=0)
    for _ in range(3):  # 6 groups a round
        observations, *_ = env.step(mixed_actions(observations))
    assert len(observations["node_0"]["pool"]) + 2 == len(env._run.pool) == 8
    assert {g["round"] for g in env._run.pool.groups} == {1, 2}


def test_self_replay_uses_own_earlier_groups_only():
    env = sapo_env.parallel_env(**SMALL, external_source="self_replay", pool_window=3)
    observations, _ = env.reset(seed=0)
    observations, _, _, _, infos = env.step(mixed_actions(observations, num_external=2))
    assert infos["node_0"]["external_groups"] == 0 and infos["node_0"]["external_shortfall"] == 1
    # from round 1 on J=2: one question a round (round 0 had 2); the window keeps 2 rounds
    for t, replayable in zip(range(1, 5), [2, 3, 2, 2]):
        actions = mixed_actions(observations, num_external=2)
        actions["node_0"]["share"] = [0]  # replay does not depend on sharing
        observations, _, _, _, infos = env.step(actions)
        for a in env.agents:
            external = [g for g in observations[a]["batch"] if not g["local"]]
            assert len(external) == 2
            assert all(g["source"] == a and t - 2 <= g["round"] < t for g in external)
            assert infos[a]["pool_size"] == replayable
            assert infos[a]["taken_by_others"] == 0  # its own groups, replayed: nobody else


def test_shared_questions_and_specialists():
    env = sapo_env.parallel_env(**SMALL, shared_questions=True)
    observations, _ = env.reset(seed=0)
    assert observations["node_0"]["questions"] == observations["node_2"]["questions"]
    env = sapo_env.parallel_env(n=2, node_tasks={"node_1": ARITHMETIC}, tasks=["bf"])
    observations, _ = env.reset(seed=0)
    assert {q["task"] for q in observations["node_0"]["questions"]} == {"bf"}
    assert {q["task"] for q in observations["node_1"]["questions"]} == {"basic_arithmetic"}


def test_custom_sampler_and_lenient_answers():
    def newest_first(candidates, k, rng):
        return sorted(candidates, key=lambda g: g["id"], reverse=True)[:k]

    env = sapo_env.parallel_env(**SMALL, external_sampling=newest_first, answer_format="lenient",
                                tasks=ARITHMETIC)
    observations, _ = env.reset(seed=0)
    actions = {}
    for a, o in observations.items():
        answers = [reference_answer(resolve(q["ref"])) for q in o["questions"]]
        actions[a] = {"completions": tuple((f"so the answer is {x}.", "no", "no")
                                           for x in answers), "num_external": 1}
    observations, rewards, *_ = env.step(actions)
    assert rewards["node_0"] == pytest.approx(1 / 3)
    assert [g["id"] for g in observations["node_0"]["batch"] if not g["local"]] == [
        "node_2/r0/q1"]


def test_infos_are_complete(small_env):
    observations, infos = small_env.reset(seed=0)
    assert infos == {a: {} for a in small_env.agents}
    _, _, _, _, infos = small_env.step(mixed_actions(observations))
    assert set(infos["node_0"]) == {
        "status", "num_external", "generated_completions", "task_scores", "local_groups",
        "external_groups", "local_shortfall", "external_shortfall", "pool_size",
        "pool_size_filtered", "pool_mean_reward_filtered", "zero_advantage_fraction",
        "all_fail_groups", "complementarity", "rescued_groups", "batch_mean_reward",
        "shared_groups", "staleness", "stale_unshared", "shared_mean_reward", "taken_by_others",
        "scoring_failures", "no_answer",
        "rejected_groups", "rejected_groups_swarm"}
    assert all(0 <= v <= 1 for v in infos["node_0"]["task_scores"].values())


def test_pool_mean_reward_filtered_is_the_mean_over_the_nodes_filtered_view():
    env = sapo_env.parallel_env(**SMALL)
    observations, _ = env.reset(seed=3)
    observations, _, _, _, infos = env.step(demonstrators(0)(observations))
    for a in env.agents:  # window 1: the observation's pool is the view the info describes
        view = [float(g["rewards"].mean()) for g in observations[a]["pool"]
                if np.ptp(g["rewards"]) > 0]
        assert view, "the check needs informative groups"
        assert infos[a]["pool_mean_reward_filtered"] == pytest.approx(np.mean(view))


def test_truncation_after_max_rounds():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 2})
    observations, _ = env.reset(seed=0)
    observations, _, terminations, truncations, _ = env.step(fixed_actions(observations))
    assert not any(truncations.values()) and env.agents
    observations, _, terminations, truncations, _ = env.step(fixed_actions(observations))
    assert all(truncations.values()) and not any(terminations.values())
    assert env.agents == [] and set(observations) == {"node_0", "node_1", "node_2"}
    with pytest.raises(RuntimeError, match="finished run.*reset"):
        env.step({})


def test_step_before_reset_says_so():
    with pytest.raises(RuntimeError, match=r"before reset\(\)"):
        sapo_env.parallel_env(**SMALL).step({})


def test_nothing_printed_to_stdout(capfd):
    env = sapo_env.parallel_env(n=2, tasks=["bf"], max_rounds=3)
    node = DemonstratorAgent(seed=1)
    play(env, 0, 3, lambda obs: {a: node.act(o) for a, o in obs.items()})
    assert capfd.readouterr().out == ""
