"""The trust boundary of remote nodes: what a remote node sends
costs at most its own round. Plain data the env refuses (a malformed leave or pending action,
``completions=np.array(0)``, junk learn metrics) never stops the run; a remote joint actor
cannot act for a node it does not host; and a Ray node's action whose ``__reduce__`` runs code
never runs in the driver. Fakes in this process stand for remote nodes where they can (fast);
one Ray test covers the pickle (``local_ray`` is conftest.py's)."""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent
from sapo_env.actions import parse_action
from sapo_env.churn import absence, is_leave, is_pending
from sapo_env.runtime import Callback


def _done(value):
    future = Future()
    future.set_result(value)
    return future


class _Scripted:
    """A remote node (``ConcurrentAgent``: its calls return futures) playing a demonstrator,
    whose action in round r is ``bad[r](action)`` and whose learn metrics are ``metrics``."""

    def __init__(self, seed, bad=None, metrics=None):
        self.inner = DemonstratorAgent(num_external=2, seed=seed)
        self.bad, self.metrics, self.round = dict(bad or {}), metrics, 0

    def act(self, observation):
        action = dict(self.inner.act(observation))
        action = self.bad[self.round](action) if self.round in self.bad else action
        self.round += 1
        return action

    def learn(self, batch):
        self.inner.learn(batch)
        return self.metrics

    def submit_act(self, observation):
        return _done(self.act(observation))

    def submit_learn(self, batch):
        return _done(self.learn(batch))

    def submit_ready(self):
        return _done(None)


class _Records(Callback):
    def __init__(self):
        self.records = []

    def on_run_start(self, env, agents):
        self.env, self.live = env, []

    def on_round_end(self, record):
        self.records.append(record)
        self.live.append(list(self.env.agents))


class _Unsized(list):
    def __len__(self):
        raise RuntimeError("no length")


class _OneJ:
    def choose(self, observation):
        return 1

    def update(self, reward, info):
        pass


BAD = {  # what a remote node sends in round 1 (break 5)
    "leave False": lambda action: {"leave": False},
    "pending with more": lambda action: {"pending": True, **action},
    "completions np.array(0)": lambda action: {**action, "completions": np.array(0)},
    "a sequence whose len raises": lambda action: {**action, "completions": _Unsized()},
}


@pytest.mark.parametrize("deadline", [None, 5.0])
@pytest.mark.parametrize("bad", list(BAD))
def test_plain_data_the_env_refuses_costs_a_remote_node_only_its_round(bad, deadline, caplog):
    env = sapo_env.parallel_env(n=3, max_rounds=4)
    records = _Records()
    agents = [DemonstratorAgent(num_external=2, seed=0), DemonstratorAgent(num_external=2, seed=1),
              _Scripted(2, bad={1: BAD[bad]})]
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=[records],
                                   deadline=deadline)
    assert len(history.rewards) == 4 and not np.isnan(history.rewards[:, :2]).any()
    refused = {r.round: r.refused for r in records.records if r.refused}
    assert list(refused) == [1] and list(refused[1]) == ["node_2"]
    played = [r.round for r in records.records if "node_2" in r.rewards]
    assert played == [0, 2, 3]  # it sat round 1 out, and is still in the swarm
    assert caplog.text.count("node_2 sent an action the env refuses") == 1


@pytest.mark.parametrize("deadline", [None, 5.0])
def test_a_ratio_policy_over_a_remote_nodes_junk_does_not_stop_the_run(deadline):
    env = sapo_env.parallel_env(n=3, max_rounds=3)
    records = _Records()
    agents = [DemonstratorAgent(num_external=2, seed=0), DemonstratorAgent(num_external=2, seed=1),
              _Scripted(2, bad={1: lambda action: [1, 2]})]
    sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=[records],
                         ratio_policies={"node_2": _OneJ()}, deadline=deadline)
    assert [sorted(r.refused) for r in records.records] == [[], ["node_2"], []]


