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
``scoring_timeout``
    its completions could not all be re-scored: one ran past the time limit, or its sender's
    scoring budget ran out first (re-scoring a packet is scored as its sender's own
    completions are: below);
``rewards``, ``advantages``
    the completions re-scored with the swarm's answer format and reasoning-gym's scorer, and
    their group advantages, differ from the claimed ones;
``not_dealt``
    the source was not dealt this question this round (the question is its whole ``ref``:
    task, config, seed and index). The schedule is the env's (in a real
    swarm, deterministic from the run seed, the node and the round, so any receiver can
    re-derive it), so a node can publish only what it was asked: not questions it chose (a
    flood), not held-out ones, not another node's groups under its own name (a replay), and a
    made-up name (a sybil) was dealt nothing;
``duplicate``
    the source already has a group for this question (accepted in this round, or one still in
    the pool): a node answers a question once, so this is a copy, whatever its id. Only
    accepted groups count: a rejected packet claiming a node's question does not make the
    node's own group a copy, and the env's own groups are screened before any packet from
    outside, so none can take a node's place.

**Re-scoring runs on the swarm's scoring path** (``PacketVerifier(config, scoring)``, the env's
own :mod:`sapo_env.scoring.round_scoring` ``Scoring``): the same guard and time limits, in the
scoring child process wherever the signal timer cannot run (a worker thread), and charged to
the budget of the node that sent the packet: ``SwarmConfig.node_score_budget`` is one budget
for all of a node's scoring in a round, its completions first, then its packets
(:meth:`PacketVerifier.screen`'s ``spent``). Its packets' scoring failures count in its
``infos[node]["scoring_failures"]``. However many slow packets a node sends, they cost the
round at most its budget (plus the kill grace in a child process). The checks that read only
a packet's question, ``not_dealt`` and ``duplicate``, are also
:meth:`PacketVerifier.cheap_verdicts`: the env runs them before it reads a packet's
log-probs, which it charges to the same budget (:mod:`sapo_env.defenses.publication`).

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
from dataclasses import dataclass
from typing import Any

import numpy as np

from sapo_env.config import SwarmConfig
from sapo_env.defenses.packet_schema import SCHEMA_REASONS, parse_packet
from sapo_env.rollouts import group_advantages
from sapo_env.scoring.answers import get_extractor
from sapo_env.scoring.guard import no_failures
from sapo_env.scoring.jobs import Scored
from sapo_env.scoring.round_scoring import LocalScoring, Scoring, score_for_nodes
from sapo_env.tasks import DrawnQuestion, redraw, reference_answer
from sapo_env.types import Group

REJECT_REASONS = (*SCHEMA_REASONS, "unknown_task", "question", "answer", "system_prompt",
                  "scoring_timeout", "rewards", "advantages", "not_dealt", "duplicate")
# Claimed scores are float32 like the env's; advantages may come from another implementation.
_REWARD_TOLERANCE, _ADVANTAGE_TOLERANCE = 1e-6, 1e-4
# Scoring failures that leave a completion unjudged (the others are the scorer's verdict, 0).
_UNSCORED = ("timeout", "budget")


def question_key(group: Mapping[str, Any]) -> tuple:
    """Who answered which question: ``(source, task, config, seed, index)``, the config as
    canonical JSON; a second packet with the same key is a duplicate."""
    return (group["source"], *ref_key(group["ref"]))


def ref_key(ref: Mapping[str, Any]) -> tuple:
    """A question, hashable: ``(task, config, seed, index)``, the config as canonical JSON."""
    return ref["task"], _config_key(ref["config"]), ref["seed"], ref["index"]


class _Keys:
    """:func:`question_key` and :func:`ref_key` for the span of one call, each config object
    turned into JSON once (every ref of a task holds its spec's config; nothing changes a
    config while the call runs)."""

    def __init__(self) -> None:
        self._json: dict[int, tuple[Any, str]] = {}  # id -> (config, its JSON)

    def ref(self, ref: Mapping[str, Any]) -> tuple:
        config = ref["config"]
        known = self._json.get(id(config))
        if known is None or known[0] is not config:
            known = self._json[id(config)] = (config, _config_key(config))
        return ref["task"], known[1], ref["seed"], ref["index"]

    def question(self, group: Mapping[str, Any]) -> tuple:
        return (group["source"], *self.ref(group["ref"]))

    def question_or_none(self, group: Any) -> tuple | None:
        """:meth:`question`, or None for a packet too malformed to have one."""
        try:
            key = self.question(group)
            hash(key)
        except Exception:  # noqa: BLE001 (an unparsed value may raise anything)
            return None
        return key


@dataclass(frozen=True)
class _Claim:
    """A packet that passed every check but the re-scoring: what it claims, and its question
    as the ``ref`` re-derives it."""

    group: Group
    drawn: DrawnQuestion


class PacketVerifier:
    """Re-derives and re-scores packets for one swarm's tasks, answer format and prompt, on
    ``scoring`` (the env's; default: a ``LocalScoring`` of its own)."""

    def __init__(self, config: SwarmConfig, scoring: Scoring | None = None):
        self.config = config
        self._scoring = scoring if scoring is not None else LocalScoring()
        self._extract = get_extractor(config.answer_format)
        specs = list(config.tasks) + [s for tasks in (config.node_tasks or {}).values()
                                      for s in tasks]
        self._tasks = {(s.name, _config_key(s.config)) for s in specs}

    def check(self, group: Any) -> str | None:
        """The first reason (of ``REJECT_REASONS``, bar ``not_dealt`` and ``duplicate``) to
        reject ``group``, or None when it is what it claims. Any value may be passed: it is
        parsed against the packet schema first
        (:func:`sapo_env.defenses.packet_schema.parse_packet`, whose reasons ``malformed`` and
        ``oversized`` it returns). Its completions are re-scored within one node's budget."""
        claim = self._derive(group)
        if isinstance(claim, str):
            return claim
        return self._rescore([(claim.group["source"], claim)], {}, {})[0]

    def _derive(self, group: Any) -> str | _Claim:
        """Every check but the re-scoring: the first reason to reject ``group``, or it as a
        claim to re-score."""
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
        return _Claim(parsed, drawn)

    def _rescore(self, claims: Sequence[tuple[str, _Claim]], spent: dict[str, float],
                 failures: dict[str, dict[str, int]]) -> list[str | None]:
        """Each ``(sender, claim)``'s reason to reject it, or None, after re-scoring them all
        in one call, each within what is left of its sender's budget; the senders' scoring
        failures counted in ``failures``."""
        c = self.config
        results = score_for_nodes(
            [(sender, claim.drawn, claim.group["completions"]) for sender, claim in claims],
            self._extract, c.scoring_limits, self._scoring, c.scoring_budget, spent)
        verdicts = []
        for (sender, claim), result in zip(claims, results):
            counts = failures.setdefault(sender, no_failures())
            for reason, k in result.failures.items():
                counts[reason] += k
            verdicts.append(self._verdict(claim.group, result))
        return verdicts

    def _verdict(self, group: Group, result: Scored) -> str | None:
        if any(result.failures[reason] for reason in _UNSCORED):
            return "scoring_timeout"
        if not np.allclose(result.scores, group["rewards"], rtol=0.0, atol=_REWARD_TOLERANCE):
            return "rewards"
        advantages = group_advantages(result.scores, self.config.advantage_eps)
        if not np.allclose(advantages, group["advantages"], rtol=0.0,
                           atol=_ADVANTAGE_TOLERANCE):
            return "advantages"
        return None

    def screen(self, groups: Sequence[Group], trusted: Iterable[Group] = (),
               already: Iterable[Group] = (),
               dealt: Mapping[str, Iterable[Mapping[str, Any]]] | None = None, *,
               spent: dict[str, float] | None = None,
               failures: dict[str, dict[str, int]] | None = None
               ) -> tuple[list[Group], Counter]:
        """The groups that pass, in order, and the rejected ones counted by source.

        ``trusted`` groups (built by the env, unaltered; compared by identity) skip the
        re-derivation and re-scoring, and are screened first; ``already`` are groups already
        accepted (the pool), whose questions count for duplicates; ``dealt`` maps each node to
        the refs of the questions it was dealt this round (None: not checked), and any other
        group from it is ``not_dealt``. A group's source is its sender (in the env,
        :func:`sapo_env.defenses.packet_schema.admit` has refused any other), which its
        rejection and its re-scoring are charged to: ``spent`` holds the seconds each node
        has spent on scoring this round and ``failures`` its scoring failures by reason, and
        this adds to both (:func:`sapo_env.scoring.round_scoring.score_for_nodes`)."""
        reasons = self.verdicts(groups, trusted, already, dealt, spent=spent, failures=failures)
        accepted, rejected = [], Counter()
        for group, reason in zip(groups, reasons):
            if reason is None:
                accepted.append(group)
            else:
                rejected[str(_claimed_source(group))] += 1
        return accepted, rejected

    def cheap_verdicts(self, groups: Sequence[Group], trusted: Iterable[Group] = (),
                       already: Iterable[Group] = (),
                       dealt: Mapping[str, Iterable[Mapping[str, Any]]] | None = None
                       ) -> list[str | None]:
        """The checks that read nothing but a group's question (its ``source`` and ``ref``),
        with :meth:`verdicts`' arguments: each group's ``duplicate`` or ``not_dealt`` (or
        ``malformed`` for a packet with no question to read), or None for one that passes
        them. The ``trusted`` groups are screened first, and only for copies. A packet they
        refuse is refused by :meth:`verdicts` too, so a receiver may drop it before reading
        the rest of it."""
        return self._cheap_verdicts(groups, trusted, already, dealt, _Keys())

    def _cheap_verdicts(self, groups: Sequence[Group], trusted: Iterable[Group],
                        already: Iterable[Group],
                        dealt: Mapping[str, Iterable[Mapping[str, Any]]] | None, key: _Keys
                        ) -> list[str | None]:
        trusted_ids = {id(g) for g in trusted}
        if dealt is not None:
            dealt = {a: {key.ref(r) for r in refs} for a, refs in dealt.items()}
        keys = [key.question_or_none(g) for g in groups]
        seen = {key.question(g) for g in already}
        reasons: list[str | None] = [None] * len(groups)
        for k, group in enumerate(groups):  # the env's own first: only copies are looked for
            if id(group) in trusted_ids:
                reasons[k] = "duplicate" if keys[k] in seen else None
                seen.add(keys[k])
        for k, (group, key) in enumerate(zip(groups, keys)):
            if id(group) in trusted_ids:
                continue
            if key is not None and key in seen:
                reasons[k] = "duplicate"
            elif dealt is not None and (key is None or key[1:] not in dealt.get(key[0], ())):
                reasons[k] = "not_dealt" if key is not None else "malformed"
        return reasons

    def verdicts(self, groups: Sequence[Group], trusted: Iterable[Group] = (),
                 already: Iterable[Group] = (),
                 dealt: Mapping[str, Iterable[Mapping[str, Any]]] | None = None, *,
                 spent: dict[str, float] | None = None,
                 failures: dict[str, dict[str, int]] | None = None,
                 checked: bool = False) -> list[str | None]:
        """:meth:`screen`'s verdict on each group, in order: None when it passes, else the
        reason (of ``REJECT_REASONS``) it is rejected. The :meth:`cheap_verdicts` first (not
        again when ``checked``: the caller ran them with these arguments on a list these
        groups are of, and they refused none of these); the groups they pass (bar the
        ``trusted``) are re-derived and re-scored."""
        trusted = list(trusted)
        already = list(already)
        key = _Keys()
        reasons = ([None] * len(groups) if checked
                   else self._cheap_verdicts(groups, trusted, already, dealt, key))
        trusted_ids = {id(g) for g in trusted}
        if all(reason is not None or id(g) in trusted_ids
               for g, reason in zip(groups, reasons)):
            return reasons  # nothing to re-derive
        seen = {key.question(g) for g in already} | {
            key.question_or_none(g) for g in groups if id(g) in trusted_ids}
        senders = [_claimed_source(g) for g in groups]
        claims = []  # the others that pass the cheap checks, re-scored together
        for k, group in enumerate(groups):
            if reasons[k] is not None or id(group) in trusted_ids:
                continue
            if isinstance(claim := self._derive(group), str):
                reasons[k] = claim
            else:
                claims.append((k, claim))
        verdicts = self._rescore([(senders[k], claim) for k, claim in claims],
                                 {} if spent is None else spent,
                                 {} if failures is None else failures)
        for (k, _), verdict in zip(claims, verdicts):  # in order: the first true one is kept
            question = key.question_or_none(groups[k])
            reasons[k] = "duplicate" if verdict is None and question in seen else verdict
            if verdict is None:
                seen.add(question)
        return reasons


def _claimed_source(group: Any) -> Any:
    return group.get("source") if isinstance(group, Mapping) else None


def _config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True)
