"""Scoring a round's completions: in the env's process (the default) or spread over Ray workers.

At n = 512 a round is 16,384 completions (their verifier work on one core: BENCHMARKS.md, "Ray
nodes"). ``parallel_env(n=512, scoring=RayScoring(workers=2))`` scores them in Ray tasks instead
(call ``ray.init()`` first): the questions go to the workers as their refs and reasoning-gym
entries, each worker rebuilds the same datasets (cached) and scores with the same guarded, safe
scorers, so the scores and failure counts are the ones the env computes in process (the tests check
it). Per-completion time limits hold in a worker too when Ray runs the task in the worker's main
thread (its default); otherwise the guard warns and scores without one
(``sapo_env.scoring.guard``). A ``Scoring`` is a run-time resource, not a setting: it is an
argument of the env, not a ``SwarmConfig`` field, and a state or checkpoint does not hold it.

Everything a node's round costs to score goes through one ``Scoring`` and one budget
(``score_for_nodes``): its own completions (``score_round``), then the packets it sent, which
receivers re-score (:mod:`sapo_env.defenses.packets`) with what is left of its budget.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from sapo_env.extras import require
from sapo_env.scoring.answers import AnswerExtractor
from sapo_env.scoring.datasets import DrawnQuestion
from sapo_env.scoring.guard import ScoringLimits, no_failures, timer_works
from sapo_env.scoring.jobs import Scored, as_jobs, score_all, score_jobs
from sapo_env.scoring.process_scoring import ProcessScoring

logger = logging.getLogger(__name__)


class Scoring(Protocol):
    """Scores many questions' completions; one ``Scored`` per question, in order.
    ``owners[k]`` is the index of the node question ``k`` belongs to, whose scoring budget
    (``budgets[owners[k]]`` seconds; ``budgets`` None: no budget) all its questions share."""

    def score(self, drawn: Sequence[DrawnQuestion], completions: Sequence[Sequence[str]],
              extract: AnswerExtractor, limits: ScoringLimits, owners: Sequence[int],
              budgets: Sequence[float] | None) -> list[Scored]: ...

    def close(self) -> None:
        """Release what it holds (processes); it can still score after."""


class LocalScoring:
    """In the env's process, one question after another (the default); where the time limits
    cannot be enforced in the calling thread (``scoring_guard.timer_works``: another thread,
    another interval timer running), in a child process that is killed when a node overruns
    its budget (``sapo_env.scoring.process_scoring``), with the same scores."""

    def __init__(self) -> None:
        self.isolated = ProcessScoring()

    def score(self, drawn, completions, extract, limits, owners, budgets):
        limited = limits.time_limit is not None or budgets is not None
        if limited and not timer_works():
            if not self.isolated.used:
                logger.warning("scoring in a child process: the time limits need the main "
                               "thread's interval timer, which is not available here")
            return self.isolated.score(drawn, completions, extract, limits, owners, budgets)
        jobs = [(d, texts, owner) for d, texts, owner in zip(drawn, completions, owners)]
        return score_all(jobs, extract, limits, budgets)

    def close(self) -> None:
        self.isolated.close()


class RayScoring:
    """Spread over ``workers`` Ray tasks of ``num_cpus`` each, in contiguous chunks."""

    def __init__(self, workers: int = 2, num_cpus: float = 1):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        self.workers = workers
        self.num_cpus = num_cpus
        self._task: Any = None

    def score(self, drawn, completions, extract, limits, owners, budgets):
        ray = require("ray", "RayScoring")
        if not ray.is_initialized():
            raise RuntimeError("RayScoring needs Ray: call ray.init() before stepping the env")
        if self._task is None:
            self._task = ray.remote(num_cpus=self.num_cpus)(score_jobs)
        jobs = as_jobs(drawn, completions, owners)
        bounds = np.linspace(0, len(jobs), min(self.workers, len(jobs)) + 1).astype(int)
        parts = [self._task.remote(jobs[a:b], extract, limits, budgets)
                 for a, b in zip(bounds[:-1], bounds[1:])]
        return [result for part in ray.get(parts) for result in part]

    def close(self) -> None:
        """Nothing to release: Ray owns its workers."""


def score_for_nodes(items: Sequence[tuple[str, DrawnQuestion, Sequence[str]]],
                    extract: AnswerExtractor, limits: ScoringLimits, scoring: Scoring,
                    node_budget: float | None, spent: dict[str, float] | None = None
                    ) -> list[Scored]:
    """Each ``(node, question, completions)``'s verdict, in order, scored by ``scoring``; a
    node's completions within ``node_budget`` seconds (None: no budget) less what ``spent``
    says it spent earlier in the round, and the seconds of this call added to ``spent``."""
    if not items:
        return []
    spent = {} if spent is None else spent
    nodes = list(dict.fromkeys(node for node, _, _ in items))
    index = {node: k for k, node in enumerate(nodes)}
    budgets = (None if node_budget is None
               else [node_budget - spent.get(node, 0.0) for node in nodes])
    results = scoring.score([d for _, d, _ in items], [texts for _, _, texts in items], extract,
                            limits, [index[node] for node, _, _ in items], budgets)
    for (node, _, _), result in zip(items, results):
        spent[node] = spent.get(node, 0.0) + result.seconds
    return results


def score_round(drawn: Mapping[str, Sequence[DrawnQuestion]],
                completions: Mapping[str, Sequence[Sequence[str]]], extract: AnswerExtractor,
                limits: ScoringLimits, L: int, scoring: Scoring,
                node_budget: float | None = None, spent: dict[str, float] | None = None,
                unanswered: Unanswered | None = None
                ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, int]]]:
    """Per node of ``completions``: its (questions, L) scores and its scoring failures, each
    node's completions scored within ``node_budget`` seconds (None: no budget; ``spent``: as
    in ``score_for_nodes``); with ``unanswered``, each node's completions from which no
    answer could be extracted are counted there (``Unanswered.record``)."""
    nodes = list(completions)
    results = score_for_nodes([(a, d, texts) for a in nodes
                               for d, texts in zip(drawn[a], completions[a])],
                              extract, limits, scoring, node_budget, spent)
    scores, failures, no_answer, row = {}, {}, {}, 0
    for a in nodes:
        mine = results[row:row + len(drawn[a])]
        row += len(drawn[a])
        scores[a] = np.array([r.scores for r in mine], dtype=np.float32).reshape(len(mine), L)
        failures[a] = no_failures()
        for r in mine:
            for reason, k in r.failures.items():
                failures[a][reason] += k
        no_answer[a] = sum(r.no_answer for r in mine)
    if unanswered is not None:
        unanswered.record(no_answer, sum(s.size for s in scores.values()))
    return scores, failures


class Unanswered:
    """Per node, how many of its completions in the last round scored had no answer that could
    be extracted (``by_node``: they score 0 and are not scoring failures), and a logged warning,
    once per ``Unanswered`` (one per env), the first time a whole round has none extractable:
    a model that answers right but without the ``<answer>`` tag scores 0 on every completion
    under ``answer_format="tag"``, and nothing else would say why."""

    def __init__(self, answer_format: object = "tag") -> None:
        self.answer_format = answer_format
        self.by_node: dict[str, int] = {}
        self.warned = False

    def record(self, by_node: Mapping[str, int], completions: int) -> None:
        """This round's counts; a warning if they cover all its ``completions`` (> 0) and
        none was given before."""
        self.by_node = dict(by_node)
        if self.warned or completions == 0 or sum(by_node.values()) < completions:
            return
        self.warned = True
        logger.warning(
            "no answer could be extracted from any of this round's %d completions "
            "(answer_format=%r), so every one scored 0. The \"tag\" format (the default) "
            "reads only <answer>...</answer>; answer_format=\"lenient\" also reads \"The "
            "answer is X\" or the last line. infos[node]['no_answer'] counts them each round.",
            completions, self.answer_format)
