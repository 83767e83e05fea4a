"""What a rejected packet leaves behind, and what names a question (``not_dealt``): a
packet that fails verification marks nothing as seen, so it cannot turn a
node's real group into a "duplicate"; and a question is its whole ref, config included, so a
node dealt a question under one config cannot publish the same seed and index under another."""

from __future__ import annotations

import sapo_env
from sapo_env.defenses.packets import PacketVerifier, question_key
from sapo_env.defenses.transport_attacks import consistent_group
from sapo_env.scoring.answers import extract_tag
from sapo_env.tasks import reference_answer, resolve

EASY, HARD = {}, {"min_terms": 3, "max_terms": 4}


def _played(**settings):
    """An env after one round of right-and-wrong answers from every node, and its observations
    before and after it."""
    env = sapo_env.parallel_env(n=3, max_rounds=3, **settings)
    before, _ = env.reset(seed=0)
    right = lambda q: f"<answer>{reference_answer(resolve(q['ref']))}</answer>"  # noqa: E731
    actions = {a: {"num_external": 2, "completions": [
        [right(q)] * 4 + ["<answer>no</answer>"] * 4 for q in o["questions"]]}
        for a, o in before.items()}
    after, *_ = env.step(actions)
    return env, before, after


def test_a_rejected_packet_does_not_make_the_real_group_a_duplicate():
    """A forgery of node_0's group (inverted rewards) arrives first: it fails ``rewards`` and
    the real group, which comes after it, is still accepted, not a "duplicate"."""
    env, before, after = _played()
    real = next(g for g in after["node_1"]["pool"] if g["source"] == "node_0")
    forged = {**real, "id": real["id"] + "/forged", "rewards": 1.0 - real["rewards"]}
    dealt = {a: [q["ref"] for q in o["questions"]] for a, o in before.items()}
    verifier = PacketVerifier(env.config)
    assert verifier.check(forged) == "rewards"
    accepted, rejected = verifier.screen([forged, real], dealt=dealt)
    assert accepted == [real] and rejected == {"node_0": 1}
    # an accepted one still makes the next a copy
    copy = {**real, "id": real["id"] + "/copy"}
    assert verifier.screen([real, copy], dealt=dealt) == ([real], {"node_0": 1})


def test_the_env_s_own_group_is_screened_before_packets_that_claim_its_question():
    """Even a true copy sent ahead of it cannot take a node's place: the env's own group is
    pooled, the copy is the duplicate."""
    env, before, after = _played()
    real = next(g for g in after["node_1"]["pool"] if g["source"] == "node_0")
    ahead = {**real, "id": real["id"] + "/ahead"}
    accepted, _ = PacketVerifier(env.config).screen([ahead, real], trusted=[real])
    assert accepted == [real] and accepted[0] is real


def test_a_question_dealt_under_one_config_cannot_be_published_under_another():
    """The swarm plays basic_arithmetic under two configs. node_0 takes a question it was dealt
    under the easy config and publishes the hard config's question at the same seed and
    index, built as the env builds a group (true in every field): not dealt."""
    env, before, _ = _played(tasks=[["basic_arithmetic", 1.0, EASY],
                                    ["basic_arithmetic", 1.0, HARD]])
    dealt = {a: [q["ref"] for q in o["questions"]] for a, o in before.items()}
    easy = next(r for r in dealt["node_0"] if r["config"] == EASY)
    template = next(g for g in env.state_dict()["pool"]["groups"] if g["source"] == "node_0")
    moved = consistent_group(template, {**easy, "config": HARD}, "node_0/moved", extract_tag,
                             env.config.advantage_eps)
    assert moved["ref"] not in dealt["node_0"]
    verifier = PacketVerifier(env.config)
    assert verifier.check(moved) is None  # a true group, on a question node_0 was not dealt
    accepted, rejected = verifier.screen([moved], dealt=dealt)
    assert accepted == [] and rejected == {"node_0": 1}
    assert question_key(moved) != question_key({**moved, "ref": easy})


def test_question_keys_name_the_config():
    ref = {"task": "basic_arithmetic", "config": {"b": 1, "a": [2]}, "seed": 5, "index": 3}
    key = question_key({"source": "node_1", "ref": ref})
    assert key == question_key({"source": "node_1", "ref": {**ref, "config": {"a": [2], "b": 1}}})
    assert key != question_key({"source": "node_1", "ref": {**ref, "config": {}}})
    assert key != question_key({"source": "node_2", "ref": ref})


def test_the_cheap_verdicts_refuse_what_verdicts_refuses_without_scoring(monkeypatch):
    """``cheap_verdicts`` reads only each packet's question: node_0's real group (the env's
    own), a copy of it, a packet for a question node_0 was not dealt and a value with no
    question get ``None``, ``duplicate``, ``not_dealt`` and ``malformed`` without a single
    completion scored, the same reasons ``verdicts`` gives; a true packet passes them, and
    ``verdicts`` re-scores it alone."""
    env, before, after = _played()
    real = next(g for g in after["node_1"]["pool"] if g["source"] == "node_0")
    other = next(g for g in after["node_0"]["pool"] if g["source"] == "node_1")
    dealt = {a: [q["ref"] for q in o["questions"]] for a, o in before.items()}
    copy = {**real, "id": real["id"] + "/copy"}
    elsewhere = {**real, "id": real["id"] + "/elsewhere",
                 "ref": {**real["ref"], "index": real["ref"]["index"] + 10_000}}
    groups = [real, copy, elsewhere, "junk", other]
    verifier = PacketVerifier(env.config)
    scored = []
    score = verifier._scoring.score
    monkeypatch.setattr(verifier._scoring, "score",
                        lambda drawn, *rest: scored.append(len(drawn)) or score(drawn, *rest))
    cheap = verifier.cheap_verdicts(groups, trusted=[real], dealt=dealt)
    assert cheap == [None, "duplicate", "not_dealt", "malformed", None] and scored == []
    assert verifier.verdicts(groups, trusted=[real], dealt=dealt) == cheap and scored == [1]
