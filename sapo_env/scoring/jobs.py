"""Questions to score, as they are scored in this process (``score_all``) or travel to another
one, a child process or a Ray worker, and are scored there (``as_jobs``, ``score_jobs``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from sapo_env.scoring.answers import AnswerExtractor
from sapo_env.scoring.datasets import DrawnQuestion, dataset_for
from sapo_env.scoring.guard import ScoreBudget, ScoringLimits, no_failures, timer_session

#: One question to score, as it travels to a worker: (ref, reasoning-gym entry, completions,
#: the index of the node whose completions they are).
Job = tuple[Mapping[str, Any], Mapping[str, Any], Sequence[str], int]


class Scored(NamedTuple):
    """One question's verdict."""

    scores: np.ndarray  #: float32, one per completion
    failures: dict[str, int]  #: its completions' scoring failures by reason
    seconds: float  #: what scoring it took: what it cost its node's budget
    no_answer: int = 0  #: its completions from which the extractor read no answer (None)


class _CountingExtractor:
    """``extract``, counting the completions it read no answer from (it returned None)."""

    def __init__(self, extract: AnswerExtractor) -> None:
        self.extract = extract
        self.none = 0

    def __call__(self, completion: str) -> str | None:
        answer = self.extract(completion)
        self.none += answer is None
        return answer


def score_all(jobs: Sequence[tuple[DrawnQuestion, Sequence[str], int]],
              extract: AnswerExtractor, limits: ScoringLimits,
              budgets: Sequence[float] | None) -> list[Scored]:
    """Each question's verdict, in order; the questions of node ``k`` (the job's last item)
    share its budget, ``budgets[k]`` seconds (None: no budget). A completion counts in
    ``no_answer`` when the extractor returned None for it (an extractor that raised counts
    as a scoring failure instead, and a completion the budget no longer covers in neither)."""
    left: dict[int, ScoreBudget] = {}
    results = []
    with timer_session(limits):  # the time limit's timer set once for all the questions
        for drawn, texts, owner in jobs:
            failures = no_failures()
            budget = None if budgets is None else left.setdefault(owner,
                                                                  ScoreBudget(budgets[owner]))
            counting = _CountingExtractor(extract)
            started = time.monotonic()
            scores = drawn.score(texts, counting, limits, failures, budget)
            results.append(Scored(scores, failures, time.monotonic() - started, counting.none))
    return results


def as_jobs(drawn: Sequence[DrawnQuestion], completions: Sequence[Sequence[str]],
            owners: Sequence[int]) -> list[Job]:
    """The questions to score as they travel to another process (``score_jobs`` reads them)."""
    return [(d.question["ref"], d.entry, tuple(t), owner)
            for d, t, owner in zip(drawn, completions, owners)]


def score_jobs(jobs: Sequence[Job], extract: AnswerExtractor, limits: ScoringLimits,
               budgets: Sequence[float] | None = None) -> list[Scored]:
    """What a worker runs: each job's question rebuilt from its ref and entry, then scored
    (a node's questions split over several workers get its budget in each)."""
    return score_all([(DrawnQuestion(question=None, entry=dict(entry), dataset=dataset_for(ref)),
                       texts, owner) for ref, entry, texts, owner in jobs],
                     extract, limits, budgets)
