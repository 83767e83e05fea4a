"""Property-based: on every paper task, any action either plays a normal round (rewards in
[0, 1]) or raises ValueError and leaves the env exactly as it was, whatever text it carries:
wrong types and nesting, wrong counts, huge strings, lone surrogates, NUL bytes, brackets nested
100,000 deep, huge numbers, Python code, with and without answer tags.

Each task runs under two configs: the defaults (texts over ``max_completion_chars`` are input
errors, answers over ``max_answer_chars`` score 0 unparsed) and one that lets every text reach
the scorers (limits of 300,000 characters, a 20 ms time limit to keep the suite fast).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_input import snapshot

import sapo_env
from sapo_env.config import PAPER_TASKS
from sapo_env.tasks import reference_answer

pytestmark = pytest.mark.slow  # Hypothesis: 2070 hostile actions on 9 tasks
SENTINEL = "SAPO_ENV_PWNED"
CODE = f"__import__('os').environ.__setitem__('{SENTINEL}', '1')"
DEEP = 100_000
HOSTILE = [
    "[" * DEEP + "]" * DEEP, "(" * DEEP + ")" * DEEP, "{" * DEEP, "¬" * DEEP + "P",
    "P∧" * (DEEP // 2) + "P", "(P↔Q)→" * 5000 + "P", "9" * 20_000, "9" * 4301, "9" * 400,
    "-" + "9" * 300, "1e999999999", "-1e-999999999", "9**9**9**9", "(2*x)**10**10",
    "1/" + "9" * 5000,
    "0x" + "f" * 3000, "[[" + "0, " * 30_000 + "]]", "\x00" * 1000, "a\x00b",
    "\u202e\u200b\ufeff", " " * DEEP, "<answer>" * 20_000,
    "</answer>" * 1000, "<answer>" + "x" * DEEP + "</answer>", CODE, f"[{CODE}]",
    f"[[{CODE}, 1]]", f"(lambda: {CODE})()", "().__class__.__base__.__subclasses__()",
    "\\frac{" + "9" * 1000 + "}{7}", "NaN", "sNaN", "-Infinity", "",
    "[" * 5000 + "]" * 5000, "¬" * 8000 + "P", "9" * 3000,  # over max_answer_chars only
]
LONE_SURROGATES = ["\ud800", "\udfff\ud800x", "<answer>\udc80</answer>"]  # input errors
REF = "{REF}"  # replaced by the question's reference answer when the action is built
SETTINGS = {"default": {}, "everything_scored": {
    "max_completion_chars": 300_000, "max_answer_chars": 300_000, "score_time_limit": 0.02}}
ENVS = {(spec.name, name): sapo_env.parallel_env(
    n=2, completions_per_question=2, train_budget=2, num_external=0, max_rounds=1000,
    tasks=[spec], **overrides) for spec in PAPER_TASKS for name, overrides in SETTINGS.items()}
EXAMPLES = {"default": 150, "everything_scored": 80}  # 9 x 230 = 2070 examples

texts = st.one_of(
    st.text(max_size=40),  # any valid text (a lone surrogate is an input error: FAULTS)
    st.sampled_from(HOSTILE),
    st.just(REF),
    st.integers(-10**30, 10**30).map(str),
)
tagged_texts = st.one_of(texts, texts.map(lambda t: f"<answer>{t}</answer>"),
                         texts.map(lambda t: f"Some reasoning.\n<answer>{t}</answer>\nMore."))
@st.composite
def valid_action(draw, refs: list[str], L: int, budget: int, max_chars: int) -> dict:
    """A well-formed action for a node asked len(refs) questions, carrying hostile text (cut to
    ``max_chars``, beyond which a text is an input error)."""
    container = draw(st.sampled_from([tuple, list]))
    completions = container(
        container(draw(tagged_texts).replace(REF, ref)[:max_chars] for _ in range(L))
        for ref in refs)
    action = {"completions": completions,
              "num_external": draw(st.integers(0, budget).map(
                  lambda v: np.int64(v) if v % 2 else v))}
    if draw(st.booleans()):
        action["share"] = draw(st.lists(st.sampled_from([0, 1, True, False]),
                                        min_size=len(refs), max_size=len(refs)))
    return action


def _replace_text(actions, node, data, value):
    completions = [list(group) for group in actions[node]["completions"]]
    q = data.draw(st.integers(0, len(completions) - 1))
    completions[q][data.draw(st.integers(0, len(completions[q]) - 1))] = value
    actions[node]["completions"] = completions


def _resize(actions, node, data, questions):
    completions = [list(group) for group in actions[node]["completions"]]
    if questions:
        completions = completions[:-1] if data.draw(st.booleans()) else completions + [["x"]]
    else:
        q = data.draw(st.integers(0, len(completions) - 1))
        completions[q] = completions[q][:-1] if data.draw(st.booleans()) else completions[q] + [
            "x"]
    actions[node]["completions"] = completions


# One malformation each; every one is an input error the env must refuse without a trace.
FAULTS = {
    "completions not a sequence": lambda actions, node, data, config: actions[node].update(
        completions=data.draw(st.sampled_from(["abc", 3, None, b"x", {"q": 1}]))),
    "wrong number of questions": lambda actions, node, data, config: _resize(
        actions, node, data, questions=True),
    "wrong number of completions": lambda actions, node, data, config: _resize(
        actions, node, data, questions=False),
    "a completion that is not text": lambda actions, node, data, config: _replace_text(
        actions, node, data, data.draw(st.sampled_from(
            [None, 7, 1.5, b"bytes", ["nested"], ("t",), {"a": 1}]))),
    "a completion too long": lambda actions, node, data, config: _replace_text(
        actions, node, data, "<answer>" + "[" * config.max_completion_chars + "</answer>"),
    "J out of range": lambda actions, node, data, config: actions[node].update(
        num_external=data.draw(st.sampled_from([-1, config.train_budget + 1, 10**30]))),
    "J not an int": lambda actions, node, data, config: actions[node].update(
        num_external=data.draw(st.sampled_from([1.0, True, "1", None, [1], np.bool_(True)]))),
    "J missing": lambda actions, node, data, config: actions[node].pop("num_external"),
    "share of the wrong length": lambda actions, node, data, config: actions[node].update(
        share=[1] * (len(actions[node]["completions"]) + 1)),
    "share not 0/1": lambda actions, node, data, config: actions[node].update(
        share=[data.draw(st.sampled_from([2, -1, "1", None, 0.5]))] * len(
            actions[node]["completions"])),
    "unknown field": lambda actions, node, data, config: actions[node].update(temperature=1.0),
    "a completion not valid Unicode": lambda actions, node, data, config: _replace_text(
        actions, node, data, data.draw(st.sampled_from(LONE_SURROGATES))),
    "action not a dict": lambda actions, node, data, config: actions.update(  # None: offline
        {node: data.draw(st.sampled_from(["hello", [], 3]))}),
    "missing node": lambda actions, node, data, config: actions.pop(node),
    "unknown node": lambda actions, node, data, config: actions.update(node_7=actions[node]),
}


def honest_round(env) -> dict:
    """Each question answered once right, once wrong."""
    return {a: {"completions": tuple(
        (f"<answer>{reference_answer(d.entry)}</answer>", "<answer>no</answer>")
        for d in env._run.drawn[a]), "num_external": 0} for a in env.agents}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("task", [spec.name for spec in PAPER_TASKS])
def test_any_action_plays_a_round_or_changes_nothing(task, setting):
    env = ENVS[(task, setting)]
    config = env.config

    @settings(max_examples=EXAMPLES[setting], deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data):
        env.reset(seed=0)
        env.step(honest_round(env))  # something in the pool and the batches
        refs = {a: [reference_answer(d.entry) for d in env._run.drawn[a]] for a in env.agents}
        actions = {a: data.draw(valid_action(refs[a], config.completions_per_question,
                                             config.train_budget, config.max_completion_chars),
                                label=a) for a in env.agents}
        fault = data.draw(st.sampled_from([None] * len(FAULTS) + sorted(FAULTS)), label="fault")
        if fault is not None:
            FAULTS[fault](actions, data.draw(st.sampled_from(env.agents)), data, config)
        if data.draw(st.integers(0, 29), label="actions as a list") == 0:
            actions, fault = list(actions.values()), "actions not a dict"
        bad = fault is not None
        before = snapshot(env)
        if bad:
            with pytest.raises(ValueError):
                env.step(actions)
            assert snapshot(env) == before
        else:
            _, rewards, terminations, truncations, infos = env.step(actions)
            assert set(rewards) == set(env.possible_agents)
            assert all(math.isfinite(r) and 0.0 <= r <= 1.0 for r in rewards.values())
            for info in infos.values():
                failures = info["scoring_failures"]
                assert all(type(v) is int and v >= 0 for v in failures.values())
                assert sum(failures.values()) <= info["generated_completions"]
        assert SENTINEL not in os.environ

    check()
