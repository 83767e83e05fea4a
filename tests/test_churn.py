"""Churn (sapo_env.churn): nodes offline for a round, nodes that leave, nodes that join later;
PettingZoo's rules for changing agent sets, the runner's record, determinism and resume."""

from __future__ import annotations

import importlib.util
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent
from agents.sim.simulated import simulated_swarm
from agents.wrappers.churning import ChurningAgent
from sapo_env.churn import LEAVE, OFFLINE
from sapo_env.runtime import Checkpoint

ROOT = Path(__file__).resolve().parents[1]


def demonstrators(env, num_external=4):
    return {a: DemonstratorAgent(accuracy=0.5, num_external=num_external, seed=i)
            for i, a in enumerate(env.possible_agents)}


def act(nodes, observations, env, **overrides):
    actions = {a: nodes[a].act(observations[a]) for a in env.agents}
    actions.update(overrides)
    return actions


def refs(observation):
    return [q["ref"] for q in observation["questions"]]


def test_an_offline_node_plays_nothing_trains_on_nothing_and_comes_back():
    env = sapo_env.parallel_env(n=3, max_rounds=5, num_external=2)
    nodes = demonstrators(env, num_external=2)
    obs, _ = env.reset(seed=0)
    obs, _, _, _, _ = env.step(act(nodes, obs, env))
    obs, rewards, terms, truncs, infos = env.step(act(nodes, obs, env, node_1=OFFLINE))
    assert rewards["node_1"] == 0.0 and not terms["node_1"] and not truncs["node_1"]
    assert infos["node_1"] == {"status": "offline", "num_external": 2, "generated_completions": 0}
    assert infos["node_0"]["status"] == "online"
    assert obs["node_1"]["batch"] == ()  # no training
    assert all(g["source"] != "node_1" for g in obs["node_0"]["pool"])  # published nothing
    assert all(g["source"] != "node_1" for g in obs["node_0"]["batch"])
    assert "node_1" in env.agents and len(obs["node_1"]["questions"]) == 6  # J kept: I = 6
    obs, rewards, _, _, infos = env.step(act(nodes, obs, env))
    assert infos["node_1"]["status"] == "online" and len(obs["node_1"]["batch"]) == 8


def test_a_missing_action_names_the_marker_that_sits_a_round_out_and_the_env_accepts_it():
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    nodes = demonstrators(env)
    obs, _ = env.reset(seed=0)
    actions = act(nodes, obs, env)
    del actions["node_1"]
    with pytest.raises(ValueError, match=r"\['node_1'\].*sapo_env\.churn\.OFFLINE sits a "
                                         r"round out\)$") as refused:
        env.step(actions)
    assert "None" not in str(refused.value)  # docs/agents.md: OFFLINE, not None
    _, _, _, _, infos = env.step({**actions, "node_1": OFFLINE})
    assert infos["node_1"]["status"] == "offline"


def test_who_is_offline_does_not_change_the_others_questions():
    def questions_of_node_0(offline_round):
        env = sapo_env.parallel_env(n=3, max_rounds=4)
        nodes = demonstrators(env)
        obs, _ = env.reset(seed=3)
        seen = []
        for t in range(3):
            extra = {"node_2": OFFLINE} if t == offline_round else {}
            obs, _, _, _, _ = env.step(act(nodes, obs, env, **extra))
            seen.append(refs(obs["node_0"]))
        return seen

    assert questions_of_node_0(None) == questions_of_node_0(1)


def test_a_round_with_every_node_offline_completes():
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    env.reset(seed=0)
    _, rewards, _, _, infos = env.step({a: None for a in env.agents})
    assert rewards == {"node_0": 0.0, "node_1": 0.0}
    assert {i["status"] for i in infos.values()} == {"offline"}


def test_a_leaving_node_is_terminated_once_and_its_published_groups_stay_their_window():
    env = sapo_env.parallel_env(n=3, max_rounds=6, pool_window=2)
    nodes = demonstrators(env)
    obs, _ = env.reset(seed=0)
    obs, _, _, _, _ = env.step(act(nodes, obs, env))
    obs, rewards, terms, truncs, infos = env.step(act(nodes, obs, env, node_2=LEAVE))
    assert terms == {"node_0": False, "node_1": False, "node_2": True}
    assert not any(truncs.values()) and rewards["node_2"] == 0.0
    assert infos["node_2"]["status"] == "left" and env.agents == ["node_0", "node_1"]
    assert obs["node_2"]["questions"] == () and obs["node_2"]["batch"] == ()
    # its round-0 groups are still in the pool for round 1's training sets (window 2)
    assert any(g["source"] == "node_2" for g in obs["node_0"]["pool"])
    obs, rewards, terms, _, _ = env.step(act(nodes, obs, env))
    assert set(rewards) == set(terms) == {"node_0", "node_1"}
    assert not any(g["source"] == "node_2" for g in obs["node_0"]["pool"])  # window passed
    with pytest.raises(ValueError, match="unknown or finished nodes"):
        env.step({**act(nodes, obs, env), "node_2": LEAVE})



