"""A completion is text another machine must be able to store: a lone surrogate (a str no
UTF-8 encoder accepts, which a careless decoder or a hostile node can produce) is refused at
the boundary, before it can crash a receiver's pool dataset, JSON transport or tokenizer."""

from __future__ import annotations

import pytest

import sapo_env
from sapo_env.defenses.packet_schema import parse_packet
from sapo_env.validation import unencodable_at

LONE = "<answer>1</answer>\ud800"


def _actions(observations, text):
    return {a: {"num_external": 4,
                "completions": [[text] * o["completions_per_question"]
                                for _ in o["questions"]]}
            for a, o in observations.items()}


def test_where_text_stops_being_unicode():
    assert unencodable_at("plain") is None and unencodable_at("é ✓ 😀") is None
    assert unencodable_at(LONE) == len(LONE) - 1


def test_an_action_with_a_lone_surrogate_is_an_input_error_that_changes_nothing():
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    observations, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match=r"node_0: completions\[0\]\[0\] is not valid Unicode"):
        env.step(_actions(observations, LONE))
    assert env.round == 0
    env.step(_actions(observations, "<answer>1</answer>"))  # the same round, played now
    assert env.round == 1


def test_a_packet_with_a_lone_surrogate_is_malformed():
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(_actions(observations, "<answer>1</answer>"))
    group = dict(observations["node_0"]["pool"][0])
    config = env.config
    args = (1, config.completions_per_question, config.max_completion_chars)
    assert not isinstance(parse_packet(group, *args), str)
    bad = {**group, "completions": (LONE, *group["completions"][1:])}
    assert parse_packet(bad, *args) == "malformed"
    assert parse_packet({**group, "question": group["question"] + "\udfff"}, *args) == "malformed"
