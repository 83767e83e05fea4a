"""What is measured each round, as pure functions of a node's questions and completions.

Three numbers separate the format from the arithmetic:

- *strict reward*: the env's reward, the mean verifier score with the ``<answer>`` tag required
  (reasoning-gym's own extractor and scorer);
- *tag use*: the fraction of completions holding a well-formed ``<answer>...</answer>`` pair
  (the one the strict extractor reads), right or wrong;
- *lenient accuracy*: the mean score when the answer is read leniently (the tag if there is
  one, else a final "answer is X", else the last line:
  ``sapo_env.scoring.answers.extract_lenient``),
  scored by the task's own scorer. A node can be right without the tag.

Example::

    >>> from sapo_experiments.format_propagation.metrics import tag_use
    >>> tag_use([("<answer>7</answer>", "The answer is 7."), ("7", "<answer></answer>")])
    0.5
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sapo_env.rollouts import has_zero_advantage
from sapo_env.scoring.answers import extract_lenient, extract_tag
from sapo_env.tasks import DrawnQuestion, dataset_for, resolve, score_completions
from sapo_env.types import Group, Question

#: ``GRPOAgent.learn`` metrics kept per round and node (NaN for the demonstrator)
LEARN_KEYS = ("loss", "clip_fraction", "grad_norm", "tokens", "truncated", "groups",
              "skipped_groups", "seconds")


def has_tag(completion: str) -> bool:
    """Whether the completion holds a well-formed, non-empty ``<answer>`` tag pair."""
    answer = extract_tag(completion)
    return answer is not None and answer.strip() != ""


def tag_use(completions: Sequence[Sequence[str]]) -> float:
    """Fraction of a node's completions (one tuple per question) that use the tag."""
    texts = [c for group in completions for c in group]
    return sum(map(has_tag, texts)) / len(texts) if texts else float("nan")


def lenient_scores(question: Question, completions: Sequence[str]) -> np.ndarray:
    """The task's scores of the completions when answers are read leniently."""
    ref = question["ref"]
    drawn = DrawnQuestion(question, resolve(ref), dataset_for(ref))
    return score_completions(drawn, completions, extract_lenient)


def lenient_accuracy(questions: Sequence[Question],
                     completions: Sequence[Sequence[str]]) -> float:
    """Mean lenient score over a node's completions of a round."""
    scores = [lenient_scores(q, group) for q, group in zip(questions, completions)]
    return float(np.concatenate(scores).mean()) if scores else float("nan")


def informative_groups(batch: Sequence[Group]) -> tuple[int, int]:
    """(local, external) groups of a training set whose advantages are not all zero: the
    groups that carry gradient."""
    local = external = 0
    for group in batch:
        if not has_zero_advantage(group["rewards"]):
            if group.get("local", True):
                local += 1
            else:
                external += 1
    return local, external


def round_metrics(questions: Sequence[Question], action: Mapping[str, Any], reward: float,
                  batch: Sequence[Group], learned: Mapping[str, float]) -> dict[str, float]:
    """Everything recorded for one node in one round."""
    completions = action["completions"]
    local, external = informative_groups(batch)
    values = {"reward": float(reward), "tag_use": tag_use(completions),
              "lenient_accuracy": lenient_accuracy(questions, completions),
              "informative_local": float(local), "informative_external": float(external)}
    values |= {f"learn_{k}": float(learned.get(k, np.nan)) for k in LEARN_KEYS}
    return values


METRICS = ("reward", "tag_use", "lenient_accuracy", "informative_local",
           "informative_external", *(f"learn_{k}" for k in LEARN_KEYS))
"""The per-round, per-node arrays a run saves (the keys of ``round_metrics``)."""
