"""The attacks ``slow_packets`` and ``remote_junk``: with every defense on, neither ends nor
stalls a run. A slow sender's packets are rejected and charged to it, a step costing at most
its scoring budget plus 2 s, from the main thread and from a worker thread; a remote node's
plain-data junk costs it only its rounds (refused, then removed), never another node's; and
``sapo-env attack`` runs both."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import ARITHMETIC

import sapo_env
import sapo_env.runtime
from agents.hostile.remote_junk import JUNK, JUNK_METRICS, RemoteJunkNode, remote_junk_swarm
from agents.sim.simulated import simulated_swarm
from sapo_env.defenses.packet_schema import receive
from sapo_env.defenses.transport_attacks import SLOW_ANSWERS, SLOW_COPIES, tamper
from sapo_env.runtime.agent_calls import plain_metrics
from sapo_env.scoring.answers import extract_tag
from sapo_env.tasks import reference_answer, resolve

# coin_flip's scorer is slow on some of SLOW_ANSWERS ("1e999999999" takes minutes unbounded):
# re-scored in full, one slow sender's 16 x 64 packets would take about 48 s at a 0.5 s limit
BUDGET, LIMIT = 1.5, 0.5
SLOW = dict(n=3, tasks=[["coin_flip", 1.0, {}]], completions_per_question=4, max_rounds=3,
            node_score_budget=BUDGET, score_time_limit=LIMIT,
            adversaries={"node_2": "slow_packets"})


def _right(observations):
    return {a: {"num_external": 4, "completions": [
        [f"<answer>{reference_answer(resolve(q['ref']))}</answer>"] * o["completions_per_question"]
        for q in o["questions"]]} for a, o in observations.items()}


def test_slow_packets_are_copies_of_each_group_true_but_for_their_answers():
    env = sapo_env.parallel_env(**{**SLOW, "adversaries": None})
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_right(observations))
    groups = list(observations["node_0"]["pool"])
    sent = tamper(groups, {"node_2": "slow_packets"}, extract_tag, env.config.advantage_eps)
    own = [g for g in groups if g["source"] == "node_2"]
    assert own
    slow = [p for sender, p in sent if sender == "node_2"]
    assert len(slow) == SLOW_COPIES * len(own) and len({p["id"] for p in slow}) == len(slow)
    for k, packet in enumerate(slow):
        group = own[k // SLOW_COPIES]
        assert {f: packet[f] for f in ("source", "question", "answer", "ref")} == {
            f: group[f] for f in ("source", "question", "answer", "ref")}
        np.testing.assert_array_equal(packet["rewards"], group["rewards"])  # the claim
        assert all(re.fullmatch(r"<answer>(.*)</answer>", t, re.S).group(1) in SLOW_ANSWERS
                   for t in packet["completions"])
        assert not isinstance(receive("node_2", packet, 1, env.config), str)  # schema: fine
    answers = {t for p in slow for t in p["completions"]}
    assert len(answers) == len(SLOW_ANSWERS)  # every one of them, in turn


@pytest.mark.slow
@pytest.mark.parametrize("in_thread", [False, True])
def test_slow_packets_cost_a_step_at_most_their_senders_budget(in_thread):
    """From the main thread (the signal timer) and from a worker thread (the scoring child,
    started in round 0, which is not timed): each step of rounds 1 and 2 takes at most
    node_2's budget plus 2 s, every slow packet is rejected and charged to node_2, whose
    budget ran out (``scoring_failures["budget"]``: the rest were ``scoring_timeout``), and
    the honest nodes play on, their completions all scored."""
    env = sapo_env.parallel_env(**SLOW)
    observations, _ = env.reset(seed=0)
    with ThreadPoolExecutor(1) as worker:
        def step(actions):
            return worker.submit(env.step, actions).result() if in_thread else env.step(actions)

        observations, *_ = step(_right(observations))  # warm: the child starts here, untimed
        for _ in range(2):
            packets = SLOW_COPIES * len(observations["node_2"]["questions"])
            started = time.perf_counter()
            observations, rewards, _, _, infos = step(_right(observations))
            assert time.perf_counter() - started < BUDGET + 2.0
            assert infos["node_2"]["rejected_groups"] == packets
            assert infos["node_0"]["rejected_groups_swarm"] == packets
            assert infos["node_2"]["scoring_failures"]["budget"] > 0
            for a in ("node_0", "node_1"):
                assert infos[a]["rejected_groups"] == 0
                assert sum(infos[a]["scoring_failures"].values()) == 0
                assert rewards[a] == 1.0
            assert not any("/slow" in g["id"] for g in observations["node_0"]["pool"])
            assert sorted(rewards) == ["node_0", "node_1", "node_2"]  # none left the swarm
    env.close()


class _Rounds(sapo_env.runtime.Callback):
    """Each round's record, the live nodes after it, and its wall time."""

    def __init__(self):
        self.records, self.live, self.seconds = [], [], []

    def on_run_start(self, env, agents):
        self.env, self.clock = env, time.perf_counter()

    def on_round_end(self, record):
        self.records.append(record)
        self.live.append(list(self.env.agents))
        self.seconds.append(time.perf_counter() - self.clock)
        self.clock = time.perf_counter()


