"""Asynchronous nodes: the env's pending action (a node that keeps its questions and answers
them late), rounds with a deadline (sapo_env.runtime.asynchronous), and dead nodes leaving the swarm
(sapo_env.runtime.NodeFailure) in synchronous and asynchronous runs."""

from __future__ import annotations

import pickle
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent
from agents.wrappers.slow import SlowAgent
from sapo_env.churn import PENDING
from sapo_env.runtime import Callback, NodeFailure
from sapo_env.runtime.agent_calls import ConcurrentAgent


def demonstrators(env, accuracy=0.5):
    return {a: DemonstratorAgent(accuracy=accuracy, num_external=4, seed=i)
            for i, a in enumerate(env.possible_agents)}


def ids(observation):
    return [q["id"] for q in observation["questions"]]


def test_a_pending_node_keeps_its_questions_and_answers_them_late():
    env = sapo_env.parallel_env(n=3, max_rounds=6, pool_window=3)
    nodes = demonstrators(env)
    obs, _ = env.reset(seed=0)
    held = obs["node_2"]
    for _ in range(2):  # rounds 0 and 1: node_2 is still answering round 0's questions
        actions = {a: nodes[a].act(obs[a]) for a in env.agents if a != "node_2"}
        obs, rewards, terms, _, infos = env.step({**actions, "node_2": PENDING})
        assert rewards["node_2"] == 0.0 and not terms["node_2"]
        assert infos["node_2"] == {"status": "pending", "num_external": 4,
                                   "generated_completions": 0}
        assert obs["node_2"]["batch"] == () and "node_2" in env.agents
        assert ids(obs["node_2"]) == ids(held)  # the same questions, the pool of the moment
        assert obs["node_2"]["round"] == env.round
    late = nodes["node_2"].act(held)  # the answer to round 0, arriving in round 2
    actions = {a: nodes[a].act(obs[a]) for a in env.agents if a != "node_2"}
    obs, rewards, _, _, infos = env.step({**actions, "node_2": late})
    assert infos["node_2"]["status"] == "online" and infos["node_2"]["staleness"] == 2
    assert infos["node_0"]["staleness"] == 0
    assert infos["node_2"]["stale_unshared"] == 0  # round 0 is inside the 3-round window
    own = [g for g in obs["node_2"]["batch"] if g["local"]]
    assert own and {g["round"] for g in own} == {0}  # it trains on its late groups
    published = [g for g in obs["node_0"]["pool"] if g["source"] == "node_2"]
    assert published and {g["round"] for g in published} == {0}
    assert len(obs["node_2"]["questions"]) == 4 and ids(obs["node_2"]) != ids(held)


def test_late_groups_older_than_the_pool_window_train_but_are_not_published():
    env = sapo_env.parallel_env(n=3, max_rounds=6, pool_window=1)
    nodes = demonstrators(env)
    obs, _ = env.reset(seed=1)
    held = obs["node_1"]
    actions = {a: nodes[a].act(obs[a]) for a in env.agents if a != "node_1"}
    obs, *_ = env.step({**actions, "node_1": PENDING})
    actions = {a: nodes[a].act(obs[a]) for a in env.agents if a != "node_1"}
    obs, _, _, _, infos = env.step({**actions, "node_1": nodes["node_1"].act(held)})
    assert infos["node_1"]["staleness"] == 1
    assert infos["node_1"]["stale_unshared"] == infos["node_1"]["shared_groups"] > 0
    assert all(g["source"] != "node_1" for g in obs["node_0"]["pool"])
    assert any(g["local"] for g in obs["node_1"]["batch"])


def test_a_malformed_pending_action_raises_and_changes_nothing():
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    env.reset(seed=0)
    before = pickle.dumps(env.state_dict())
    with pytest.raises(ValueError, match=r"node_1: a pending action is exactly \{'pending': "):
        env.step({"node_0": None, "node_1": {"pending": True, "completions": ()}})
    assert pickle.dumps(env.state_dict()) == before


def test_a_checkpoint_holds_what_a_pending_node_still_answers():
    def play(interrupt: bool):
        env = sapo_env.parallel_env(n=3, max_rounds=5, pool_window=2)
        nodes = demonstrators(env)
        obs, _ = env.reset(seed=4)
        held = obs["node_0"]
        rewards = []
        for t in range(4):
            actions = {a: nodes[a].act(obs[a]) for a in env.agents}
            actions["node_0"] = PENDING if t < 2 else (nodes["node_0"].act(held) if t == 2
                                                        else actions["node_0"])
            obs, r, *_ = env.step(actions)
            rewards.append(r)
            if interrupt and t == 0:
                state = pickle.loads(pickle.dumps(env.state_dict()))
                env = sapo_env.parallel_env(n=3, max_rounds=5, pool_window=2)
                obs, _ = env.reset(options={"state": state})
        return rewards

    assert play(interrupt=True) == play(interrupt=False)


