"""The reasoning-gym datasets that questions come from and are scored against, and a drawn
question with what scoring it needs (``DrawnQuestion``).

A question's ``ref`` (task, config, seed, index) names one item of one dataset; the dataset and
the item are generated once and cached here, so the env, the agents re-deriving a question from
its ref and a scoring worker rebuilding it (``sapo_env.scoring.jobs``) share them. How the env
chooses seeds and indices, its question streams, is :mod:`sapo_env.tasks`.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from sapo_env.scoring.answers import AnswerExtractor
from sapo_env.scoring.guard import DEFAULT_LIMITS, ScoreBudget, ScoringLimits, guarded_scores
from sapo_env.scoring.rg_fixes import load_reasoning_gym
from sapo_env.types import Question, QuestionRef

if TYPE_CHECKING:
    from reasoning_gym.dataset import ProceduralDataset

# reasoning-gym derives item i of seed s from seed s + i, so each question stream gets its own
# block of 2**24 seeds; this bounds how many questions one stream may draw.
MAX_QUESTIONS_PER_STREAM = 2**24


def freeze(value: Any) -> Any:
    """A hashable form of a JSON-like config, for caching."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


@lru_cache(maxsize=16384)  # more than the streams of a 512-node swarm on 9 tasks
def cached_dataset(task: str, config_items: tuple, seed: int) -> ProceduralDataset:
    """The dataset of ``task`` under a frozen config (:func:`freeze`) and ``seed``."""
    # size only bounds the index; reasoning-gym generates items lazily
    return load_reasoning_gym().create_dataset(
        task, seed=seed, size=MAX_QUESTIONS_PER_STREAM, **dict(config_items)
    )


def generate(dataset: ProceduralDataset, index: int) -> dict[str, Any]:
    """One item of a dataset; some generators (bf) print to stdout, which is swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return dataset[index]


# Entries drawn lately, so that agents re-deriving a question of this round through its ref
# (demonstrators, simulated learners) look it up instead of generating it a second time, and a
# sweep that replays one seed's questions under another policy finds them. Sized for a whole
# 300-round run of 8 nodes at the paper's B=8 (19,200 entries), and so for one round of a
# 4,000-node swarm.
@lru_cache(maxsize=32768)
def cached_entry(task: str, config_items: tuple, seed: int, index: int) -> dict[str, Any]:
    """Item ``index`` of :func:`cached_dataset`'s dataset (:func:`generate`)."""
    return generate(cached_dataset(task, config_items, seed), index)


def dataset_for(ref: QuestionRef) -> ProceduralDataset:
    """The (cached) reasoning-gym dataset a ref points into."""
    return cached_dataset(ref["task"], freeze(ref["config"]), int(ref["seed"]))


def resolve(ref: QuestionRef) -> dict[str, Any]:
    """Re-derive the reasoning-gym entry (question, answer, metadata) a ref points to.

    The entry may be shared with the env (it scores with it): read it, do not modify it.
    """
    return cached_entry(ref["task"], freeze(ref["config"]), int(ref["seed"]), int(ref["index"]))


@dataclass
class DrawnQuestion:
    """A question handed to a node, with what the env needs to score it."""

    question: Question
    entry: dict[str, Any]
    dataset: ProceduralDataset

    def score(self, completions: Sequence[str], extract: AnswerExtractor,
              limits: ScoringLimits = DEFAULT_LIMITS,
              failures: dict[str, int] | None = None,
              budget: ScoreBudget | None = None) -> np.ndarray:
        """reasoning-gym scores of completions after answer extraction, float32 in [0, 1].

        Completions are untrusted: one whose extraction or scoring fails, runs past the time
        limit, whose answer is over the size limit or that its node's ``budget`` no longer
        covers scores 0 and is counted by reason in ``failures`` (``sapo_env.scoring.guard``)."""
        scores = guarded_scores(completions, extract,
                                lambda answer: self.dataset.score_answer(answer, self.entry),
                                limits, failures, budget)
        return scores.clip(0.0, 1.0, out=scores)
