import numpy as np
import pytest
from conftest import SMALL

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent, RandomAgent


def swarm(seed=0):
    return [DemonstratorAgent(1.0, num_external=1, seed=seed),
            DemonstratorAgent(0.5, num_external=2, seed=seed + 1),
            RandomAgent(num_external=3, seed=seed + 2)]


def test_history_shapes_and_cumulative_rewards():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 6})
    history = sapo_env.runtime.run(env, swarm(), seed=0, progress=False)
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
    a = sapo_env.runtime.run(env, swarm(), rounds=4, seed=3, progress=False)
    b = sapo_env.runtime.run(env, swarm(), rounds=4, seed=3, progress=False)
    assert a.rounds == 4
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert a.infos == b.infos


def test_agents_by_name_and_errors():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 2})
    named = dict(zip(env.possible_agents, swarm()))
    assert sapo_env.runtime.run(env, named, progress=False).rounds == 2
    with pytest.raises(ValueError, match="expected 3 agents"):
        sapo_env.runtime.run(env, swarm()[:2], progress=False)
    with pytest.raises(ValueError, match="missing"):
        sapo_env.runtime.run(env, {"node_0": RandomAgent()}, progress=False)


class Recorder(sapo_env.runtime.Callback):
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
    sapo_env.runtime.run(env, swarm(), callbacks=[recorder], progress=False)
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
    history = sapo_env.runtime.run(env, [learner, RandomAgent(num_external=1, seed=1),
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
    sapo_env.runtime.run(env, [Member(joint), RandomAgent(num_external=1), Member(joint)],
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


class ScriptedRatio:
    """Chooses J from a script and records every call, to check the runner's protocol."""

    def __init__(self, script):
        self.script = list(script)
        self.calls = []

    def choose(self, observation):
        self.calls.append(("choose", observation["round"], observation["num_external"]))
        return self.script[observation["round"]]

    def update(self, reward, info):
        self.calls.append(("update", reward, info["num_external"]))


def test_ratio_policies_choose_next_rounds_J_and_hear_the_outcome():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 4})  # SMALL: round 0's J is 1
    policy = ScriptedRatio([3, 0, 2, 1])
    history = sapo_env.runtime.run(env, swarm(), seed=0, progress=False,
                           ratio_policies={"node_1": policy})
    # node_1's own agent asks for 2; the policy overrides it, a round later each time
    assert history.num_external[:, 1].tolist() == [1, 3, 0, 2]
    assert history.num_external[:, 0].tolist() == [1, 1, 1, 1]  # no policy: its agent's J
    rewards = history.node_rewards("node_1").tolist()
    assert policy.calls == [
        ("choose", 0, 1), ("update", rewards[0], 1),
        ("choose", 1, 3), ("update", rewards[1], 3),
        ("choose", 2, 0), ("update", rewards[2], 0),
        ("choose", 3, 2), ("update", rewards[3], 2),
    ]
    assert history.generated[:, 1].tolist() == [6, 0, 9, 3]  # I x L, with I = 3 - J


def test_ratio_policy_errors_name_the_node():
    env = sapo_env.parallel_env(**{**SMALL, "max_rounds": 2})
    with pytest.raises(ValueError, match=r"not in the swarm: \['node_9'\]"):
        sapo_env.runtime.run(env, swarm(), progress=False,
                             ratio_policies={"node_9": ScriptedRatio([])})
    with pytest.raises(TypeError, match=r"\['node_0'\] need choose"):
        sapo_env.runtime.run(env, swarm(), progress=False, ratio_policies={"node_0": lambda o: 1})
    with pytest.raises(ValueError, match="node_2.*num_external"):
        sapo_env.runtime.run(env, swarm(), progress=False,
                             ratio_policies={"node_2": ScriptedRatio([7])})


def test_play_round_overrides_J_and_reports_the_round_played():
    env = sapo_env.parallel_env(**SMALL)
    agents = dict(zip(env.possible_agents, swarm()))
    observations, _ = env.reset(seed=0)
    record = sapo_env.runtime.play_round(env, agents, observations, {"node_0": 0})
    assert record.round == 0 and env.round == 1
    assert record.actions["node_0"]["num_external"] == 0
    assert record.actions["node_1"]["num_external"] == 2  # its agent's own choice
    assert record.observations["node_0"]["num_external"] == 0
    assert set(record.learn_metrics) == set(env.agents)


def test_a_plain_function_as_an_agent_and_a_bad_ratio_policy_get_errors_that_say_what_to_do():
    import sapo_env
    from agents import DemonstratorAgent

    env = sapo_env.parallel_env(n=2, max_rounds=2)
    with pytest.raises(TypeError, match=r"the agent of node_0 needs act\(observation\)"):
        sapo_env.runtime.run(env, [lambda observation: {}, DemonstratorAgent(seed=1)],
                             progress=False)

    class Greedy:
        def choose(self, observation):
            return 99

        def update(self, reward, info):
            pass

    with pytest.raises(ValueError, match=r"ratio policy Greedy of node_1 chose num_external=99"):
        sapo_env.runtime.run(env, [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)],
                     ratio_policies={"node_1": Greedy()}, progress=False)
