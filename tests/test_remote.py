"""Nodes in Ray actors (agents.wrappers.remote): a synchronous run on ray.init(num_cpus=2) is
exactly the in-process run for the same seed, with simulated learners and with tiny language models;
the runner starts every remote call before waiting; dead and slow nodes; Ray's processes and files
are gone after (``local_ray`` is conftest.py's)."""

from __future__ import annotations

import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent
from agents.sim.simulated import SimulatedLearner, SimulatedLearnerConfig
from sapo_env.runtime.agent_calls import ConcurrentAgent

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # Ray: a local cluster and its actors
HERE = Path(__file__).resolve().parent


def simulated_factories(names, seed):
    """The learners simulated_swarm(names, seed) builds, as factories to build them anywhere."""
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {a: partial(SimulatedLearner, SimulatedLearnerConfig(num_external=4), child)
            for a, child in zip(names, children)}


def test_a_remote_simulated_swarm_runs_exactly_as_in_process(local_ray):
    from agents.wrappers.remote import remote_swarm

    env = sapo_env.parallel_env(n=4, max_rounds=25)
    # fresh factories for each run: a SeedSequence counts the children spawned from it
    here = sapo_env.runtime.run(env, {a: f() for a, f in simulated_factories(env.possible_agents, 3)
                              .items()}, seed=5, progress=False)
    nodes = remote_swarm(simulated_factories(env.possible_agents, 3), num_cpus=0.5)
    assert all(isinstance(n, ConcurrentAgent) for n in nodes.values())
    there = sapo_env.runtime.run(sapo_env.parallel_env(n=4, max_rounds=25), nodes, seed=5,
                         progress=False)
    np.testing.assert_array_equal(here.rewards, there.rewards)
    np.testing.assert_array_equal(here.num_external, there.num_external)
    assert here.learn_metrics == there.learn_metrics
    state = nodes["node_0"].state_dict()  # what the actor's agent offers, through call
    assert nodes["node_0"].call("state_dict").keys() == state.keys()
    for node in nodes.values():
        node.kill()


def test_ratio_policies_steer_remote_nodes_as_in_process_ones(local_ray):
    from agents import DiscountedUCB, PoolQuality
    from agents.wrappers.remote import remote_swarm

    def play(nodes):
        policies = {"node_0": DiscountedUCB(), "node_2": PoolQuality()}
        return sapo_env.runtime.run(sapo_env.parallel_env(n=3, max_rounds=15), nodes, seed=1,
                            progress=False, ratio_policies=policies)

    env = sapo_env.parallel_env(n=3)
    here = play({a: f() for a, f in simulated_factories(env.possible_agents, 2).items()})
    nodes = remote_swarm(simulated_factories(env.possible_agents, 2), num_cpus=0.5)
    there = play(nodes)
    np.testing.assert_array_equal(here.num_external, there.num_external)
    np.testing.assert_array_equal(here.rewards, there.rewards)
    assert len(set(here.num_external[:, 0])) > 1  # the policy did move J
    for node in nodes.values():
        node.kill()


def tiny_grpo_agent(seed):
    """A GRPO node on a 2-layer Llama (tests/tiny_lm.py), built where it is called."""
    import torch
    from tiny_lm import char_tokenizer, tiny_llama

    from agents import GRPOAgent, GRPOConfig

    torch.set_num_threads(1)
    tok = char_tokenizer()
    config = GRPOConfig(max_new_tokens=8, learning_rate=1e-2, device="cpu")
    return GRPOAgent(tiny_llama(tok, seed=0), tok, config, seed=seed)


