"""Packet verification: a receiver never trusts a group it did not build.

A published group (a packet) claims a question, its answer, a ``ref`` from which reasoning-gym
re-derives both, completions, and their rewards and advantages. ``PacketVerifier`` checks a
packet the way a receiver that trusts nothing would, and names the first thing that is wrong:

``malformed``, ``oversized``
    not a group of the packet schema (:mod:`sapo_env.defenses.packet_schema`: fields of the wrong
    type or shape, strings beyond their bounds), a ``task`` other than its ``ref``'s, or a
    question its generator cannot produce;
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
for. The check is for packets from outside: :mod:`sapo_env.defenses.transport_attacks` sends such
packets.

Example::

    >>> import numpy as np
    >>> import sapo_env
    >>> from sapo_env.defenses.packets import PacketVerifier
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

from sapo_env.config import SwarmConfig
from sapo_env.defenses.packet_schema import SCHEMA_REASONS, parse_packet
from sapo_env.rollouts import group_advantages
from sapo_env.scoring.answers import get_extractor
from sapo_env.tasks import redraw, reference_answer, score_completions
from sapo_env.types import Group

REJECT_REASONS = (*SCHEMA_REASONS, "unknown_task", "question", "answer", "system_prompt",
                  "rewards", "advantages", "not_dealt", "duplicate")
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
        """The first reason (of ``REJECT_REASONS``, bar ``not_dealt`` and ``duplicate``) to
        reject ``group``, or None when it is what it claims. Any value may be passed: it is
        parsed against the packet schema first
        (:func:`sapo_env.defenses.packet_schema.parse_packet`,
        whose reasons ``malformed`` and ``oversized`` it returns)."""
        # the round is the receiver's to stamp (``admit``); the claimed one is never read
        parsed = parse_packet(group, 0, self.config.completions_per_question,
                              self.config.max_completion_chars)
        if isinstance(parsed, str):
            return parsed
        ref = parsed["ref"]
        if (ref["task"], _config_key(ref["config"])) not in self._tasks:
            return "unknown_task"
        if parsed["task"] != ref["task"]:
            return "malformed"
        try:  # a forged ref within the swarm's tasks can still hit a generator's bug
            drawn = redraw(ref)
        except Exception:  # noqa: BLE001 (whatever reasoning-gym raises, the packet is bad)
            return "malformed"
        if parsed["question"] != drawn.question["prompt"]:
            return "question"
        if parsed["answer"] != reference_answer(drawn.entry):
            return "answer"
        if parsed["system_prompt"] != self.config.system_prompt:
            return "system_prompt"
        rewards = score_completions(drawn, parsed["completions"], self._extract,
                                    self.config.scoring_limits)
        if not np.allclose(rewards, parsed["rewards"], rtol=0.0, atol=_REWARD_TOLERANCE):
            return "rewards"
        advantages = group_advantages(rewards, self.config.advantage_eps)
        if not np.allclose(advantages, parsed["advantages"], rtol=0.0,
                           atol=_ADVANTAGE_TOLERANCE):
            return "advantages"
        return None

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