def test_a_node_leaving_in_the_last_round_is_terminated_not_truncated():
    """The last round ends the episode for everyone, but a node that leaves in it left: it is
    terminated, and only the others are truncated."""
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    observations, _ = env.reset(seed=0)
    nodes = [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)]
    observations, *_ = env.step({a: n.act(observations[a]) for a, n in zip(env.agents, nodes)})
    _, _, terminated, truncated, _ = env.step(
        {"node_0": LEAVE, "node_1": nodes[1].act(observations["node_1"])})
    assert (terminated, truncated) == ({"node_0": True, "node_1": False},
                                       {"node_0": False, "node_1": True})
    assert env.agents == []

@pytest.mark.parametrize("bad", [{"leave": True, "num_external": 2}, {"leave": False},
                                 {"leave": 1, "completions": ()}])
def test_a_malformed_leave_raises_and_changes_nothing(bad):
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    nodes = demonstrators(env)
    obs, _ = env.reset(seed=0)
    before = pickle.dumps(env.state_dict())
    with pytest.raises(ValueError, match="node_1: a leave action is exactly"):
        env.step(act(nodes, obs, env, node_1=bad))
    assert pickle.dumps(env.state_dict()) == before


def test_late_joiners_appear_in_the_step_before_their_first_round():
    env = sapo_env.parallel_env(n=3, max_rounds=5, join_rounds={"node_2": 2})
    nodes = demonstrators(env)
    obs, infos = env.reset(seed=0)
    assert env.agents == ["node_0", "node_1"] and set(obs) == set(infos) == set(env.agents)
    assert env.possible_agents == ["node_0", "node_1", "node_2"]
    obs, rewards, _, _, _ = env.step(act(nodes, obs, env))
    assert "node_2" not in rewards
    obs, rewards, terms, truncs, infos = env.step(act(nodes, obs, env))
    assert rewards["node_2"] == 0.0 and not terms["node_2"] and not truncs["node_2"]
    assert infos["node_2"]["status"] == "joined" and obs["node_2"]["round"] == 2
    assert len(obs["node_2"]["questions"]) == 4 and obs["node_2"]["batch"] == ()
    assert len(obs["node_2"]["pool"]) > 0  # it sees the swarm's pool at once
    obs, rewards, _, _, infos = env.step(act(nodes, obs, env))
    assert infos["node_2"]["status"] == "online" and len(obs["node_2"]["batch"]) == 8


@pytest.mark.parametrize("join_rounds, message", [
    ({"node_9": 2}, "unknown nodes"), ({"node_1": 0}, r"in \[1, 5\)"),
    ({"node_1": 5}, r"in \[1, 5\)"), ({"node_1": 2.0}, "must be an int"),
    ({"node_0": 1, "node_1": 2}, "at least one"), ([("node_1", 2)], "mapping")])
def test_join_rounds_are_validated(join_rounds, message):
    with pytest.raises(ValueError, match=message):
        sapo_env.SwarmConfig(n_agents=2, max_rounds=5, join_rounds=join_rounds)


class Churner:
    """A scripted node that sits out odd rounds and leaves at round 5, counting its learns."""

    def __init__(self, seed):
        self.inner = DemonstratorAgent(accuracy=0.5, seed=seed)
        self.learned = 0

    def act(self, observation):
        r = observation["round"]
        return LEAVE if r >= 5 else OFFLINE if r % 2 else self.inner.act(observation)

    def learn(self, batch):
        self.learned += 1


def test_pettingzoo_api_tests_pass_with_joiners_and_leavers():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PettingZoo warns on wrong agent sets
        parallel_api_test(sapo_env.parallel_env(n=3, max_rounds=12, join_rounds={"node_2": 4}),
                          num_cycles=20)
    # the AEC form (its test also warns that observations are dicts, as for any such env)
    api_test(sapo_env.env(n=3, max_rounds=12, join_rounds={"node_2": 4}), num_cycles=40)
    env = sapo_env.parallel_env(n=3, max_rounds=8, join_rounds={"node_2": 2})
    nodes = {**demonstrators(env), "node_1": Churner(1)}
    obs, _ = env.reset(seed=0)
    live, finished = set(env.agents), set()
    while env.agents:
        obs, rewards, terms, truncs, infos = env.step(act(nodes, obs, env))
        live |= set(env.agents)
        for returned in (obs, rewards, terms, truncs, infos):  # PettingZoo's key-set rule
            assert set(returned) == live
        finished |= {a for a in live if terms[a] or truncs[a]}
        live -= finished
        assert set(env.agents) == live
    assert finished == set(env.possible_agents)