def test_remote_language_model_nodes_run_exactly_as_in_process(local_ray):
    pytest.importorskip("torch")
    from agents.wrappers.remote import remote

    def swarm(make):
        env = sapo_env.parallel_env(n=2, max_rounds=2, completions_per_question=2,
                                    train_budget=2, num_external=1, tasks=["basic_arithmetic"])
        nodes = {a: make(partial(tiny_grpo_agent, seed=i))
                 for i, a in enumerate(env.possible_agents)}
        return sapo_env.runtime.run(env, nodes, seed=0, progress=False)

    here = swarm(lambda factory: factory())
    there = swarm(partial(remote, num_cpus=1))
    np.testing.assert_array_equal(here.rewards, there.rewards)
    assert here.learn_metrics[-1].keys() == there.learn_metrics[-1].keys()
    for a, metrics in here.learn_metrics[-1].items():
        for key in ("loss", "grad_norm", "tokens"):
            assert metrics[key] == there.learn_metrics[-1][a][key]


class Meets:
    """A scripted node that, in each act and learn, waits (at most 30 s) for its partner node to
    be in the same call, and leaves a file saying whether the partner came: two nodes meet only
    if their calls run at the same time, whatever the machine's load (no clock decides)."""

    def __init__(self, seed, name, partner, folder):
        self.inner = DemonstratorAgent(seed=seed)
        self.name, self.partner, self.folder = name, partner, Path(folder)
        self.calls = {"act": 0, "learn": 0}

    def meet(self, call):
        count = self.calls[call] = self.calls[call] + 1
        (self.folder / f"{self.name}-{call}-{count}").touch()
        theirs = self.folder / f"{self.partner}-{call}-{count}"
        give_up = time.monotonic() + 30
        while not theirs.exists() and time.monotonic() < give_up:
            time.sleep(0.01)
        if theirs.exists():
            (self.folder / f"{self.name}-{call}-{count}.met").touch()

    def act(self, observation):
        self.meet("act")
        return self.inner.act(observation)

    def learn(self, batch):
        self.meet("learn")


def meetings(folder, nodes, rounds):
    """The calls of ``nodes`` whose partner did not come."""
    return [f"{a}-{call}-{k}" for a in nodes for call in ("act", "learn")
            for k in range(1, rounds + 1)
            if not (Path(folder) / f"{a}-{call}-{k}.met").exists()]


def test_the_runner_starts_every_remote_call_before_waiting(local_ray, tmp_path):
    from agents.wrappers.remote import remote

    env = sapo_env.parallel_env(n=2, max_rounds=2)
    partners = {"node_0": "node_1", "node_1": "node_0"}
    nodes = {a: remote(partial(Meets, i, a, partners[a], tmp_path), num_cpus=1)
             for i, a in enumerate(env.possible_agents)}
    sapo_env.runtime.run(env, nodes, seed=0, progress=False)
    assert meetings(tmp_path, nodes, rounds=2) == []  # every act and learn ran beside the other's


def test_remote_needs_ray_started_and_a_factory():
    from agents.wrappers.remote import remote

    if not ray.is_initialized():
        with pytest.raises(RuntimeError, match="ray.init"):
            remote(partial(DemonstratorAgent, seed=0))
    with pytest.raises(TypeError, match="factory"):
        remote(DemonstratorAgent(seed=0))
    assert "ray" in sys.modules


def tiny_lora_swarm():
    """Two LoRA nodes on one tiny base, built where it is called."""
    import torch
    from tiny_lm import char_tokenizer, tiny_llama

    from agents import GRPOConfig
    from agents.lm.lora import lora_swarm

    torch.set_num_threads(1)
    tok = char_tokenizer()
    config = GRPOConfig(max_new_tokens=8, learning_rate=1e-2, device="cpu")
    return lora_swarm(tiny_llama(tok, seed=0), 2, config, tokenizer=tok, num_external=1, seed=0)


def test_a_lora_swarm_in_one_actor_runs_exactly_as_in_process(local_ray):
    pytest.importorskip("peft")
    from agents.wrappers.remote import RemoteMember, remote_joint

    def run(nodes):
        env = sapo_env.parallel_env(n=2, max_rounds=2, completions_per_question=2,
                                    train_budget=2, num_external=1, tasks=["basic_arithmetic"])
        return sapo_env.runtime.run(env, nodes, seed=0, progress=False)

    here = run(tiny_lora_swarm())
    nodes = remote_joint(tiny_lora_swarm, num_cpus=1)
    assert list(nodes) == ["node_0", "node_1"]
    assert all(isinstance(n, RemoteMember) for n in nodes.values())
    there = run(nodes)
    np.testing.assert_array_equal(here.rewards, there.rewards)
    for a, metrics in here.learn_metrics[-1].items():
        assert metrics["loss"] == there.learn_metrics[-1][a]["loss"]


