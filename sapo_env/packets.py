"""Packet verification: a receiver never trusts a group it did not build.

A published group (a packet) claims a question, its answer, a ``ref`` from which reasoning-gym
re-derives both, completions, and their rewards and advantages. ``PacketVerifier`` checks a
packet the way a receiver that trusts nothing would, and names the first thing that is wrong:

``malformed``
    not a group: missing keys, completions that are not L strings, rewards or advantages that
    are not L numbers, a ``ref`` that is not ``{task, config, seed, index}`` with integers in
    range, or a question its generator cannot produce;
``unknown_task``
    a ``ref`` whose task and config are none of the swarm's (reasoning-gym is never asked to
    generate from a config a peer chose, which could cost unbounded time or memory);
``question``, ``answer``, ``system_prompt``
    the field differs from what the ``ref`` re-derives (or from the swarm's system prompt);
``rewards``, ``advantages``
    the completions re-scored with the swarm's answer format and reasoning-gym's scorer, and
    their group advantages, differ from the claimed ones;
``not_dealt``
    the source was not dealt this question this round. The schedule is the env's (in a real
    swarm, deterministic from the run seed, the node and the round, so any receiver can
    re-derive it), so a node can publish only what it was asked: not questions it chose (a
    flood), not held-out ones, not another node's groups under its own name (a replay), and a
    made-up name (a sybil) was dealt nothing;
``duplicate``
    the source already published a group for this question (in this round or one still in the
    pool): a node answers a question once, so this is a copy, whatever its id.

``SwarmConfig.verify_packets`` (on by default) runs it on every group on its way into the pool
and drops the rejected ones; ``infos[node]["rejected_groups"]`` counts a publisher's rejected
groups and ``infos[node]["rejected_groups_swarm"]`` the round's total. Groups the env built
itself and nobody altered are not re-scored (the same deterministic scorer would give the same
scores, and a second scoring would double the step's cost); only their duplicates are looked
for. The check is for packets from outside: :mod:`sapo_env.adversaries` sends such packets.

Example::

    >>> import numpy as np
    >>> import sapo_env
    >>> from sapo_env.packets import PacketVerifier
    >>> env = sapo_env.parallel_env(n=2, max_rounds=2)
    >>> observations, _ = env.reset(seed=0)
    >>> q = observations["node_0"]["questions"][0]
    >>> verifier = PacketVerifier(env.config)
    >>> packet = {"id": "node_0/r0/q0", "source": "node_0", "round": 0, "task": q["task"],
    ...           "question": q["prompt"], "system_prompt": env.config.system_prompt,
    ...           "answer": "42", "ref": q["ref"], "completions": ("x",) * 8,
    ...           "rewards": np.zeros(8, np.float32), "advantages": np.zeros(8, np.float32)}
    >>> verifier.check(packet)
    'answer'
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from sapo_env.answers import get_extractor
from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig
from sapo_env.rollouts import group_advantages
from sapo_env.tasks import redraw, reference_answer, score_completions
from sapo_env.types import Group

REJECT_REASONS = ("malformed", "unknown_task", "question", "answer", "system_prompt", "rewards",
                  "advantages", "not_dealt", "duplicate")
_REF_KEYS = frozenset(("task", "config", "seed", "index"))
_GROUP_KEYS = ("id", "source", "round", "task", "question", "system_prompt", "answer", "ref",
               "completions", "rewards", "advantages")
_MAX_SEED = 2**62  # the env's seeds stay below it (sapo_env.tasks)
# Claimed scores are float32 like the env's; advantages may come from another implementation.
_REWARD_TOLERANCE, _ADVANTAGE_TOLERANCE = 1e-6, 1e-4


def question_key(group: Mapping[str, Any]) -> tuple:
    """Who answered which question: ``(source, task, seed, index)``; a second packet with the
    same key is a duplicate."""
    ref = group["ref"]
    return group["source"], ref["task"], ref["seed"], ref["index"]


class PacketVerifier:
    """Re-derives and re-scores packets for one swarm's tasks, answer format and prompt."""

    def __init__(self, config: SwarmConfig):
        self.config = config
        self._extract = get_extractor(config.answer_format)
        specs = list(config.tasks) + [s for tasks in (config.node_tasks or {}).values()
                                      for s in tasks]
        self._tasks = {(s.name, _config_key(s.config)) for s in specs}

    def check(self, group: Any) -> str | None:
        """The first reason (of ``REJECT_REASONS``, bar ``duplicate``) to reject ``group``, or
        None when it is what it claims."""
        if not isinstance(group, Mapping) or not all(k in group for k in _GROUP_KEYS):
            return "malformed"
        reason = self._check_ref(group["ref"])
        if reason is not None:
            return reason
        L = self.config.completions_per_question
        completions = group["completions"]
        if not (isinstance(completions, (tuple, list)) and len(completions) == L
                and all(isinstance(c, str) for c in completions)):
            return "malformed"
        claimed = {k: _floats(group[k], L) for k in ("rewards", "advantages")}
        if any(v is None for v in claimed.values()) or group["task"] != group["ref"]["task"]:
            return "malformed"
        try:  # a forged ref within the swarm's tasks can still hit a generator's bug
            drawn = redraw(dict(group["ref"]))
        except Exception:  # noqa: BLE001 (whatever reasoning-gym raises, the packet is bad)
            return "malformed"
        if group["question"] != drawn.question["prompt"]:
            return "question"
        if group["answer"] != reference_answer(drawn.entry):
            return "answer"
        if group["system_prompt"] != self.config.system_prompt:
            return "system_prompt"
        rewards = score_completions(drawn, completions, self._extract,
                                    self.config.scoring_limits)
        if not np.allclose(rewards, claimed["rewards"], rtol=0.0, atol=_REWARD_TOLERANCE):
            return "rewards"
        advantages = group_advantages(rewards, self.config.advantage_eps)
        if not np.allclose(advantages, claimed["advantages"], rtol=0.0,
                           atol=_ADVANTAGE_TOLERANCE):
            return "advantages"
        return None

    def _check_ref(self, ref: Any) -> str | None:
        if not isinstance(ref, Mapping) or set(ref) != _REF_KEYS:
            return "malformed"
        if not all(_is_int(ref[k], top) for k, top in (("seed", _MAX_SEED),
                                                         ("index", MAX_QUESTIONS_PER_STREAM))):
            return "malformed"
        if not isinstance(ref["config"], Mapping):
            return "malformed"
        try:
            known = (ref["task"], _config_key(ref["config"])) in self._tasks
        except (TypeError, ValueError):  # not JSON data
            return "malformed"
        return None if known else "unknown_task"

    def screen(self, groups: Sequence[Group], trusted: Iterable[Group] = (),
               already: Iterable[Group] = (),
               dealt: Mapping[str, Iterable[Mapping[str, Any]]] | None = None
               ) -> tuple[list[Group], Counter]:
        """The groups that pass, in order, and the rejected ones counted by source.

        ``trusted`` groups (built by the env, unaltered; compared by identity) skip the
        re-derivation and re-scoring; ``already`` are groups already accepted (the pool), whose
        questions count for duplicates; ``dealt`` maps each node to the refs of the questions it
        was dealt this round (None: not checked), and any other group from it is
        ``not_dealt``."""
        trusted_ids = {id(g) for g in trusted}
        if dealt is not None:
            dealt = {a: {(r["task"], r["seed"], r["index"]) for r in refs}
                     for a, refs in dealt.items()}
        seen = {question_key(g) for g in already}
        accepted, rejected = [], Counter()
        for group in groups:
            # the cheap checks first: a copy or an undealt question is not re-scored
            key = _key_or_none(group)
            if key is not None and key in seen:
                reason = "duplicate"
            elif id(group) in trusted_ids:
                reason = None
            elif dealt is not None and (key is None or key[1:] not in dealt.get(key[0], ())):
                reason = "not_dealt" if key is not None else "malformed"
            else:
                reason = self.check(group)
            seen.add(key)
            if reason is None:
                accepted.append(group)
            else:
                source = group.get("source") if isinstance(group, Mapping) else None
                rejected[str(source)] += 1
        return accepted, rejected


def _key_or_none(group: Any) -> tuple | None:
    """:func:`question_key`, or None for a packet too malformed to have one."""
    try:
        key = question_key(group)
        hash(key)
    except (KeyError, TypeError):
        return None
    return key


def _config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True)


def _is_int(value: Any, top: int) -> bool:
    return (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            and 0 <= value < top)


def _floats(value: Any, length: int) -> np.ndarray | None:
    """``value`` as ``length`` finite floats, or None."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if array.shape != (length,) or not np.isfinite(array).all():
        return None
    return array