class Gated:
    """A ``ConcurrentAgent`` in a thread whose ``act`` waits until the test opens its gate."""

    def __init__(self, inner):
        self.inner, self.gate = inner, threading.Event()
        self.gate.set()
        self.worker = ThreadPoolExecutor(1)  # one call at a time, as in a Ray actor

    def submit_act(self, observation) -> Future:
        return self.worker.submit(lambda: (self.gate.wait(), self.inner.act(observation))[1])

    def submit_learn(self, batch) -> Future:
        return self.worker.submit(self.inner.learn, batch)

    def submit_ready(self) -> Future:
        return self.worker.submit(lambda: None)

    def act(self, observation):
        return self.submit_act(observation).result()

    def learn(self, batch):
        return self.submit_learn(batch).result()


class AtRound(Callback):
    def __init__(self, actions):
        self.actions = actions  # round -> what to do after it

    def on_round_end(self, record):
        self.actions.get(record.round, lambda: None)()


class CountsLearns(DemonstratorAgent):
    """A demonstrator whose every update takes ``seconds`` and reports how many it made."""

    def __init__(self, *args, seconds: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds, self.updates = seconds, 0

    def learn(self, batch):
        threading.Event().wait(self.seconds)
        self.updates += 1
        return {"updates": 1}


def test_a_node_that_misses_the_deadline_plays_late_and_the_others_go_on():
    env = sapo_env.parallel_env(n=3, max_rounds=7, pool_window=4)
    nodes = demonstrators(env)
    inner = CountsLearns(accuracy=0.5, num_external=4, seed=2, seconds=0.05)
    slow = nodes["node_2"] = Gated(inner)
    assert isinstance(slow, ConcurrentAgent)
    gates = AtRound({0: slow.gate.clear, 3: slow.gate.set})  # stuck in rounds 1-3
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=0.2,
                                   callbacks=[gates])
    status = [i["node_2"]["status"] if "node_2" in i else "pending" for i in history.infos]
    assert status == ["online", "pending", "pending", "pending", "online", "online", "online"]
    assert np.isnan(history.rewards[1:4, 2]).all() and not np.isnan(history.rewards[:, :2]).any()
    assert [i["node_2"]["staleness"] for i in history.infos if "node_2" in i] == [0, 3, 0, 0]
    # it learned once per round it played, and run returned only after the last update
    # (0.05 s, still in flight when the last round ended), whose metrics the last round holds
    assert inner.updates == 4
    assert history.learn_metrics[-1]["node_2"] == {"updates": 1}


def test_with_every_node_in_time_an_asynchronous_run_is_the_synchronous_one():
    def play(deadline):
        env = sapo_env.parallel_env(n=3, max_rounds=8)
        nodes = {a: Gated(n) for a, n in demonstrators(env).items()}
        return sapo_env.runtime.run(env, nodes, seed=2, progress=False, deadline=deadline)

    sync, asynchronous = play(None), play(30.0)
    np.testing.assert_array_equal(sync.rewards, asynchronous.rewards)
    np.testing.assert_array_equal(sync.num_external, asynchronous.num_external)


class Dies:
    """A node whose machine goes away at a given round (its calls raise ``NodeFailure``)."""

    def __init__(self, inner, at_round):
        self.inner, self.at_round, self.dead = inner, at_round, False

    def act(self, observation):
        if observation["round"] >= self.at_round:
            self.dead = True
        if self.dead:
            raise NodeFailure("the test killed it")
        return self.inner.act(observation)

    def learn(self, batch):
        return self.inner.learn(batch)


@pytest.mark.parametrize("deadline", [None, 5.0])
def test_a_node_that_dies_leaves_the_swarm_and_the_run_goes_on(deadline, caplog):
    env = sapo_env.parallel_env(n=3, max_rounds=6)
    nodes = {a: Gated(n) for a, n in demonstrators(env).items()}
    nodes["node_1"] = Gated(Dies(demonstrators(env)["node_1"], at_round=2))
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=deadline)
    assert all("node_1" not in infos for infos in history.infos[2:])
    assert "node_1 failed and is removed from the swarm" in caplog.text
    assert np.isnan(history.rewards[2:, 1]).all() and not np.isnan(history.rewards[:2, 1]).any()
    assert not np.isnan(history.rewards[:, [0, 2]]).any()


class StartsSlowly(Gated):
    """A ``Gated`` node whose actor takes ``seconds`` to start: every call waits behind it."""

    def __init__(self, inner, seconds: float):
        super().__init__(inner)
        self.worker.submit(threading.Event().wait, seconds)