def test_scoring_spread_over_ray_workers_gives_the_same_rounds(local_ray):
    from sapo_env.scoring.round_scoring import RayScoring

    def play(scoring):
        env = sapo_env.parallel_env(n=5, max_rounds=3, scoring=scoring)
        nodes = {a: DemonstratorAgent(accuracy=0.5, seed=i)
                 for i, a in enumerate(env.possible_agents)}
        observations, _ = env.reset(seed=2)
        rounds = []
        for _ in range(3):
            actions = {a: nodes[a].act(observations[a]) for a in env.agents}
            texts = [list(group) for group in actions["node_1"]["completions"]]
            texts[0][0] = "<answer>" + "9" * 3000 + "</answer>"  # a failure, counted
            actions["node_1"] = {**actions["node_1"], "completions": texts}
            actions["node_3"] = None  # offline: nothing of it is scored
            observations, rewards, _, _, infos = env.step(actions)
            rounds.append((rewards, infos, {a: [g["rewards"].tolist() for g in o["batch"]]
                                            for a, o in observations.items()}))
        return rounds

    here, there = play(None), play(RayScoring(workers=2))
    assert here == there
    assert here[0][1]["node_1"]["scoring_failures"]["too_long"] == 1
    with pytest.raises(ValueError, match="workers"):
        RayScoring(workers=0)


def test_the_lm_swarm_example_runs_its_nodes_in_actors(local_ray, tmp_path, capsys):
    pytest.importorskip("peft")
    import importlib.util

    from tiny_lm import char_tokenizer, tiny_llama

    tok = char_tokenizer()
    tiny_llama(tok).save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    path = HERE.parent / "examples" / "lm_swarm.py"
    spec = importlib.util.spec_from_file_location("lm_swarm_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = ["--model", str(tmp_path / "tiny"), "--rounds", "2", "--questions", "1",
            "--completions", "2", "--train-budget", "2", "--num-external", "1",
            "--max-new-tokens", "6", "--device", "cpu", "--threads", "1"]
    here = example.main(args)
    there = example.main(args + ["--ray-address", "local", "--save-dir", str(tmp_path / "saved")])
    np.testing.assert_array_equal(here.rewards, there.rewards)
    assert (tmp_path / "saved" / "node_1" / "adapter_model.safetensors").is_file()
    assert "node_2 (demo) reward 1.000" in capsys.readouterr().out


class KillAt(sapo_env.runtime.Callback):
    """Kills a remote node's actor once the given round has been played."""

    def __init__(self, node, round_):
        self.node, self.round = node, round_

    def on_run_start(self, env, agents):
        self.agents = agents

    def on_round_end(self, record):
        if record.round == self.round:
            self.agents[self.node].kill()


@pytest.mark.parametrize("deadline", [None, 10.0])
def test_a_node_whose_actor_dies_leaves_the_swarm_and_the_run_goes_on(local_ray, deadline):
    from agents.wrappers.remote import remote_swarm

    env = sapo_env.parallel_env(n=3, max_rounds=6)
    nodes = remote_swarm({a: partial(DemonstratorAgent, accuracy=0.5, seed=i)
                          for i, a in enumerate(env.possible_agents)}, num_cpus=0.5)
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=deadline,
                           callbacks=[KillAt("node_1", 2)])
    assert not np.isnan(history.rewards[:3, 1]).any() and np.isnan(history.rewards[3:, 1]).all()
    assert not np.isnan(history.rewards[:, [0, 2]]).any()
    for node in nodes.values():
        node.kill()


