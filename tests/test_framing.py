"""Rejections are charged to the node that sent a packet, never to the name it claims, and a
packet claiming another node's name is refused: junk or forgeries sent in
a victim's name cost the victim nothing (its rejection count, its reputation, the groups others
take from it), and no node pools groups under another's name."""

from __future__ import annotations

import pytest
from conftest import ARITHMETIC

import sapo_env
from agents.sim.simulated import simulated_swarm
from sapo_env.defenses import transport_attacks
from sapo_env.defenses.packet_schema import admit
from sapo_env.defenses.transport_attacks import FRAMING_JUNK, tamper
from sapo_env.scoring.answers import extract_tag

# 4 nodes under reputation sampling, L = 8, I + J = 8 at 4/4; node_3 attacks, node_0 is framed
SWARM = dict(n=4, tasks=ARITHMETIC, train_budget=8, num_external=4,
             external_sampling="reputation")
ROUNDS = 30
JUNK = 1000  # the red team's count: junk dicts a round claiming node_0


@pytest.fixture(scope="module")
def round_0():
    """The groups the env built in round 0 (node_0's first), and its config."""
    env = sapo_env.parallel_env(**SWARM, max_rounds=2)
    observations, _ = env.reset(seed=0)
    agents = simulated_swarm(env.possible_agents, seed=0, num_external=4, start_tag_prob=0.5)
    observations, *_ = env.step({a: agents[a].act(observations[a]) for a in env.agents})
    own = [g for g in observations["node_1"]["pool"] if g["source"] == "node_0"]
    return own + list(observations["node_0"]["pool"]), env.config


def test_junk_claiming_a_victim_is_charged_to_its_sender(round_0):
    groups, config = round_0
    junk = [("node_3", {"source": "node_0"}) for _ in range(JUNK)]
    admitted, rejected = admit(junk, [], 0, config)
    assert admitted == [] and rejected == {"node_3": JUNK}


def test_a_group_claiming_another_nodes_name_is_refused_and_charged_to_its_sender(round_0):
    groups, config = round_0
    victims = [g for g in groups if g["source"] == "node_0"]
    true_copies = [dict(g) for g in victims]  # true groups, node_0's name, sent by node_3
    admitted, rejected = admit([("node_3", g) for g in true_copies], [], 0, config)
    assert admitted == [] and rejected == {"node_3": len(victims)}
    # the env's own group object, relayed by another node, is no exception
    admitted, rejected = admit([("node_3", victims[0])], victims, 0, config)
    assert admitted == [] and rejected == {"node_3": 1}
    # from node_0 itself they pass, the env's own object by identity
    admitted, rejected = admit([("node_0", g) for g in (*true_copies, victims[0])], victims, 0,
                               config)
    assert len(admitted) == len(victims) + 1 and not rejected
    assert admitted[-1] is victims[0]


def test_tamper_pairs_every_packet_with_the_node_that_sent_it(round_0):
    groups, config = round_0
    for attack in ("impersonation", "framing", "sybil"):
        sent = tamper(groups, {"node_3": attack}, extract_tag, config.advantage_eps)
        assert [p for s, p in sent if s != "node_3"] == [g for g in groups
                                                          if g["source"] != "node_3"]
        claimed = {p.get("source") for s, p in sent if s == "node_3"}
        assert claimed - {"node_3"}  # each claims another name at least once
        admitted, rejected = admit(sent, groups, 0, config)
        assert {g["source"] for g in admitted} <= {"node_0", "node_1", "node_2", "node_3"}
        assert set(rejected) == {"node_3"}
    sent = tamper(groups, {"node_3": "framing"}, extract_tag, config.advantage_eps)
    own, victims = (sum(g["source"] == a for g in groups) for a in ("node_3", "node_0"))
    assert sum(s == "node_3" for s, _ in sent) == own + victims + FRAMING_JUNK


def run(adversaries):
    """Per round: the groups the others took from node_0, node_0's and node_3's rejections."""
    env = sapo_env.parallel_env(**SWARM, max_rounds=ROUNDS, adversaries=adversaries)
    observations, _ = env.reset(seed=0)
    agents = simulated_swarm(env.possible_agents, seed=0, num_external=4, start_tag_prob=0.5)
    out = []
    for _ in range(ROUNDS):
        actions = {a: agents[a].act(observations[a]) for a in env.agents}
        observations, _, _, _, infos = env.step(actions)
        out.append((infos["node_0"]["taken_by_others"], infos["node_0"]["rejected_groups"],
                    infos["node_3"]["rejected_groups"]))
    return out


@pytest.fixture(scope="module")
def clean_taken():
    return sum(taken for taken, _, _ in run(None))


def test_junk_in_a_victims_name_does_not_cost_it_the_groups_others_take(monkeypatch,
                                                                        clean_taken):
    """The red team's framing: node_3 sends its groups and 1,000 ``{"source": "node_0"}``
    dicts a round (here as the ``malformed`` attack, replaced). Charged to node_0, they took
    it from 127 groups taken by others to 0; charged to node_3, node_0 keeps its share."""
    monkeypatch.setitem(transport_attacks.NODE_ATTACKS, "malformed",
                        lambda own, received, extract, eps:
                        [*own, *({"source": "node_0"} for _ in range(JUNK))])
    rounds = run({"node_3": "malformed"})
    assert all(victim == 0 and framer == JUNK for _, victim, framer in rounds)
    assert clean_taken > 0
    assert sum(taken for taken, _, _ in rounds) >= 0.8 * clean_taken


def test_the_framing_attack_costs_the_victim_nothing(clean_taken):
    rounds = run({"node_3": "framing"})
    assert all(victim == 0 and framer >= FRAMING_JUNK for _, victim, framer in rounds)
    assert sum(taken for taken, _, _ in rounds) >= 0.8 * clean_taken


def test_sapo_env_attack_runs_every_transport_attack():
    from sapo_env.defenses.attack_names import TRANSPORT_ATTACK_NAMES
    from sapo_experiments.attack.config import ATTACKS

    assert {"impersonation", "framing"} <= set(TRANSPORT_ATTACK_NAMES) <= set(ATTACKS)
