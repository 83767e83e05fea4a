"""Where the signal timer cannot run (a worker thread), the env scores in a child process:
the same scores, and a hostile node is stopped at its budget by a kill if need be."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import sapo_env
from sapo_env.scoring import process_scoring
from sapo_env.tasks import reference_answer, resolve

TASKS = [["basic_arithmetic", 1.0, {}], ["coin_flip", 1.0, {}], ["spell_backward", 1.0, {}]]
HOSTILE = "<answer>1e999999999</answer>"  # coin_flip's scorer parses numbers: slow without bounds


def _actions(env, observations, rng, hostile=()):
    """Half-right answers (the reference answer or a wrong one), or the hostile text in
    place of them (the same random draws either way)."""
    actions = {}
    for a in env.agents:
        questions = observations[a]["questions"]
        L = observations[a]["completions_per_question"]
        honest = [[f"<answer>{reference_answer(resolve(q['ref'])) if rng.random() < 0.5 else 'no'}"
                   "</answer>" for _ in range(L)] for q in questions]
        completions = [[HOSTILE] * L for _ in questions] if a in hostile else honest
        actions[a] = {"num_external": 0, "completions": completions}
    return actions


def _play(rounds, in_thread, hostile=(), **settings):
    env = sapo_env.parallel_env(n=3, tasks=TASKS, **settings)
    observations, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    out, seconds = [], []
    with ThreadPoolExecutor(1) as worker:
        for t in range(rounds):
            actions = _actions(env, observations, rng, hostile if t > 0 else ())
            started = time.perf_counter()
            step = worker.submit(env.step, actions).result() if in_thread \
                else env.step(actions)
            seconds.append(time.perf_counter() - started)
            observations, rewards, _, _, infos = step
            out.append((rewards, {a: infos[a]["scoring_failures"] for a in infos}))
    env.close()
    return out, seconds


@pytest.mark.slow
def test_scoring_in_a_worker_thread_gives_the_main_threads_scores(caplog):
    in_main, _ = _play(3, in_thread=False)
    in_thread, _ = _play(3, in_thread=True)
    assert in_thread == in_main
    assert "scoring in a child process" in caplog.text


@pytest.mark.slow
def test_a_hostile_node_is_stopped_at_its_budget_from_a_worker_thread():
    """64 completions of 1e999999999 on coin_flip cost about 75 s to score unbounded. From a
    thread, with a 1.5 s budget per node, the round returns (the bound is loose on purpose:
    it checks a hang cannot happen, not a speed), the hostile node's completions count as
    timeouts and spent budget, and the honest nodes are scored as without it."""
    results, seconds = _play(2, in_thread=True, hostile=("node_0",), node_score_budget=1.5,
                             score_time_limit=0.25)
    rewards, failures = results[1]
    assert failures["node_0"]["timeout"] + failures["node_0"]["budget"] > 0
    assert failures["node_1"] == failures["node_2"] == dict.fromkeys(failures["node_1"], 0)
    assert seconds[1] < 30  # one node's budget plus the kill grace, with room for a busy CI
    honest, _ = _play(2, in_thread=False, node_score_budget=1.5, score_time_limit=0.25)
    assert rewards["node_1"] == honest[1][0]["node_1"]


@pytest.mark.slow
def test_a_node_that_overruns_gets_the_child_killed_and_the_others_are_scored(monkeypatch,
                                                                               caplog):
    """The hard kill, as for C code that never checks for signals: node 0's completions take
    about a second each within a 10 s time limit and no budget, but the parent gives its call
    0.5 s, so it kills the child; node 0's completions score 0 as timeouts, and a fresh child
    scores the others as the main thread does."""
    real = process_scoring._allowance
    monkeypatch.setattr(process_scoring, "_allowance", lambda jobs, limits, budget: 0.5
                        if jobs[0][3] == 0 else real(jobs, limits, budget))
    results, _ = _play(2, in_thread=True, hostile=("node_0",), score_time_limit=10.0,
                       node_score_budget=None)
    expected, _ = _play(2, in_thread=False)
    rewards, failures = results[1]
    assert rewards["node_0"] == 0.0 and failures["node_0"]["timeout"] == 64
    assert rewards["node_1"] == expected[1][0]["node_1"]
    assert failures["node_1"] == expected[1][1]["node_1"]
    assert "the scoring process was restarted" in caplog.text


def test_without_limits_nothing_is_enforced_and_no_child_starts():
    scoring = process_scoring.ProcessScoring()
    from sapo_env.scoring.guard import ScoringLimits

    assert scoring.score([], [], None, ScoringLimits(time_limit=None), [], None) == []
    assert scoring._child is None


@pytest.mark.parametrize("message", [b"", b"\x05\x00\x00\x00\x00\x00\x00\x00abc"])
def test_a_truncated_message_reads_as_the_end_of_the_stream(message):
    import io

    assert process_scoring._read(io.BytesIO(message)) is None


@pytest.mark.slow
@pytest.mark.parametrize("task", ["coin_flip", "intermediate_integration", "rush_hour"])
def test_from_a_thread_every_slow_answer_costs_a_node_at_most_its_budget(task):
    """The tasks whose scorers ran for 75-89 s on 64 hostile answers (or timed out) before
    the budget: from a worker thread, each completion of the hostile node is one of the
    answers built to be slow to score (``agents.hostile.adversarial.SLOW_ANSWERS``); the step
    returns (the test's own time shows it: seconds, not minutes), the hostile node earns nothing,
    and the honest node's completions are all scored."""
    from agents.hostile.adversarial import SLOW_ANSWERS

    env = sapo_env.parallel_env(n=2, tasks=[[task, 1.0, {}]], node_score_budget=1.0,
                                score_time_limit=0.25)
    observations, _ = env.reset(seed=0)
    actions = {}
    for a in env.agents:
        L = observations[a]["completions_per_question"]
        actions[a] = {"num_external": 0, "completions": [
            [f"<answer>{SLOW_ANSWERS[k % len(SLOW_ANSWERS)]}</answer>" if a == "node_0" else
             f"<answer>{reference_answer(resolve(q['ref']))}</answer>" for k in range(L)]
            for q in observations[a]["questions"]]}
    with ThreadPoolExecutor(1) as worker:
        _, rewards, _, _, infos = worker.submit(env.step, actions).result()
    env.close()
    assert rewards["node_0"] <= 0.01  # rush_hour gives 0.01 to a wrong answer it can read
    assert sum(infos["node_1"]["scoring_failures"].values()) == 0
