"""The trust boundary against replays, floods, sybils, held-out questions, absurd rounds,
malformed packets, impersonation, framing and answers slow to score: each attack's packets are
rejected for the reason it should be (and the ones that are otherwise true would pass without
the check that stops them), the run goes on, honest nodes never train on a rejected group, and
scoring stays within each node's budget."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from conftest import ARITHMETIC

import sapo_env
from agents.hostile.adversarial import SLOW_ANSWERS, AdversarialAgent
from agents.sim.simulated import simulated_swarm
from sapo_env.config import MAX_QUESTIONS_PER_STREAM
from sapo_env.defenses.packet_schema import parse_packet, receive
from sapo_env.defenses.packets import PacketVerifier, question_key
from sapo_env.defenses.transport_attacks import (
    ABSURD_ROUNDS,
    FLOOD_GROUPS,
    FRAMING_JUNK,
    MALFORMED,
    SYBILS,
    held_out_refs,
    tamper,
)
from sapo_env.scoring.answers import extract_tag
from sapo_env.tasks import HELD_OUT_BLOCK, redraw

SWARM = dict(n=4, tasks=ARITHMETIC, train_budget=4, num_external=2)
Q = 2  # questions a node answers a round at 2/2 (the paper's protocol)
NEW = ("replay", "flood", "sybil", "held_out", "future_round", "malformed", "impersonation",
       "framing")
BUILT_ID = re.compile(r"node_\d+/r\d+/q\d+")  # the id of a group the env built


def one_round(**overrides):
    """The groups the 4 nodes published in round 0 (as node_0 sees them, plus its own), and
    the env."""
    env = sapo_env.parallel_env(**{**SWARM, "max_rounds": 2, **overrides})
    observations, _ = env.reset(seed=0)
    agents = simulated_swarm(env.possible_agents, seed=0, num_external=2, start_tag_prob=0.5)
    actions = {a: agents[a].act(observations[a]) for a in env.agents}
    observations, *_ = env.step(actions)
    own = [g for g in observations["node_1"]["pool"] if g["source"] == "node_0"]
    return env, own + list(observations["node_0"]["pool"])


def reasons(env, groups, attack):
    """Each packet node_3 sends under ``attack``, with the reason the receiver rejects it
    (None: accepted) and whether it is otherwise true (it parses and ``PacketVerifier.check``
    passes)."""
    verifier = PacketVerifier(env.config)
    c = env.config
    dealt = {(g["source"], *question_key(g)[1:]) for g in groups}
    seen, out = set(), []
    for sender, packet in tamper(groups, {"node_3": attack}, extract_tag, c.advantage_eps):
        if sender != "node_3":
            continue  # the others' groups, the env's own
        parsed = receive(sender, packet, 7, c)
        if isinstance(parsed, str):
            plain = parse_packet(packet, 7, c.completions_per_question, c.max_completion_chars)
            out.append((parsed, not isinstance(plain, str) and verifier.check(plain) is None))
            continue
        key = question_key(parsed)
        true = verifier.check(parsed) is None
        reason = ("duplicate" if key in seen else "not_dealt" if key not in dealt
                  else verifier.check(parsed))
        seen.add(key)
        out.append((reason, true))
        assert parsed["round"] == 7  # the receiver's clock, whatever was claimed
    return out


@pytest.mark.parametrize("attack, expected", [
    ("replay", {("not_dealt", True): 3 * Q}),  # the other 3 nodes' groups, all true
    ("flood", {(None, True): Q, ("not_dealt", True): FLOOD_GROUPS}),
    # a name that is not the sender's is refused before verification
    ("sybil", {(None, True): Q, ("impersonation", True): Q * SYBILS}),
    ("impersonation", {("impersonation", True): Q}),
    # the victim's (node_0's) groups with inverted rewards, and junk, all in node_0's name
    ("framing", {(None, True): Q, ("impersonation", False): Q,
                 ("malformed", False): FRAMING_JUNK}),
    ("future_round", {(None, True): Q, ("duplicate", True): Q * len(ABSURD_ROUNDS)}),
    # a claimed round is never read: a packet whose only fault is its round is stamped
    ("malformed", {(None, True): 2, ("malformed", False): len(MALFORMED) - 3,
                   ("oversized", False): 1}),
])
def test_each_attack_is_rejected_for_its_reason(attack, expected):
    env, groups = one_round()
    assert Counter(reasons(env, groups, attack)) == expected


def test_held_out_packets_are_true_and_name_only_evaluation_questions():
    env, groups = one_round(tasks=sapo_env.PAPER_TASKS)
    assert Counter(reasons(env, groups, "held_out")) == {("not_dealt", True): Q}
    sent = tamper(groups, {"node_3": "held_out"}, extract_tag, env.config.advantage_eps)
    refs = [g["ref"] for sender, g in sent if sender == "node_3"]
    assert refs and all(r in held_out_refs() for r in refs)
    assert all(r["seed"] // MAX_QUESTIONS_PER_STREAM == HELD_OUT_BLOCK for r in refs)


@pytest.mark.parametrize("attack", NEW)
def test_the_run_goes_on_and_honest_nodes_train_on_no_rejected_group(attack):
    for verify in (True, False):
        env = sapo_env.parallel_env(**SWARM, max_rounds=3, adversaries={"node_3": attack},
                                    verify_packets=verify)
        observations, _ = env.reset(seed=1)
        agents = simulated_swarm(env.possible_agents, seed=0, num_external=2)
        for round_ in range(3):
            actions = {a: agents[a].act(observations[a]) for a in env.agents}
            observations, _, _, _, infos = env.step(actions)
            pool = observations["node_0"]["pool"]
            assert all(g["round"] <= round_ for g in pool)  # stamped, never the claim
            if attack == "malformed":  # the schema rejects it with or without verification
                # the round_str and round_none packets are stamped; the rest is the sender's
                assert infos["node_3"]["rejected_groups"] == len(MALFORMED) - 2
                assert infos["node_0"]["rejected_groups_swarm"] == len(MALFORMED) - 2
            # whatever names node_3's packets claim, their rejections are node_3's
            assert infos["node_0"]["rejected_groups"] == 0
            assert infos["node_3"]["rejected_groups"] == infos["node_0"]["rejected_groups_swarm"]
            if not verify:
                continue
            assert infos["node_0"]["rejected_groups_swarm"] > 0
            for a in ("node_0", "node_1", "node_2"):
                for g in observations[a]["batch"]:
                    assert g["source"] in env.possible_agents and BUILT_ID.fullmatch(g["id"])
                    assert g["round"] <= round_


def test_scoring_dos_answers_are_within_the_size_limit_and_score_nothing():
    env = sapo_env.parallel_env(**SWARM, max_rounds=2)
    observations, _ = env.reset(seed=0)
    agents = simulated_swarm(env.possible_agents, seed=0, num_external=2)
    agents["node_3"] = AdversarialAgent(agents["node_3"], "scoring_dos", seed=2)
    assert all(len(s) <= env.config.max_answer_chars for s in SLOW_ANSWERS)
    action = agents["node_3"].act(observations["node_3"])
    texts = [t for group in action["completions"] for t in group]
    assert all(re.fullmatch(r"<answer>(.*)</answer>", t, re.S).group(1) in SLOW_ANSWERS
               for t in texts)
    _, rewards, *_ = env.step({a: agents[a].act(observations[a]) for a in env.agents})
    assert rewards["node_3"] == 0.0


def test_a_scorer_slow_on_scoring_dos_answers_is_bounded_by_the_node_budget(monkeypatch):
    """A stand-in for a naive scorer: every scoring_dos answer takes 50 ms to score. The
    attacker's 16 completions a round would take 0.8 s; its budget of 0.2 s leaves most of them
    unscored (``budget``) and none of the honest nodes' completions."""
    import time

    env = sapo_env.parallel_env(**SWARM, max_rounds=3, node_score_budget=0.2,
                                score_time_limit=0.1)
    observations, _ = env.reset(seed=0)
    dataset = type(redraw(observations["node_0"]["questions"][0]["ref"]).dataset)
    real = dataset.score_answer

    def slow(self, answer, entry):
        if answer in SLOW_ANSWERS:
            time.sleep(0.05)
            return 0.0
        return real(self, answer, entry)

    monkeypatch.setattr(dataset, "score_answer", slow)
    agents = simulated_swarm(env.possible_agents, seed=0, num_external=2)
    agents["node_3"] = AdversarialAgent(agents["node_3"], "scoring_dos", seed=2)
    budget = []
    for _ in range(3):
        actions = {a: agents[a].act(observations[a]) for a in env.agents}
        observations, rewards, _, _, infos = env.step(actions)
        failures = infos["node_3"]["scoring_failures"]
        budget.append(failures["budget"] + failures["timeout"])
        completions = infos["node_3"]["generated_completions"]
        assert failures["budget"] >= completions // 2  # at most ~4 of 16 scored in 0.2 s
        for a in ("node_0", "node_1", "node_2"):
            assert sum(infos[a]["scoring_failures"].values()) == 0
    assert min(budget) > 0
    assert np.isfinite(list(rewards.values())).all()
