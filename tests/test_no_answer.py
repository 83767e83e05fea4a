"""``infos[node]["no_answer"]``: completions from which no answer could be extracted, counted
apart from ``scoring_failures``, and the env's one warning when a whole round has none."""

import logging

from conftest import ARITHMETIC, SMALL

import sapo_env
from sapo_env.scoring.round_scoring import Unanswered
from sapo_env.tasks import reference_answer, resolve


def answers(observations, form):
    """Every completion the right answer, written as ``form`` formats it."""
    return {a: {"completions": tuple((form.format(reference_answer(resolve(q["ref"]))),)
                                     * o["completions_per_question"] for q in o["questions"]),
                "num_external": 1}
            for a, o in observations.items()}


def warnings_logged(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and r.getMessage().startswith("no answer could be extracted")]


def play(caplog, form, rounds=3, **overrides):
    """Each round's infos and rewards, and the warnings the run logged."""
    env = sapo_env.parallel_env(**{**SMALL, "tasks": ARITHMETIC, **overrides})
    observations, _ = env.reset(seed=0)
    trace = []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sapo_env"):
        for _ in range(rounds):
            observations, rewards, _, _, infos = env.step(answers(observations, form))
            trace.append((infos, rewards))
    return trace, warnings_logged(caplog)


def test_right_answers_without_tags_are_counted_and_warned_of_once(caplog):
    trace, warned = play(caplog, "The answer is {}")
    for infos, rewards in trace:
        for a, info in infos.items():
            assert info["no_answer"] == info["generated_completions"] > 0
            assert sum(info["scoring_failures"].values()) == 0  # kept out of the failures
            assert rewards[a] == 0.0
    assert len(warned) == 1  # three such rounds, one warning
    assert "answer_format='tag'" in warned[0] and "lenient" in warned[0]


def test_tagged_answers_count_zero_and_do_not_warn(caplog):
    trace, warned = play(caplog, "<answer>{}</answer>")
    assert [info["no_answer"] for infos, _ in trace for info in infos.values()] == [0] * 9
    assert all(r == 1.0 for _, rewards in trace for r in rewards.values())
    assert warned == []


def test_lenient_reads_the_same_completions_and_counts_none(caplog):
    trace, warned = play(caplog, "The answer is {}", answer_format="lenient")
    assert all(info["no_answer"] == 0 for infos, _ in trace for info in infos.values())
    assert all(r == 1.0 for _, rewards in trace for r in rewards.values())
    assert warned == []


def test_each_env_warns_once_of_its_own(caplog):
    assert len(play(caplog, "The answer is {}", rounds=2)[1]) == 1
    assert len(play(caplog, "The answer is {}", rounds=2)[1]) == 1


def test_a_round_with_one_extractable_answer_is_counted_without_a_warning(caplog):
    unanswered = Unanswered()
    with caplog.at_level(logging.WARNING, logger="sapo_env"):
        unanswered.record({"node_0": 12, "node_1": 11}, completions=24)
        assert unanswered.by_node == {"node_0": 12, "node_1": 11}
        unanswered.record({}, completions=0)  # nothing generated: nothing to warn of
        assert warnings_logged(caplog) == [] and not unanswered.warned
        unanswered.record({"node_0": 8}, completions=8)
    assert warnings_logged(caplog) == [
        "no answer could be extracted from any of this round's 8 completions "
        "(answer_format='tag'), so every one scored 0. The \"tag\" format (the default) "
        "reads only <answer>...</answer>; answer_format=\"lenient\" also reads \"The answer is "
        "X\" or the last line. infos[node]['no_answer'] counts them each round."]