def test_junk_learn_metrics_from_a_remote_node_are_dropped(caplog):
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    agents = [DemonstratorAgent(num_external=2, seed=0),
              _Scripted(1, metrics={"loss": 0.5, "bad": [1], 3: 1.0})]
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False)
    assert [m["node_1"] for m in history.learn_metrics] == [{"loss": 0.5}] * 2
    agents[1].metrics = ["junk"]
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False)
    assert [m["node_1"] for m in history.learn_metrics] == [{}] * 2
    assert "node_1 sent learn metrics that are a list" in caplog.text


def test_the_env_and_the_screen_read_leave_and_pending_the_same_way():
    for exact, status in (({"leave": True}, "left"), ({"pending": True}, "pending"),
                          (None, "offline")):
        assert absence("node_0", exact) == status
    assert is_leave({"leave": True}) and is_pending({"pending": True})
    for bad in ({"leave": False}, {"leave": 1}, {"leave": True, "num_external": 2},
                {"pending": True, "completions": ()}, {"pending": "yes"}):
        assert not is_leave(bad) and not is_pending(bad)
        with pytest.raises(ValueError, match="node_0: a (leave|pending) action is exactly"):
            absence("node_0", bad)
    assert absence("node_0", {"completions": (), "num_external": 0}) is None


@pytest.mark.parametrize("field, value", [
    ("completions", np.array(0)), ("completions", [np.array(0), np.array(0)]),
    ("share", np.array(1)), ("logprobs", np.array(0.5)),
    ("token_ids", [[[2**80]] * 3] * 2)])
def test_a_malformed_action_field_is_a_value_error_naming_the_node(field, value):
    config = sapo_env.parallel_env(n=2, completions_per_question=3).config
    action = {"completions": [["a"] * 3] * 2, "num_external": 1, field: value}
    if field == "token_ids":
        action["logprobs"] = [[[-0.5]] * 3] * 2
    with pytest.raises(ValueError, match=f"node_1: .*{field}"):
        parse_action("node_1", action, 2, config)


class _HostileJoint:
    """A remote joint actor (``ConcurrentJointActor``) hosting node_1 and node_2 that also
    answers for node_0 (``{"leave": True}`` and learn metrics), and in round 1 sends no action
    for node_2."""

    def __init__(self):
        self.nodes = {f"node_{i}": DemonstratorAgent(num_external=2, seed=i) for i in (1, 2)}
        self.round = 0

    def submit_act_jointly(self, observations):
        actions = {a: self.nodes[a].act(o) for a, o in observations.items()}
        if self.round == 1:
            del actions["node_2"]
        self.round += 1
        return _done({**actions, "node_0": {"leave": True}, "node_7": "junk"})

    def submit_learn_jointly(self, batches):
        return _done({**{a: {"loss": 1.0} for a in batches}, "node_0": {"loss": 666.0}})


class _Member:
    def __init__(self, joint_actor, name):
        self.joint_actor, self.name = joint_actor, name

    def act(self, observation):
        raise AssertionError("a member acts through its joint actor")

    def learn(self, batch):
        raise AssertionError("a member learns through its joint actor")


def test_a_remote_joint_actor_cannot_act_for_a_node_it_does_not_host(caplog):
    joint = _HostileJoint()
    agents = {"node_0": DemonstratorAgent(num_external=2, seed=0),
              **{a: _Member(joint, a) for a in ("node_1", "node_2")}}
    records = _Records()
    history = sapo_env.runtime.run(sapo_env.parallel_env(n=3, max_rounds=3), agents, seed=0,
                                   progress=False, callbacks=[records])
    assert records.live[:2] == [["node_0", "node_1", "node_2"]] * 2  # node_0 never evicted
    assert [r.round for r in records.records if "node_0" in r.rewards] == [0, 1, 2]
    assert all(m["node_0"] == {} and m["node_1"] == {"loss": 1.0}
               for m in history.learn_metrics)  # node_0's own (none), never the actor's
    assert [sorted(r.refused) for r in records.records] == [[], ["node_2"], []]
    assert "no action for it" in records.records[1].refused["node_2"]
    assert caplog.text.count("answered for 2 node(s) it was not asked for") == 1


# --- Ray: the driver never unpickles what an actor's agent built ---------------------------

def _mark(path):
    """Run by unpickling: leaves the pid of the process that unpickled."""
    Path(path).write_text(str(os.getpid()))


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return _mark, (self.marker,)


