"""Packet verification is scoring like any other: packets are re-scored on
the env's scoring path (the guard's limits; the scoring child process off the main thread),
charged to the budget of the node that sent them, which its own completions share, and their
timeouts counted. Reading a packet's log-probs is charged the same way, after the checks that
read only its question, and a sender's packets beyond its cap are never read. Whatever a node
sends, a step costs at most about its budget, from any thread."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import sapo_env
from sapo_env.defenses import transport_attacks
from sapo_env.defenses.packets import PacketVerifier
from sapo_env.scoring.rg_fixes import load_reasoning_gym
from sapo_env.tasks import reference_answer, resolve

HOSTILE = "<answer>1e999999999</answer>"  # coin_flip's scorer takes minutes on it, unbounded
BUDGET, LIMIT, COPIES = 3.0, 0.5, 2
SETTINGS = dict(n=3, tasks=[["coin_flip", 1.0, {}]], completions_per_question=4, max_rounds=3,
                node_score_budget=BUDGET, score_time_limit=LIMIT,
                adversaries={"node_2": "forge_rewards"})


def _slow_packets(group, extract, eps):
    """From round 1 on, in place of each group, ``COPIES`` packets on its question whose every
    completion is slow to score, claiming the rewards the scorer gives them (0): only their
    scoring can reject them."""
    if group["round"] < 1:
        return [group]
    L = len(group["completions"])
    return [{**group, "id": f"{group['id']}/slow{k}", "completions": (HOSTILE,) * L,
             "rewards": np.zeros(L, np.float32), "advantages": np.zeros(L, np.float32)}
            for k in range(COPIES)]


def _actions(observations, hostile_answers=()):
    """Right answers, or the hostile text for the nodes of ``hostile_answers``."""
    return {a: {"num_external": 4, "completions": [
        [HOSTILE if a in hostile_answers else
         f"<answer>{reference_answer(resolve(q['ref']))}</answer>"] * o["completions_per_question"]
        for q in o["questions"]]} for a, o in observations.items()}


def _in_a_thread(call, timeout):
    """``call()`` in a daemon thread, waited for at most ``timeout`` seconds: its result, or
    None if it is still running (a step that never ends must not hang the test)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    return out[0] if out else None


def _check_round(infos, seconds, packets):
    assert seconds < BUDGET + 2.0
    failures = infos["node_2"]["scoring_failures"]
    # every slow completion was either interrupted or left unscored, and counted
    assert failures["timeout"] >= 1
    assert failures["timeout"] + failures["budget"] >= packets * 4
    assert infos["node_2"]["rejected_groups"] == packets  # "scoring_timeout", each of them
    for a in ("node_0", "node_1"):
        assert sum(infos[a]["scoring_failures"].values()) == 0
        assert infos[a]["rejected_groups"] == 0


@pytest.mark.slow
def test_slow_packets_cost_their_sender_its_budget_in_the_main_thread(monkeypatch):
    """Unbounded by a budget, the 32 slow completions of node_2's 8 packets cost 0.5 s each
    (their time limit): 16 s. Charged to node_2's budget, the step takes about 3 s."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards", _slow_packets)
    env = sapo_env.parallel_env(**SETTINGS)
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_actions(observations))  # round 0: no attack yet
    packets = COPIES * len(observations["node_2"]["questions"])
    started = time.perf_counter()
    observations, _, _, _, infos = env.step(_actions(observations))
    _check_round(infos, time.perf_counter() - started, packets)
    assert not any("/slow" in g["id"] for g in observations["node_0"]["pool"])


@pytest.mark.slow
def test_a_nodes_completions_and_packets_share_one_budget(monkeypatch):
    """node_2 answers with the slow text too: its completions spend its budget, and its
    packets get what is left (nothing), not a budget of their own (which would make the
    step last two budgets)."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards", _slow_packets)
    env = sapo_env.parallel_env(**SETTINGS)
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_actions(observations))
    packets = COPIES * len(observations["node_2"]["questions"])
    started = time.perf_counter()
    _, rewards, _, _, infos = env.step(_actions(observations, hostile_answers=("node_2",)))
    assert time.perf_counter() - started < BUDGET + 2.0
    assert rewards["node_2"] == 0.0 and infos["node_2"]["rejected_groups"] == packets
    failures = infos["node_2"]["scoring_failures"]
    own = infos["node_2"]["generated_completions"]
    assert failures["timeout"] + failures["budget"] == own + packets * 4


