"""Rescue of all-fail groups by peers' groups on the same question, and complementarity.

A node's own group in which every completion failed carries no gradient under GRPO (its
advantages are all zero). When nodes answer the same questions (``SwarmConfig.shared_questions``),
another node may have solved that question: its group on the same question, with some but not
all completions right, shows the node what a right answer looks like on a prompt it could not
answer, with advantages computed in the sender's own group. ``SwarmConfig.rescue`` puts such
groups (*rescue candidates*) in the node's training set in place of its all-fail group; the
agent then decides how much each counts (``agents.GRPOConfig.rescue_gate``).

This is GRAFT's targeted exchange (arXiv 2609.37868) as an env option (the reading of GRAFT it
rests on: docs/provenance.md, "GRAFT"). A completion *succeeds* when its score is 1
(reasoning-gym's full credit; partial credit such as 0.5 for a right number in another form is not
a success); a group *all-failed* when none of its completions succeeded; a candidate is another
node's group on the same question (same ``ref``: task, seed and index) with ``1 <= k < L``
successes. The rest of GRAFT (which candidate, the compatibility gate, training peer data last) is
the agent's.

*Complementarity* is the diagnostic GRAFT reports beside its gain: of a node's all-fail
questions this round, the share that some other node solved (at least one success in its
group on that question, shared or not). It is 0 when nodes never answer the same question.

All functions are pure; the env calls them once per round.

Example::

    >>> import numpy as np
    >>> from sapo_env.rescue import all_failed, successes
    >>> successes({"rewards": np.array([1.0, 0.5, 0.0], dtype=np.float32)})
    1
    >>> all_failed({"rewards": np.array([0.5, 0.0, 0.0], dtype=np.float32)})
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sapo_env.types import Group

SUCCESS = 1.0
"""The score at or above which a completion counts as a success (reasoning-gym's full credit)."""

QuestionKey = tuple[str, int, int]


def question_key(group: Mapping[str, Any]) -> QuestionKey:
    """The identity of a group's question: its ref's task, seed and index."""
    ref = group["ref"]
    return (str(ref["task"]), int(ref["seed"]), int(ref["index"]))


def successes(group: Mapping[str, Any]) -> int:
    """How many of the group's completions succeeded (scored at least ``SUCCESS``)."""
    return int((np.asarray(group["rewards"]) >= SUCCESS).sum())


def success_counts(rewards: np.ndarray) -> np.ndarray:
    """:func:`successes` of many groups at once: ``rewards`` holds one group's rewards per row
    (shape ``(groups, L)``), and the result one count per row (int)."""
    return (np.asarray(rewards) >= SUCCESS).sum(axis=-1)


def all_failed(group: Mapping[str, Any]) -> bool:
    """True when none of the group's completions succeeded."""
    return successes(group) == 0


def is_candidate(group: Mapping[str, Any]) -> bool:
    """True when the group has ``1 <= k < L`` successes: some right answers, and advantages
    that are not all zero."""
    return 0 < successes(group) < len(group["rewards"])


def solved_questions(groups: Sequence[Group], counts: Sequence[int] | None = None
                     ) -> dict[QuestionKey, set[str]]:
    """For every question some group of ``groups`` solved (at least one success), the nodes
    that solved it; ``counts``: each group's :func:`successes`, if known (None: counted here)."""
    solved: dict[QuestionKey, set[str]] = {}
    for g, count in zip(groups, map(successes, groups) if counts is None else counts):
        if count:
            solved.setdefault(question_key(g), set()).add(g["source"])
    return solved


def complementarity(node: str, own: Sequence[Group],
                    solved: Mapping[QuestionKey, set[str]],
                    counts: Sequence[int] | None = None) -> float | None:
    """Of ``node``'s all-fail groups in ``own``, the share whose question another node solved
    (``solved``: :func:`solved_questions` of the round's groups); None when none all-failed.
    ``counts``: each group of ``own``'s :func:`successes`, if known (None: counted here)."""
    counts = map(successes, own) if counts is None else counts
    failed = [question_key(g) for g, count in zip(own, counts) if count == 0]
    if not failed:
        return None
    return sum(bool(solved.get(q, set()) - {node}) for q in failed) / len(failed)


CandidateIndex = Mapping[QuestionKey, Sequence[Group]]


def candidate_index(pool: Sequence[Group]) -> dict[QuestionKey, list[Group]]:
    """The groups of ``pool`` that can rescue another node (:func:`is_candidate`) by question,
    in pool order: built once a round, so that finding a group's candidates does not scan the
    pool."""
    index: dict[QuestionKey, list[Group]] = {}
    for g in pool:
        if is_candidate(g):
            index.setdefault(question_key(g), []).append(g)
    return index


def rescue_candidates(node: str, group: Group, index: CandidateIndex) -> list[Group]:
    """The groups that can rescue ``node``'s ``group`` (``index``: :func:`candidate_index` of
    the pool): another node's groups on the same question with ``1 <= k < L`` successes, in
    pool order."""
    return [g for g in index.get(question_key(group), ()) if g["source"] != node]


def choose_candidates(candidates: Sequence[Group], k: int | None,
                      rng: np.random.Generator) -> list[Group]:
    """At most ``k`` of ``candidates`` (None: all), drawn uniformly without replacement, in
    their order. ``rng`` is drawn from only when there are more than ``k``."""
    if k is None or len(candidates) <= k:
        return list(candidates)
    chosen = np.sort(rng.choice(len(candidates), size=k, replace=False))
    return [candidates[i] for i in chosen]


def rescue_batch(node: str, batch: Sequence[Group], index: CandidateIndex, k: int | None,
                 rng: np.random.Generator) -> tuple[tuple[Group, ...], int]:
    """``batch`` (a training set: own groups marked ``local``) with each own all-fail group
    that has candidates in ``index`` (:func:`rescue_candidates`, less groups already in the
    batch) replaced by at most ``k`` of them (:func:`choose_candidates`), copied and marked
    ``local=False, rescue=True``; and how many own groups were replaced. Order: the own
    groups kept, the rescue groups, then the batch's external groups."""
    taken = {g["id"] for g in batch if not g["local"]}
    kept: list[Group] = []
    rescue: list[Group] = []
    for group in (g for g in batch if g["local"]):
        found = ([c for c in rescue_candidates(node, group, index) if c["id"] not in taken]
                 if all_failed(group) else [])
        chosen = choose_candidates(found, k, rng)
        if not chosen:
            kept.append(group)
            continue
        taken.update(c["id"] for c in chosen)
        rescue.extend({**c, "local": False, "rescue": True} for c in chosen)
    external = [g for g in batch if not g["local"]]
    return (*kept, *rescue, *external), len(batch) - len(external) - len(kept)