class _PayloadError(Exception):
    def __init__(self, marker):
        super().__init__("boom")
        self.marker = marker

    def __reduce__(self):
        return _mark, (self.marker,)


class _Smuggler(DemonstratorAgent):
    """A demonstrator whose action in round 1 is a payload (in round 2 one hides in its
    completions), whose first update raises a payload, and whose ``smuggle`` returns one."""

    def __init__(self, marker, **kwargs):
        super().__init__(num_external=2, **kwargs)
        self.marker, self.rounds = marker, 0

    def act(self, observation):
        action, self.rounds = dict(super().act(observation)), self.rounds + 1
        if self.rounds == 2:
            return _Payload(self.marker)
        if self.rounds == 3:
            action["completions"] = [[_Payload(self.marker)]]
        return action

    def learn(self, batch):
        if self.rounds == 1:
            raise _PayloadError(self.marker)
        return super().learn(batch)

    def smuggle(self):
        return {"x": _Payload(self.marker)}


def _smugglers(marker):
    return {"node_2": _Smuggler(marker, seed=2)}


@pytest.mark.slow
def test_a_ray_nodes_pickle_payload_never_runs_in_the_driver(local_ray, tmp_path, caplog):
    import ray

    from agents.wrappers.remote import RemoteError, remote, remote_joint

    marker = tmp_path / "ran"
    env = sapo_env.parallel_env(n=3, max_rounds=4)
    nodes = {"node_0": DemonstratorAgent(num_external=2, seed=0),
             "node_1": remote(partial(_Smuggler, str(marker), seed=1), num_cpus=0.5),
             **remote_joint(partial(_smugglers, str(marker)), num_cpus=0.5, names=["node_2"])}
    records = _Records()
    with caplog.at_level(logging.WARNING):
        history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, callbacks=[records])
    ran = marker.read_text() if marker.exists() else None
    assert ran is None, f"the payload ran in process {ran} (the driver is {os.getpid()})"
    assert not np.isnan(history.rewards[:, 0]).any()
    assert [sorted(r.refused) for r in records.records] == [
        [], ["node_1", "node_2"], ["node_1", "node_2"], []]
    assert "not plain data" in records.records[1].refused["node_1"]
    assert "its update is lost: its agent raised _PayloadError: boom" in caplog.text
    for node in ("node_1", "node_2"):
        with pytest.raises(RemoteError, match="not plain data"):
            nodes[node].call("smuggle")
        assert nodes[node].state_dict().keys() == DemonstratorAgent().state_dict().keys()
    assert not marker.exists()
    nodes["node_1"].kill()
    ray.kill(nodes["node_2"].joint_actor.actor)


class _JunkAtEvaluation(_Scripted):
    """A remote node that plays normally and answers held-out questions (asked for one
    completion each) with junk."""

    def act(self, observation):
        if observation["completions_per_question"] == 1:
            return {"completions": 5}
        return super().act(observation)


def test_a_remote_nodes_junk_held_out_answer_scores_nan_and_the_run_goes_on(caplog):
    from sapo_env.runtime.held_out import HeldOutEvaluator

    env = sapo_env.parallel_env(n=3, max_rounds=4)
    evaluator = HeldOutEvaluator(every=2, n_questions=8)
    agents = [DemonstratorAgent(num_external=2, seed=0), DemonstratorAgent(num_external=2, seed=1),
              _JunkAtEvaluation(2)]
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=[evaluator])
    assert not np.isnan(history.rewards).any()
    scores = evaluator.result.as_array()
    assert np.isnan(scores[:, 2]).all() and not np.isnan(scores[:, :2]).any()
    assert "node_2: its held-out answer after round 1 cannot be scored" in caplog.text

    class _LocalJunk(DemonstratorAgent):  # in process: a bug in the caller's code, raised
        def act(self, observation):
            if observation["completions_per_question"] == 1:
                return {"completions": 5}
            return super().act(observation)

    with pytest.raises(TypeError):
        sapo_env.runtime.run(sapo_env.parallel_env(n=2, max_rounds=2),
                             [DemonstratorAgent(seed=0), _LocalJunk(seed=1)], seed=0,
                             progress=False, callbacks=[HeldOutEvaluator(every=2, n_questions=8)])