SLEEPY = """
import time
from sapo_env.scoring.rg_fixes import load_reasoning_gym
load_reasoning_gym()
from reasoning_gym.probability.coin_flip import CoinFlipDataset
real = CoinFlipDataset.score_answer

def score_answer(self, answer, entry):
    if answer == "1e999999999":  # asleep, not in C code: the GIL is free, signals get through
        time.sleep(30)
        return 0.0
    return real(self, answer, entry)

CoinFlipDataset.score_answer = score_answer
"""


@pytest.mark.slow
def test_slow_packets_cost_their_sender_its_budget_from_a_worker_thread(monkeypatch, tmp_path):
    """From a worker thread the signal timer cannot run: packets were re-scored there with no
    limit at all. They go to the scoring child process, under node_2's budget, killed at its
    end at the latest. Here the slow text sleeps 30 s in coin_flip's scorer (a module every
    Python process of the test loads, the scoring child included), so that the step, were it
    stuck, would not hold the interpreter's lock and the test can say so. The child is started
    in round 0 (not timed)."""
    (tmp_path / "sitecustomize.py").write_text(SLEEPY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    load_reasoning_gym()
    from reasoning_gym.probability.coin_flip import CoinFlipDataset

    monkeypatch.setattr(CoinFlipDataset, "score_answer", CoinFlipDataset.score_answer)
    exec(SLEEPY, {})  # this process too (where the step ran its packets' scoring), undone after
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards", _slow_packets)
    env = sapo_env.parallel_env(**SETTINGS)
    observations, _ = env.reset(seed=0)
    step = _in_a_thread(lambda: env.step(_actions(observations)), 120)  # starts the child
    assert step is not None
    observations = step[0]
    packets = COPIES * len(observations["node_2"]["questions"])
    started = time.perf_counter()
    step = _in_a_thread(lambda: env.step(_actions(observations)), BUDGET + 2.0)
    seconds = time.perf_counter() - started
    assert step is not None, f"the step was still running after {seconds:.1f} s"
    _check_round(step[4], seconds, packets)
    env.close()


def test_a_packet_left_unscored_is_rejected_as_scoring_timeout():
    """Its completions time out: scored 0, as it claims, but unverified, so refused."""
    env = sapo_env.parallel_env(n=2, tasks=[["coin_flip", 1.0, {}]], completions_per_question=2,
                                score_time_limit=0.1, node_score_budget=0.3)
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_actions(observations))
    group = observations["node_0"]["pool"][0]
    slow = {**group, "completions": (HOSTILE,) * 2, "rewards": np.zeros(2, np.float32),
            "advantages": np.zeros(2, np.float32)}
    verifier = PacketVerifier(env.config)
    assert verifier.check(group) is None
    assert verifier.check(slow) == "scoring_timeout"
    failures: dict = {}
    accepted, rejected = verifier.screen([slow, group], failures=failures)
    assert accepted == [group] and rejected == {group["source"]: 1}
    assert failures[group["source"]]["timeout"] >= 1


