import numpy as np
import pytest
from conftest import SMALL

import sapo_env
from agents import DemonstratorAgent, RandomAgent


def swarm(seed=0):
    return [DemonstratorAgent(1.0, num_external=1, seed=seed),
            DemonstratorAgent(0.5, num_external=2, seed=seed + 1),
            RandomAgent(num_external=3, seed=seed + 2)]


def test_history_shapes_and_cumulative_rewards():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 6})
    history = sapo_env.run(env, swarm(), seed=0, progress=False)
    assert history.agents == ("node_0", "node_1", "node_2")
    assert history.rewards.shape == (6, 3) and history.rounds == 6
    # the J in force: round 0's from the config (SMALL: 1), then what each node asked for
    assert history.num_external.tolist() == [[1, 1, 1]] + [[1, 2, 3]] * 5
    assert history.generated.tolist() == [[6, 6, 6]] + [[6, 3, 0]] * 5  # I x L completions
    assert history.generated_per_node_round == pytest.approx((18 + 5 * 9) / 18)
    np.testing.assert_allclose(history.swarm_mean, history.rewards.mean(axis=1))
    assert history.cumulative_reward == pytest.approx(history.rewards.mean(axis=1).sum())
    assert history.cumulative_reward_total == pytest.approx(history.rewards.sum())
    assert history.node_rewards("node_0").mean() > 0.75  # the perfect demonstrator
    assert history.node_rewards("node_2").mean() < 0.1  # random text
    assert len(history.infos) == len(history.learn_metrics) == 6


def test_rounds_argument_and_determinism():
    env = sapo_env.parallel_env(**SMALL)
    a = sapo_env.run(env, swarm(), rounds=4, seed=3, progress=False)
    b = sapo_env.run(env, swarm(), rounds=4, seed=3, progress=False)
    assert a.rounds == 4
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert a.infos == b.infos


def test_agents_by_name_and_errors():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 2})
    named = dict(zip(env.possible_agents, swarm()))
    assert sapo_env.run(env, named, progress=False).rounds == 2
    with pytest.raises(ValueError, match="expected 3 agents"):
        sapo_env.run(env, swarm()[:2], progress=False)
    with pytest.raises(ValueError, match="missing"):
        sapo_env.run(env, {"node_0": RandomAgent()}, progress=False)


class Recorder(sapo_env.Callback):
    def __init__(self):
        self.events = []

    def on_run_start(self, env, agents):
        self.events.append(("start", sorted(agents)))

    def on_round_end(self, record):
        self.events.append(("round", record.round, sorted(record.rewards),
                            len(record.observations["node_0"]["batch"])))

    def on_run_end(self, history):
        self.events.append(("end", history.rounds))


def test_callbacks_see_every_round():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 3})
    recorder = Recorder()
    sapo_env.run(env, swarm(), callbacks=[recorder], progress=False)
    nodes = ["node_0", "node_1", "node_2"]
    assert recorder.events[0] == ("start", nodes)
    assert [e[:3] for e in recorder.events[1:4]] == [("round", t, nodes) for t in range(3)]
    assert recorder.events[-1] == ("end", 3)


class Learner(RandomAgent):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.batches = []

    def learn(self, batch):
        self.batches.append(batch)
        return {"groups": float(len(batch))}


def test_learn_gets_the_assembled_batch_and_metrics_are_kept():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 2, "filter": "none"})
    learner = Learner(num_external=2)
    history = sapo_env.run(env, [learner, RandomAgent(num_external=1, seed=1),
                                 RandomAgent(num_external=1, seed=2)], progress=False)
    assert [len(b) for b in learner.batches] == [3, 3]
    assert [sum(not g["local"] for g in b) for b in learner.batches] == [1, 2]  # J: 1, then 2
    assert history.learn_metrics[0]["node_0"] == {"groups": 3.0}
    assert history.learn_metrics[0]["node_1"] == {}


class Joint:
    def __init__(self):
        self.calls = []

    def act_jointly(self, observations):
        self.calls.append(sorted(observations))
        return {a: RandomAgent(num_external=1, seed=0).act(o) for a, o in observations.items()}


class Member(RandomAgent):
    def __init__(self, joint):
        super().__init__()
        self.joint_actor = joint

    def act(self, observation):
        raise AssertionError("a joint member is not asked alone")


def test_joint_actors_act_once_for_their_members():
    joint = Joint()
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 2})
    sapo_env.run(env, [Member(joint), RandomAgent(num_external=1), Member(joint)],
                 progress=False)
    assert joint.calls == [["node_0", "node_2"]] * 2


def test_random_agent_lengths_reach_max_chars():
    agent = RandomAgent(max_chars=3, seed=0)
    observation = sapo_env.make_observation(
        round=0, system_prompt="", completions_per_question=50, train_budget=8,
        num_external=0, questions=({"id": "q"},))
    lengths = {len(t) for t in agent.act(observation)["completions"][0]}
    assert lengths == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="max_chars"):
        RandomAgent(max_chars=-1)
