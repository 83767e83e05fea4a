"""Hostile nodes on the wire: the packets a node that builds its own could send.

In this env a node's action carries only text (completions, which groups to share, its next
J): the env draws the questions, scores every completion and builds the published groups, so
in-process a node can forge nothing but text. In a real decentralized swarm a node builds and
sends its own packets (question, answer, ref, completions, rewards, advantages), and the
paper's reference code trusted them. ``SwarmConfig.adversaries`` models that machine: the
groups a named node publishes are rewritten as it would send them, after the env built them
and before they enter the pool, so every receiver gets the forged packet
(``SwarmConfig.verify_packets`` is the defense, :mod:`sapo_env.packets`).

Attacks (``TRANSPORT_ATTACKS``):

``forge_rewards``
    wrong answers presented as right: every claimed reward is inverted (1 - the verifier's
    score) and the advantages recomputed from the claims, so a receiver that trusts the packet
    reinforces what the verifier rejected and penalises what it accepted. Question, answer and
    ref stay true. A group the verifier scored all equal stays all equal (no signal either way).
``forge_metadata``
    a self-consistent lie: ``answer`` becomes the most common wrong answer among the group's
    completions (as the swarm's answer format reads them), and rewards and advantages are
    recomputed as an exact match against it. A receiver that re-scores against the packet's
    own ``answer`` accepts it; one that re-derives the answer from ``ref`` does not. With no
    wrong answer to claim, the answer is altered anyway and every claimed reward is 0 (a group
    with no signal). Forged ``ref`` and ``question`` fields meet the same check; the tests
    forge each field by hand.
``duplicate_spam``
    every group is published ``SPAM_COPIES`` times, the copies under new ids
    (``node_3/r12/q0/copy1`` ...): the spammer floods the pool, so receivers draw its groups
    instead of the others'.

What a transport adversary cannot do here: choose its questions (the env draws them),
publish under another node's name, or change what it trains on itself. Attacks that need no
transport (garbage text, confident wrong answers, free riding, poisoned completions) are
agents: :mod:`agents.adversarial`.

Example::

    >>> import sapo_env
    >>> from sapo_env.adversaries import assign
    >>> assign(10, 0.3, "forge_rewards")                   # the last 30% of 10 nodes
    {'node_7': 'forge_rewards', 'node_8': 'forge_rewards', 'node_9': 'forge_rewards'}
    >>> env = sapo_env.parallel_env(n=10, adversaries=assign(10, 0.3, "forge_rewards"))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from sapo_env.answers import AnswerExtractor
from sapo_env.rollouts import group_advantages
from sapo_env.types import Group

TransportAttack = Literal["forge_rewards", "forge_metadata", "duplicate_spam"]
SPAM_COPIES = 8
"""Times ``duplicate_spam`` publishes each group (the original and 7 copies): at 30% spammers
among 10 nodes, about three quarters of the pool."""


def check_adversaries(adversaries: Any, names: Sequence[str]) -> dict[str, str] | None:
    """``SwarmConfig.adversaries`` validated: known nodes, known transport attacks."""
    if adversaries is None:
        return None
    if not isinstance(adversaries, Mapping):
        raise ValueError(f"adversaries must be a mapping node -> attack, got {adversaries!r}")
    unknown = sorted(set(adversaries) - set(names), key=str)
    attacks = sorted(set(map(str, adversaries.values())) - set(TRANSPORT_ATTACKS))
    if unknown or attacks:
        raise ValueError(f"adversaries: unknown nodes {unknown} (expected node_0..node_"
                         f"{len(names) - 1}) or attacks {attacks} (expected one of "
                         f"{sorted(TRANSPORT_ATTACKS)})")
    return dict(adversaries)


def adversary_nodes(nodes: int | Sequence[str], fraction: float) -> list[str]:
    """The nodes a fraction of a swarm makes adversarial: the last ``round(fraction * n)`` of
    ``nodes`` (a count, for ``node_0 …``, or the names), so honest nodes keep the low names."""
    names = [f"node_{i}" for i in range(nodes)] if isinstance(nodes, int) else list(nodes)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction of adversaries must be a number in [0, 1], got {fraction!r}")
    count = int(round(fraction * len(names)))
    return names[len(names) - count:] if count else []


def assign(nodes: int | Sequence[str], fraction: float, attack: TransportAttack
           ) -> dict[str, TransportAttack]:
    """``SwarmConfig.adversaries`` for a fraction of the nodes (see :func:`adversary_nodes`)."""
    if attack not in TRANSPORT_ATTACKS:
        raise ValueError(f"attack must be one of {sorted(TRANSPORT_ATTACKS)}, got {attack!r}")
    return {name: attack for name in adversary_nodes(nodes, fraction)}


def _claimed(group: Group, rewards: np.ndarray, eps: float, **changes) -> Group:
    rewards = np.asarray(rewards, dtype=np.float32)
    advantages = group_advantages(rewards, eps)
    rewards.flags.writeable = False
    advantages.flags.writeable = False
    return {**group, **changes, "rewards": rewards, "advantages": advantages}


def forge_rewards(group: Group, extract: AnswerExtractor, eps: float) -> list[Group]:
    """The group with inverted rewards (see the module docstring)."""
    return [_claimed(group, 1.0 - group["rewards"], eps)]


def forge_metadata(group: Group, extract: AnswerExtractor, eps: float) -> list[Group]:
    """The group claiming one of its wrong answers as the reference (see the module
    docstring)."""
    answers = [extract(c) for c in group["completions"]]
    wrong = Counter(a for a, r in zip(answers, group["rewards"].tolist())
                    if a is not None and r < 1.0 and a != group["answer"])
    if wrong:
        forged = wrong.most_common(1)[0][0]
    else:
        forged = f"{group['answer']} (corrected)"
    claimed = [1.0 if a == forged else 0.0 for a in answers]
    return [_claimed(group, claimed, eps, answer=forged)]


def duplicate_spam(group: Group, extract: AnswerExtractor, eps: float) -> list[Group]:
    """The group and ``SPAM_COPIES - 1`` copies under new ids."""
    return [group] + [{**group, "id": f"{group['id']}/copy{k}"} for k in range(1, SPAM_COPIES)]


TRANSPORT_ATTACKS: dict[str, Callable[[Group, AnswerExtractor, float], list[Group]]] = {
    "forge_rewards": forge_rewards,
    "forge_metadata": forge_metadata,
    "duplicate_spam": duplicate_spam,
}


def tamper(groups: Sequence[Group], adversaries: Mapping[str, str] | None,
           extract: AnswerExtractor, eps: float) -> list[Group]:
    """The packets as sent: the adversaries' groups rewritten by their attack, in publication
    order (a spammer's copies follow their original); everyone else's groups unchanged, the
    same objects."""
    if not adversaries:
        return list(groups)
    sent: list[Group] = []
    for group in groups:
        attack = adversaries.get(group["source"])
        sent.extend(TRANSPORT_ATTACKS[attack](group, extract, eps) if attack else [group])
    return sent