def test_start_up_does_not_count_against_the_first_deadline():
    """Each node takes 1.5 s to start, the deadline is 0.3 s: the run waits for the start-ups
    (``submit_ready``) before round 0's deadline begins, so every node plays round 0 (without
    the wait all three would be pending). Acting itself takes microseconds."""
    env = sapo_env.parallel_env(n=3, max_rounds=1)
    nodes = [StartsSlowly(DemonstratorAgent(accuracy=0.5, seed=i), seconds=1.5)
             for i in range(3)]
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=0.3)
    assert not np.isnan(history.rewards[0]).any()


class SlowToScore(DemonstratorAgent):
    """Every completion is a number that takes its scorer about a second on coin_flip."""

    def act(self, observation):
        action = dict(super().act(observation))
        action["completions"] = [["<answer>1e999999999</answer>"] * len(c)
                                 for c in action["completions"]]
        return action


def test_in_asynchronous_rounds_a_node_slow_to_score_costs_only_its_budget():
    """The deadline bounds the wait for actions; scoring after it is bounded per node by
    node_score_budget: the hostile node runs out of budget every round (counted), the honest
    nodes' completions are all scored."""
    env = sapo_env.parallel_env(n=3, max_rounds=2, tasks=[["coin_flip", 1.0, {}]],
                                node_score_budget=0.5, score_time_limit=0.25)
    nodes = [Gated(DemonstratorAgent(accuracy=0.5, seed=0)),
             Gated(DemonstratorAgent(accuracy=0.5, seed=1)), Gated(SlowToScore(seed=2))]
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=5.0)
    for infos in history.infos:
        assert infos["node_2"]["scoring_failures"]["budget"] > 0
        for honest in ("node_0", "node_1"):
            assert sum(infos[honest]["scoring_failures"].values()) == 0


def test_a_bug_in_a_node_is_not_a_node_failure():
    class Buggy(DemonstratorAgent):
        def act(self, observation):
            raise KeyError("a bug")

    env = sapo_env.parallel_env(n=2, max_rounds=2)
    with pytest.raises(KeyError, match="a bug"):
        sapo_env.runtime.run(env, [DemonstratorAgent(seed=0), Buggy(seed=1)], seed=0,
                             progress=False)


def test_deadline_errors_are_clear(tmp_path):
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    remote_nodes = {a: Gated(n) for a, n in demonstrators(env).items()}
    with pytest.raises(ValueError, match=r"deadline must be a number of seconds > 0, got 0"):
        sapo_env.runtime.run(env, remote_nodes, deadline=0, progress=False)
    with pytest.raises(ValueError, match=r"deadline applies to remote nodes .* none of the "):
        sapo_env.runtime.run(env, demonstrators(env), deadline=1.0, progress=False)
    with pytest.raises(ValueError, match=r"checkpoint needs synchronous rounds"):
        sapo_env.runtime.run(env, remote_nodes, deadline=1.0, progress=False,
                     checkpoint=sapo_env.runtime.Checkpoint(tmp_path / "a.ckpt"))


def test_a_slow_agent_takes_its_time_and_answers_as_its_inner_node():
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    obs, _ = env.reset(seed=0)
    slow = SlowAgent(DemonstratorAgent(seed=0), act_seconds=0.05)
    import time

    began = time.monotonic()
    action = slow.act(obs["node_0"])
    assert time.monotonic() - began >= 0.05
    assert action == DemonstratorAgent(seed=0).act(obs["node_0"])
    with pytest.raises(ValueError, match=r"act_seconds must be a number of seconds >= 0"):
        SlowAgent(DemonstratorAgent(seed=0), act_seconds=-1)


# --- asynchronous rounds with nodes that learn: each update once, deadlines, updates in flight