def _junk_run(rounds, deadline=None, **run):
    env = sapo_env.parallel_env(n=5, tasks=ARITHMETIC, train_budget=4, num_external=2,
                                max_rounds=rounds)
    agents = remote_junk_swarm(simulated_swarm(env.possible_agents, seed=0, num_external=2),
                               fraction=0.4)
    watch = _Rounds()
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False, callbacks=[watch],
                                   deadline=deadline, **run)
    return env, history, watch


@pytest.mark.parametrize("deadline", [None, 5.0])
def test_remote_junk_costs_its_senders_their_rounds_then_they_are_removed(deadline):
    """node_3 and node_4 send junk from round 0 (node_4 starting three kinds on, so between
    them six kinds, ``for_other_nodes`` among them): each round refused, the third time
    removed (``remove_after_refusals=3``). The honest nodes play every round and are never
    removed, whatever the junk said for them."""
    env, history, watch = _junk_run(5, deadline)
    honest = ["node_0", "node_1", "node_2"]
    assert len(history.rewards) == 5 and not np.isnan(history.rewards[:, :3]).any()
    assert [sorted(r.refused) for r in watch.records] == [["node_3", "node_4"]] * 3 + [[]] * 2
    assert all("removed" in r.refused[a] for r in watch.records[2:3] for a in ("node_3",
                                                                                "node_4"))
    assert watch.live[:2] == [env.possible_agents] * 2 and watch.live[2:4] == [honest] * 2
    assert all(set(honest) <= set(r.rewards) for r in watch.records)
    assert not any(a in r.rewards for r in watch.records for a in ("node_3", "node_4"))
    assert max(watch.seconds) < env.config.node_score_budget + 2.0


def test_every_kind_of_junk_is_refused_and_costs_only_its_round():
    """Never removed (``remove_after_refusals=None``), node_3 and node_4 go through every kind
    of ``JUNK``: each round both are refused, each for what it sent, and both stay in the
    swarm without ever playing; the honest nodes play every round."""
    _, history, watch = _junk_run(len(JUNK), remove_after_refusals=None)
    assert not np.isnan(history.rewards[:, :3]).any() and np.isnan(history.rewards[:, 3:]).all()
    assert all(sorted(r.refused) == ["node_3", "node_4"] for r in watch.records)
    assert watch.live[:-1] == [[f"node_{i}" for i in range(5)]] * (len(JUNK) - 1)
    errors = [r.refused["node_3"] for r in watch.records]
    assert len(set(errors)) == len(JUNK)
    for needle, error in zip(("leave action is exactly", "pending action is exactly",
                              "got ndarray", "got int", "unknown action fields ['node_0'",
                              "num_external", "must be a dict"), errors):
        assert needle in error


def test_a_junk_node_is_a_remote_node_whose_metrics_are_dropped():
    from sapo_env.runtime.agent_calls import AgentCalls

    agents = remote_junk_swarm(simulated_swarm(3, seed=0), nodes=["node_2"])
    assert isinstance(agents["node_2"], RemoteJunkNode)
    assert AgentCalls(agents).is_remote("node_2") and not AgentCalls(agents).is_remote("node_0")
    assert plain_metrics("node_2", JUNK_METRICS) == {}
    assert agents["node_2"].others == ("node_0", "node_1")
    with pytest.raises(ValueError, match="not in the swarm"):
        remote_junk_swarm(simulated_swarm(3, seed=0), nodes=["node_7"])


@pytest.mark.slow
def test_sapo_env_attack_runs_slow_packets_and_remote_junk(tmp_path):
    """The harness, every defense on, 30% adversaries, 3 rounds: slow packets are all
    rejected within their senders' budgets (the slowest round within the round's
    scoring budget plus 2 s), remote junk refused three rounds and its nodes removed; the honest
    nodes play every round."""
    from sapo_experiments.attack import ATTACKS, AttackConfig, RunSpec
    from sapo_experiments.attack.config import SLOW_PACKETS_ROUND_BUDGET
    from sapo_experiments.attack.sweep import compute

    assert {"slow_packets", "remote_junk"} <= set(ATTACKS) and len(ATTACKS) == 18
    config = AttackConfig(quick=True, rounds=3, seeds=1, out=tmp_path, progress=False,
                          plots=False)
    slow = compute(RunSpec("slow_packets", 0.3, "all", 0, config)).arrays
    junk = compute(RunSpec("remote_junk", 0.3, "all", 0, config)).arrays
    for run in (slow, junk):
        assert run["rewards"].shape == (3, 10)
        assert not np.isnan(run["rewards"][:, run["honest"]]).any()
        assert (run["hostile_share"] == 0).all()  # nothing of theirs reached a batch
    assert (slow["rejected"] > 0).all() and (slow["scoring_stalled"] > 0).all()
    assert slow["round_seconds"].max() < SLOW_PACKETS_ROUND_BUDGET + 2.0
    assert junk["refused"].tolist() == [3, 3, 3] and (junk["rejected"] == 0).all()
    assert RunSpec("remote_junk", 0.3, "all", 0, config).remote
