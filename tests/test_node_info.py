"""``infos[node]`` has a type (``sapo_env.types.NodeInfo``): the keys the env writes, in a plain
round, with rescue, with adversaries and with churn, are exactly the TypedDict's keys, and each
value has the type the TypedDict gives it."""

from __future__ import annotations

import types
import typing

import pytest

import sapo_env
from agents import DemonstratorAgent
from sapo_env.churn import LEAVE, OFFLINE, PENDING, STATUSES
from sapo_env.types import NodeInfo

HINTS = typing.get_type_hints(NodeInfo)
EVERY_STEP = {"status", "num_external", "generated_completions"}  # absent nodes too


def conforms(value, hint) -> bool:
    """Whether ``value`` has type ``hint`` (the few forms NodeInfo uses)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if origin is dict:
        return isinstance(value, dict) and all(
            conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items())
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


def play(env, rounds: int, schedule=None) -> list[dict]:
    """Every step's infos over ``rounds`` rounds of demonstrators; ``schedule[(round, node)]``
    replaces that node's action."""
    schedule = schedule or {}
    nodes = {a: DemonstratorAgent(accuracy=0.5, num_external=1, seed=i)
             for i, a in enumerate(env.possible_agents)}
    observations, infos = env.reset(seed=0)
    assert all(info == {} for info in infos.values())  # reset: empty infos
    seen = []
    for t in range(rounds):
        actions = {a: schedule.get((t, a)) or nodes[a].act(observations[a]) for a in env.agents}
        observations, _, _, _, infos = env.step(actions)
        seen.append(infos)
    return seen


SMALL = dict(n=3, completions_per_question=3, train_budget=3, num_external=1, max_rounds=6)
CONFIGS = {
    "default": (dict(SMALL), {}),
    "rescue": (dict(SMALL, rescue=True, shared_questions=True), {}),
    "adversaries": (dict(SMALL, adversaries={"node_2": "forge_rewards"}), {}),
    "churn": (dict(SMALL, n=4, join_rounds={"node_3": 2}),
              {(0, "node_1"): OFFLINE, (1, "node_1"): PENDING, (3, "node_2"): LEAVE}),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_env_writes_exactly_the_keys_of_node_info(name):
    overrides, schedule = CONFIGS[name]
    steps = play(sapo_env.parallel_env(**overrides), 4, schedule)
    for infos in steps:
        for node, info in infos.items():
            expected = set(HINTS) if info["status"] == "online" else EVERY_STEP
            assert set(info) == expected, (name, node, set(info) ^ expected)
            wrong = {k: v for k, v in info.items() if not conforms(v, HINTS[k])}
            assert not wrong, (name, node, wrong)


def test_churn_reaches_every_status():
    overrides, schedule = CONFIGS["churn"]
    steps = play(sapo_env.parallel_env(**overrides), 4, schedule)
    statuses = {info["status"] for infos in steps for info in infos.values()}
    assert statuses == set(STATUSES) == set(typing.get_args(HINTS["status"]))


def test_the_rescue_and_adversary_keys_carry_their_values():
    """The configs above exercise what they name: a rescue and a rejected packet happen."""
    rescue = play(sapo_env.parallel_env(**CONFIGS["rescue"][0]), 4)
    assert any(i["rescued_groups"] for infos in rescue for i in infos.values())
    forged = play(sapo_env.parallel_env(**CONFIGS["adversaries"][0]), 4)
    assert any(i["rejected_groups"] for infos in forged for i in infos.values())


def test_conforms_refuses_a_wrong_value():
    assert not conforms(True, HINTS["no_answer"])
    assert not conforms("0.5", HINTS["complementarity"])
    assert not conforms({"timeout": 1.5}, HINTS["scoring_failures"])
    assert not conforms("gone", HINTS["status"])
    assert conforms(None, HINTS["complementarity"]) and conforms(3, HINTS["no_answer"])