def test_a_round_budget_gives_each_node_an_equal_share():
    """``scoring_budget``: the node budget, or the round budget's share if that is smaller."""
    assert sapo_env.SwarmConfig(n_agents=4).scoring_budget == 10.0
    assert sapo_env.SwarmConfig(n_agents=4, round_score_budget=8.0).scoring_budget == 2.0
    assert sapo_env.SwarmConfig(n_agents=4, round_score_budget=80.0).scoring_budget == 10.0
    assert sapo_env.SwarmConfig(n_agents=4, round_score_budget=8.0,
                                node_score_budget=None).scoring_budget == 2.0
    assert sapo_env.SwarmConfig(node_score_budget=None).scoring_budget is None
    with pytest.raises(ValueError, match="round_score_budget must be None or a number"):
        sapo_env.SwarmConfig(round_score_budget=-1.0)


@pytest.mark.slow
def test_a_round_budget_bounds_the_step_whatever_the_number_of_slow_senders(monkeypatch):
    """Two slow senders, each with a budget of its own (``node_score_budget``), cost a step
    two budgets (here 2 x 3 s of their 2 x 32 slow completions); under a round budget of 3 s
    each node gets a third of it, and the step about one budget, however many send."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards", _slow_packets)
    env = sapo_env.parallel_env(**{**SETTINGS, "node_score_budget": None,
                                   "round_score_budget": BUDGET,
                                   "adversaries": {"node_1": "forge_rewards",
                                                   "node_2": "forge_rewards"}})
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_actions(observations))
    packets = COPIES * len(observations["node_2"]["questions"])
    started = time.perf_counter()
    _, _, _, _, infos = env.step(_actions(observations))
    assert time.perf_counter() - started < BUDGET + 2.0
    for a in ("node_1", "node_2"):
        failures = infos[a]["scoring_failures"]
        assert failures["budget"] >= 1  # its share ran out before its packets did
        assert failures["timeout"] + failures["budget"] == packets * 4
        assert infos[a]["rejected_groups"] == packets
    assert sum(infos["node_0"]["scoring_failures"].values()) == 0


# --- log-probs: read after the cheap checks, within the sender's budget ----------------------

LOGPROBS = [[-0.5] * 3] * 4  # a short list per completion: what is counted is reads, not time


def _read_log_probs(monkeypatch, seconds_each=0.0):
    """The packets whose sender's log-probs the step reads, by id, as the schema reads them
    (``parse_completion_fields`` on the lists the sender sent; a re-read of the arrays already
    parsed is not counted). A read moves the clock that charges it by ``seconds_each``."""
    from sapo_env.defenses import packet_schema, publication

    read, names, now = [], {}, [0.0]
    real = packet_schema.parse_completion_fields

    def spy(logprobs, *args, **kwargs):
        if id(logprobs) in names:
            read.append(names[id(logprobs)])
            now[0] += seconds_each
        return real(logprobs, *args, **kwargs)

    def with_log_probs(group, name):
        logprobs = [list(lp) for lp in LOGPROBS]
        names[id(logprobs)] = name
        return {**group, "id": name, "logprobs": logprobs}

    monkeypatch.setattr(packet_schema, "parse_completion_fields", spy)
    monkeypatch.setattr(publication, "monotonic", lambda: now[0], raising=False)
    return read, with_log_probs


def _attacked_round(monkeypatch, forge, **settings):
    """Round 0 plain, then round 1 with node_2 sending ``forge(group)`` in place of each of its
    groups: round 1's infos, and node_2's packet fates."""
    monkeypatch.setitem(transport_attacks.TRANSPORT_ATTACKS, "forge_rewards",
                        lambda group, extract, eps: [group] if group["round"] < 1
                        else forge(group))
    env = sapo_env.parallel_env(**{**SETTINGS, **settings})
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_actions(observations))
    _, _, _, _, infos = env.step(_actions(observations))
    return infos, [p for p in env.last_packets if p.sender == "node_2"]


def test_packets_refused_by_the_cheap_checks_never_have_their_log_probs_read(monkeypatch):
    """node_2 sends its first group, then a copy of it (``duplicate``) and a packet for a
    question it was not dealt (``not_dealt``), both with log-probs; in place of its other
    groups, a true copy with log-probs. Only those copies' log-probs are read; they are
    pooled with them."""
    read, with_log_probs = _read_log_probs(monkeypatch)

    def forge(group):
        if not group["id"].endswith("/q0"):
            return [with_log_probs(group, f"{group['id']}/copy")]
        elsewhere = {**group["ref"], "index": group["ref"]["index"] + 10_000}
        return [group, with_log_probs(group, "duplicate"),
                {**with_log_probs(group, "not_dealt"), "ref": elsewhere}]

    infos, fates = _attacked_round(monkeypatch, forge, node_score_budget=None)
    status = {p.group["id"]: p.status for p in fates}
    copies = [i for i in status if i.endswith("/copy")]
    assert status["duplicate"] == "duplicate" and status["not_dealt"] == "not_dealt"
    assert len(copies) == 3 and all(status[i] == "accepted" for i in copies)
    assert sorted(read) == sorted(copies)  # read once each; the refused ones never
    pooled = [p.group for p in fates if p.accepted and p.group["id"] in copies]
    assert all(np.array_equal(lp, LOGPROBS[0]) for g in pooled for lp in g["logprobs"])
    assert infos["node_2"]["rejected_groups"] == 2


@pytest.mark.parametrize("verify", [True, False])
def test_reading_log_probs_stops_when_the_senders_budget_is_spent(monkeypatch, verify):
    """Under a round budget of 3 s each of the 3 nodes has 1 s. node_2 sends 8 true copies of
    each of its 4 groups, with log-probs; each read costs 0.25 s on the clock that charges it:
    4 are read, then its budget is spent and the other 28 are refused unread
    (``scoring_timeout``, their completions counted under ``budget``), however many it sends.
    With verification the 4 it read find no budget left to be re-scored; without, they pass."""
    read, with_log_probs = _read_log_probs(monkeypatch, seconds_each=0.25)
    infos, fates = _attacked_round(
        monkeypatch, lambda g: [with_log_probs(g, f"{g['id']}/c{k}") for k in range(8)],
        node_score_budget=None, round_score_budget=3.0, verify_packets=verify)
    assert len(fates) == 32 and len(read) == 4
    unread = [p for p in fates if p.group["id"] not in read]
    assert {p.status for p in unread} == {"scoring_timeout"}
    assert all("logprobs" not in p.group for p in unread)
    assert {p.status for p in fates if p.group["id"] in read} \
        == ({"scoring_timeout"} if verify else {"accepted"})
    assert infos["node_2"]["scoring_failures"]["budget"] == (32 if verify else 28) * 4
    for a in ("node_0", "node_1"):
        assert infos[a]["rejected_groups"] == 0
        assert sum(infos[a]["scoring_failures"].values()) == 0


def test_a_senders_packets_beyond_its_cap_are_refused_unread(monkeypatch):
    """The cap is ``MAX_PACKETS_PER_QUESTION`` packets for each question a sender was dealt:
    node_2, dealt 4, sends 100 copies of each of its groups (400, with log-probs), without
    verification or budget. The first 256 are read (and pooled: nothing else checks them
    here); the other 144 are refused unread (``too_many``: no group, no repr), counted
    against node_2."""
    from sapo_env.defenses import publication

    read, with_log_probs = _read_log_probs(monkeypatch)
    infos, fates = _attacked_round(
        monkeypatch, lambda g: [with_log_probs(g, f"{g['id']}/c{k}") for k in range(100)],
        node_score_budget=None, verify_packets=False)
    cap = 64 * 4
    assert len(fates) == 400
    assert {p.status for p in fates[:cap]} == {"accepted"}
    assert read == [p.group["id"] for p in fates[:cap]]
    assert all(p.status == "too_many" and p.group is None and p.raw is None
               for p in fates[cap:])
    assert infos["node_2"]["rejected_groups"] == 400 - cap
    assert getattr(publication, "MAX_PACKETS_PER_QUESTION", None) == 64