def test_run_records_only_the_rounds_a_node_played_and_only_those_train():
    env = sapo_env.parallel_env(n=3, max_rounds=8, join_rounds={"node_2": 3})
    churner = Churner(1)
    nodes = [DemonstratorAgent(seed=0), churner, DemonstratorAgent(seed=2)]
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False)
    played = ~np.isnan(history.rewards)
    assert played[:, 1].tolist() == [True, False, True, False, True, False, False, False]
    assert played[:, 2].tolist() == [False] * 3 + [True] * 5
    assert churner.learned == 3
    assert history.num_external[1, 1] == -1 and history.generated[1, 1] == 0
    assert all(i["status"] == "online" for infos in history.infos for i in infos.values())


def churning_swarm(seed):
    nodes = simulated_swarm(5, seed=seed)
    nodes["node_1"] = ChurningAgent(nodes["node_1"], offline_probability=0.3, seed=seed)
    nodes["node_3"] = ChurningAgent(nodes["node_3"], leave_round=7, seed=seed)
    return nodes


def churning_env():
    return sapo_env.parallel_env(n=5, max_rounds=16, join_rounds={"node_4": 5})


def test_a_run_with_churn_is_reproducible_and_resumes_bit_for_bit(tmp_path):
    whole = sapo_env.runtime.run(churning_env(), churning_swarm(0), seed=4, progress=False)
    again = sapo_env.runtime.run(churning_env(), churning_swarm(0), seed=4, progress=False)
    np.testing.assert_array_equal(whole.rewards, again.rewards)
    assert np.isnan(whole.rewards[:, 1]).any() and np.isnan(whole.rewards[7:, 3]).all()

    path = tmp_path / "churn.ckpt"
    sapo_env.runtime.run(churning_env(), churning_swarm(0), rounds=10, seed=4, progress=False,
                 checkpoint=Checkpoint(path, every=3))  # interrupted after round 10
    resumed = sapo_env.runtime.run(churning_env(), churning_swarm(0), seed=4, progress=False,
                           checkpoint=Checkpoint(path, every=3))
    np.testing.assert_array_equal(resumed.rewards, whole.rewards)
    np.testing.assert_array_equal(resumed.num_external, whole.num_external)


def test_churning_agent_checks_its_arguments_and_draws_offline_rounds_from_its_seed():
    inner = DemonstratorAgent(seed=0)
    with pytest.raises(ValueError, match="offline_probability"):
        ChurningAgent(inner, offline_probability=1.0)
    with pytest.raises(ValueError, match="leave_round"):
        ChurningAgent(inner, leave_round=-1)
    a, b = ChurningAgent(inner, 0.5, seed=3), ChurningAgent(inner, 0.5, seed=3)
    rounds = [a.offline_in(r) for r in range(200)]
    assert rounds == [b.offline_in(r) for r in range(200)] and 70 < sum(rounds) < 130



def test_churning_builds_the_wrapper_around_a_factorys_node_where_it_is_called():
    from functools import partial

    from agents.wrappers.churning import churning

    seed = np.random.SeedSequence(3)
    factory = pickle.loads(pickle.dumps(  # as an actor gets it
        partial(churning, partial(DemonstratorAgent, seed=0), 0.5, 4, seed)))
    node, here = factory(), ChurningAgent(DemonstratorAgent(seed=0), 0.5, 4, seed)
    assert type(node) is ChurningAgent and type(node.inner) is DemonstratorAgent
    assert [node.offline_in(r) for r in range(50)] == [here.offline_in(r) for r in range(50)]
    assert node.act({"round": 4}) is LEAVE

@pytest.mark.slow
def test_the_churn_example_runs_and_writes_its_results(tmp_path):
    spec = importlib.util.spec_from_file_location("churn_example", ROOT / "examples" / "churn.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary = example.main(["--rounds", "40", "--seeds", "2", "--write", str(tmp_path)])
    assert {p.name for p in tmp_path.iterdir()} == {"results.md", "summary.json", "churn.png"}
    assert set(summary) == {"stable", "offline 25%", "turnover"}
    assert summary["stable"]["node-rounds played (%)"] == (100.0, 0.0)
    assert 60 < summary["offline 25%"]["node-rounds played (%)"][0] < 90
    assert np.isfinite(summary["turnover"]["newcomers, first rounds"][0])


def test_render_and_state_after_a_round_with_nodes_absent():
    # the last round's record holds only the nodes that played (an offline node once broke
    # render() and the restore of a state taken after its round)
    env = sapo_env.parallel_env(n=3, max_rounds=4, render_mode="ansi")
    nodes = demonstrators(env)
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(act(nodes, obs, env, node_1=OFFLINE))
    table = env.render()
    assert "node_0" in table and "node_1" not in table
    fresh = sapo_env.parallel_env(n=3, max_rounds=4, render_mode="ansi")
    fresh.reset(options={"state": pickle.loads(pickle.dumps(env.state_dict()))})
    assert fresh.render() == table
