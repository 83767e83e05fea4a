"""Source reputation: how much of what a node publishes is worth training on.

``external_sampling="reputation"`` draws external groups with probability proportional to
their source's reputation, a number in [0, 1]:

    reputation(s) = useful(s) / published(s)

where ``published`` counts the source's groups in the pool plus those rejected this round
(``verify_packets``), and ``useful`` those in the pool that pass the training filter and are
the first for their question (a copy of a question the source already published is worth
nothing, and is never drawn). So a source that spams copies, has its packets rejected or
publishes groups with no signal (garbage, all-wrong answers) is drawn less, in proportion; a
source with nothing in the pool and nothing rejected has no reputation to use.

It reads only proven records: a rejection is charged to the node the transport got the packet
from, never to the name the packet claims, and every pooled group's ``source`` is its sender
(:func:`sapo_env.defenses.packet_schema.admit` refuses a packet that claims another's name), so
no node can lower another's reputation by sending junk, forgeries or copies in its name (the
``framing`` and ``impersonation`` attacks, :mod:`sapo_env.defenses.transport_attacks`).

It is a pure function of what the pool holds and of the round's rejection counts, so it needs
no state of its own (a checkpoint of the env restores it). Its memory is the pool's: a
rejected group never enters the pool, so it counts only in the round it is rejected, and with
``pool_window`` > 1 a source's older accepted groups still count after its older rejections
are forgotten. What it cannot see: forged rewards when ``verify_packets`` is off (a forged
group looks as useful as a true one), and poisoned completions, which are correct.

Example::

    >>> import numpy as np
    >>> from sapo_env.defenses.reputation import source_reputation
    >>> def group(source, index, rewards):
    ...     ref = {"task": "t", "config": {}, "seed": 0, "index": index}
    ...     return {"source": source, "ref": ref, "rewards": np.array(rewards)}
    >>> pool = [group("a", 0, [0, 1]), group("a", 1, [0, 0]), group("b", 2, [1, 0])]
    >>> source_reputation(pool, [True, False, True], {"b": 1})   # b: 1 useful of 2 sent
    {'a': 0.5, 'b': 0.5}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from sapo_env.defenses.packets import question_key
from sapo_env.types import Group


def source_reputation(groups: Sequence[Group], passes_filter: Sequence[bool],
                      rejected: Mapping[str, int]) -> dict[str, float]:
    """Reputation of every source with groups in the pool or rejected this round (see the
    module docstring); ``passes_filter[i]`` says whether ``groups[i]`` passed the filter and
    ``rejected`` counts the round's rejected packets by the node that sent them."""
    published: Counter = Counter(rejected)
    useful: Counter = Counter()
    seen = set()
    for group, keep in zip(groups, passes_filter):
        published[group["source"]] += 1
        key = question_key(group)
        if keep and key not in seen:
            useful[group["source"]] += 1
        seen.add(key)
    return {s: useful[s] / n for s, n in sorted(published.items()) if n}


def group_weights(candidates: Sequence[Group], reputation: Mapping[str, float]) -> np.ndarray:
    """Each candidate's sampling weight: its source's reputation, or 0 for a copy of a question
    its source published earlier in ``candidates`` (the first is the one kept)."""
    weights = np.empty(len(candidates))
    seen = set()
    for i, group in enumerate(candidates):
        key = question_key(group)
        weights[i] = 0.0 if key in seen else reputation.get(group["source"], 0.0)
        seen.add(key)
    return weights