def test_a_slow_remote_node_misses_deadlines_and_plays_late(local_ray):
    from agents.wrappers.remote import remote_swarm
    from agents.wrappers.slow import SlowAgent

    def node(i):
        return SlowAgent(DemonstratorAgent(accuracy=0.5, seed=i), act_seconds=5.0 if i == 2
                         else 0.0)

    # margins wide enough for a loaded machine: the fast nodes have 2 s for a call that takes
    # milliseconds, the slow one needs 5 s, so it misses two deadlines and plays round 2 late
    env = sapo_env.parallel_env(n=3, max_rounds=4, pool_window=4)
    nodes = remote_swarm({a: partial(node, i) for i, a in enumerate(env.possible_agents)},
                         num_cpus=0.5)
    for n in nodes.values():
        n.state_dict()  # the actors are up: starting one takes longer than a deadline
    history = sapo_env.runtime.run(env, nodes, seed=0, progress=False, deadline=2.0)
    played = [i["node_2"] for i in history.infos if "node_2" in i]
    assert 1 <= len(played) < 4 and max(i["staleness"] for i in played) >= 1
    assert not np.isnan(history.rewards[:, :2]).any()
    for node_ in nodes.values():
        node_.kill()


def test_the_async_example_runs_and_writes_its_results(local_ray, tmp_path):
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location(
        "async_example", HERE.parent / "examples" / "async_swarm.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary = example.main(["--nodes", "3", "--rounds", "8", "--seeds", "1",
                            "--act-seconds", "0.02", "--write", str(tmp_path)])
    conditions = summary["conditions"]
    assert list(conditions) == list(example.CONDITIONS)
    assert conditions["sync, straggler"]["straggler's rounds played (%)"][0] == 100.0
    assert conditions["async, straggler"]["straggler's rounds played (%)"][0] < 100.0
    assert json.loads((tmp_path / "summary.json").read_text())["settings"]["rounds"] == 8
    assert (tmp_path / "async.png").stat().st_size > 0 and (tmp_path / "results.md").exists()


def test_nodes_packed_into_actors_run_exactly_as_in_process(local_ray):
    from agents.wrappers.remote import RemoteMember, remote_swarm

    env = sapo_env.parallel_env(n=4, max_rounds=20)
    here = sapo_env.runtime.run(env, {a: f() for a, f in simulated_factories(env.possible_agents, 1)
                              .items()}, seed=3, progress=False)
    nodes = remote_swarm(simulated_factories(env.possible_agents, 1), num_cpus=0.5,
                         nodes_per_actor=2)
    assert all(isinstance(n, RemoteMember) for n in nodes.values())
    assert len({id(n.joint_actor) for n in nodes.values()}) == 2
    there = sapo_env.runtime.run(sapo_env.parallel_env(n=4, max_rounds=20), nodes, seed=3,
                         progress=False)
    np.testing.assert_array_equal(here.rewards, there.rewards)
    assert here.learn_metrics == there.learn_metrics
    with pytest.raises(ValueError, match="nodes_per_actor must be an int >= 1, got 0"):
        remote_swarm(simulated_factories(env.possible_agents, 1), nodes_per_actor=0)
    for node in nodes.values():
        ray.kill(node.joint_actor.actor)


def meeting_pair(first, folder):
    """Nodes node_<first> and node_<first + 1>, for one joint actor, each meeting its partner
    two numbers away (node_0 meets node_2, in the other actor)."""
    return {f"node_{i}": Meets(i, f"node_{i}", f"node_{(i + 2) % 4}", folder)
            for i in (first, first + 1)}


def test_joint_actors_work_at_the_same_time(local_ray, tmp_path):
    from agents.wrappers.remote import remote_joint

    env = sapo_env.parallel_env(n=4, max_rounds=1)
    nodes = {**remote_joint(partial(meeting_pair, 0, tmp_path)),
             **remote_joint(partial(meeting_pair, 2, tmp_path))}
    sapo_env.runtime.run(env, nodes, seed=0, progress=False)
    # inside an actor its two nodes take turns; the two actors work at once
    assert meetings(tmp_path, nodes, rounds=1) == []
    for node in ("node_0", "node_2"):
        ray.kill(nodes[node].joint_actor.actor)