class Learns(DemonstratorAgent):
    """A demonstrator whose ``learn`` changes its state: it remembers, for each update, the
    rounds of the questions of its own groups in the batch (the round it learned from), and
    how many updates finished; each update takes ``seconds`` and reports a metric of its own
    (``update_<k>``), so a report counted twice shows."""

    def __init__(self, *args, seconds: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds, self.learned, self.finished = seconds, [], 0

    def learn(self, batch):
        self.learned.append(sorted({g["round"] for g in batch if g["local"]}))
        threading.Event().wait(self.seconds)
        self.finished += 1
        return {f"update_{len(self.learned)}": 1.0}


class SlowActs(Gated):
    """A ``Gated`` node whose every act takes ``seconds`` (a slow generator)."""

    def __init__(self, inner, seconds: float):
        super().__init__(inner)
        self.seconds = seconds

    def submit_act(self, observation) -> Future:
        def act():
            threading.Event().wait(self.seconds)
            return self.inner.act(observation)

        return self.worker.submit(act)


def rounds_learned_from(history, node):
    """For each round ``node`` played, the round of the questions it answered in it (the round
    played minus its staleness): what it should have learned from, once each."""
    return [[t - infos[node].get("staleness", 0)] for t, infos in enumerate(history.infos)
            if node in infos]


def test_in_asynchronous_rounds_every_node_learns_once_from_each_round_it_played():
    """A local node, a remote node in time and a remote node stuck in rounds 1-2 (it answers
    round 1's questions in round 3): each learns exactly once per round it played, from the
    batch of that round, never from a round it sat out, and each update's metrics are reported
    once. Logical gates, no timing: the deadline (1 s) only has to pass while node_2 is stuck."""
    env = sapo_env.parallel_env(n=3, max_rounds=6, pool_window=4)
    inner = {a: Learns(accuracy=0.5, num_external=4, seed=i)
             for i, a in enumerate(env.possible_agents)}
    nodes = {"node_0": inner["node_0"], "node_1": Gated(inner["node_1"]),
             "node_2": Gated(inner["node_2"])}
    gates = AtRound({0: nodes["node_2"].gate.clear, 2: nodes["node_2"].gate.set})
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=1.0,
                                   callbacks=[gates])
    assert [i["node_2"]["status"] if "node_2" in i else "pending" for i in history.infos] \
        == ["online", "pending", "pending", "online", "online", "online"]
    assert rounds_learned_from(history, "node_2") == [[0], [1], [4], [5]]
    for a, agent in inner.items():
        assert agent.learned == rounds_learned_from(history, a), a
        assert agent.finished == len(agent.learned)
        reported = [key for metrics in history.learn_metrics for key in metrics.get(a, {})]
        assert sorted(reported) == sorted(f"update_{k + 1}" for k in range(agent.finished)), a


def test_the_deadline_is_counted_from_each_rounds_start():
    """A remote node takes 0.4 s to act, the deadline is 1.5 s: it makes every round's
    deadline, though 8 rounds take longer than one deadline (counted from the run's start,
    it would miss the later rounds)."""
    env = sapo_env.parallel_env(n=2, max_rounds=8)
    nodes = [DemonstratorAgent(accuracy=0.5, seed=0),
             SlowActs(DemonstratorAgent(accuracy=0.5, seed=1), seconds=0.4)]
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=1.5)
    assert [i["node_1"]["status"] for i in history.infos if "node_1" in i] == ["online"] * 8


def test_the_first_deadline_starts_once_the_remote_nodes_are_up():
    """Starting takes 2 s, acting 0.2 s, the deadline is 1 s: counted from when the node is up
    the node makes round 0; counted from before the start-up it could not (it would still be
    acting when a deadline already past is checked)."""
    env = sapo_env.parallel_env(n=2, max_rounds=1)
    slow = SlowActs(DemonstratorAgent(accuracy=0.5, seed=1), seconds=0.2)
    slow.worker.submit(threading.Event().wait, 2.0)  # the actor's start-up
    history = sapo_env.runtime.run(env, [DemonstratorAgent(accuracy=0.5, seed=0), slow],
                                   seed=0, progress=False, deadline=1.0)
    assert history.infos[0]["node_1"]["status"] == "online"


def test_the_deadline_counts_the_time_the_local_nodes_take_to_act():
    """The round begins before the in-process nodes act: with a local node that takes 2 s, a
    remote one that takes 3 s and a deadline of 2 s, the remote node misses round 0 (counted
    from after the local act, the round would wait until 4 s and take its answer)."""
    class SlowLocal(DemonstratorAgent):
        def act(self, observation):
            threading.Event().wait(2.0)
            return super().act(observation)

    env = sapo_env.parallel_env(n=2, max_rounds=1)
    nodes = [SlowLocal(accuracy=0.5, seed=0),
             SlowActs(DemonstratorAgent(accuracy=0.5, seed=1), seconds=3.0)]
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=2.0)
    assert "node_0" in history.infos[0] and "node_1" not in history.infos[0]
    assert np.isnan(history.rewards[0, 1])


def test_run_returns_only_after_every_update_in_flight():
    """Each update of the remote node takes 1 s and is not waited for in its round: ``run``
    still returns only once the last one finished, with its metrics in the last round."""
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    inner = Learns(accuracy=0.5, num_external=4, seed=1, seconds=1.0)
    history = sapo_env.runtime.run(env, [DemonstratorAgent(accuracy=0.5, seed=0), Gated(inner)],
                                   seed=0, progress=False, deadline=30.0)
    assert inner.finished == len(inner.learned) == 3
    assert history.learn_metrics[-1]["node_1"]["update_3"] == 1.0