class DiesLearning(DemonstratorAgent):
    """A demonstrator whose process exits during its ``at``-th update: the Ray actor it lives in
    dies in the middle of a learn call."""

    def __init__(self, *args, at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.at, self.updates = at, 0

    def learn(self, batch):
        self.updates += 1
        if self.updates == self.at:
            os._exit(1)
        return super().learn(batch)


def demonstrator_pair(first, dies_learning_at=None):
    """node_<first> and node_<first + 1> for one joint actor; the second one's process exits in
    its ``dies_learning_at``-th update (None: never)."""
    second = DemonstratorAgent(accuracy=0.5, num_external=4, seed=first + 1) \
        if dies_learning_at is None else \
        DiesLearning(accuracy=0.5, num_external=4, seed=first + 1, at=dies_learning_at)
    return {f"node_{first}": DemonstratorAgent(accuracy=0.5, num_external=4, seed=first),
            f"node_{first + 1}": second}


class Live(sapo_env.runtime.Callback):
    """Records, each round, the actions the runner sent and the nodes still in the swarm; kills
    a Ray actor once round ``kill_after`` has been played (None: never)."""

    def __init__(self, actor=None, kill_after=None):
        self.actor, self.kill_after, self.actions, self.live = actor, kill_after, [], []

    def on_run_start(self, env, agents):
        self.env = env

    def on_round_end(self, record):
        self.actions.append(dict(record.actions))
        self.live.append(list(self.env.agents))
        if record.round == self.kill_after:
            ray.kill(self.actor)
            # ray.kill only asks for the kill: wait until the actor answers no more, or the
            # next round may still reach it (CI once saw round 2 played by the killed actor).
            while True:
                try:
                    ray.get(self.actor.names.remote())
                except ray.exceptions.RayActorError:
                    break


@pytest.mark.parametrize("how, deadline", [("killed", None), ("dies_learning", 10.0)])
def test_a_joint_actor_that_dies_takes_its_nodes_out_and_the_run_goes_on(local_ray, caplog, how,
                                                                         deadline):
    """node_0 and node_1 share one Ray actor, node_2 and node_3 another, node_4 has its own.
    The first actor dies after round 1 (killed between rounds, or its process exits while its
    nodes learn from round 1, so their update is lost): in round 2 both its nodes leave the
    swarm (``{"leave": True}``, logged once), they are gone from then on, and the other nodes
    play every round, synchronously or with a deadline."""
    from agents.wrappers.remote import remote, remote_joint

    dies = how == "dies_learning"
    nodes = {**remote_joint(partial(demonstrator_pair, 0, 2 if dies else None), num_cpus=0.5),
             **remote_joint(partial(demonstrator_pair, 2), num_cpus=0.5),
             "node_4": remote(partial(DemonstratorAgent, accuracy=0.5, num_external=4, seed=4),
                              num_cpus=0.5)}
    dying = nodes["node_0"].joint_actor.actor
    live = Live(dying, None if dies else 1)
    history = sapo_env.runtime.run(sapo_env.parallel_env(n=5, max_rounds=5), nodes, seed=0,
                                   progress=False, deadline=deadline, callbacks=[live])
    assert not np.isnan(history.rewards[:2, :2]).any() and np.isnan(history.rewards[2:, :2]).all()
    assert not np.isnan(history.rewards[:, 2:]).any()
    assert [live.actions[2][a] for a in ("node_0", "node_1")] == [{"leave": True}] * 2
    assert all("node_0" not in actions and "node_1" not in actions
               for actions in live.actions[3:])
    assert live.live[1] == [f"node_{i}" for i in range(5)]
    assert live.live[2] == live.live[3] == ["node_2", "node_3", "node_4"]
    assert caplog.text.count("node_0, node_1 failed and is removed from the swarm") == 1 + dies
    for node in ("node_2", "node_4"):
        ray.kill(nodes[node].joint_actor.actor if node == "node_2" else nodes[node].actor)
