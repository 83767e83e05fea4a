"""The data that crosses the environment boundary, as typed dictionaries.

Observations, actions and groups are plain ``dict``/``tuple``/``numpy`` values (Gymnasium's
``Dict`` and ``Sequence`` spaces require exactly those types); these ``TypedDict`` classes
document their keys for readers and type checkers.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
from typing_extensions import NotRequired


class QuestionRef(TypedDict):
    """Enough to re-derive a question and its answer with reasoning-gym alone.

    ``reasoning_gym.create_dataset(task, seed=seed, size=index + 1, **config)[index]``
    """

    task: str
    config: dict[str, Any]
    seed: int
    index: int


class Question(TypedDict):
    """One question of a node's batch for the round."""

    id: str  #: stable identity of the question: ``"{task}/{seed}/{index}"``
    task: str  #: reasoning-gym task name
    prompt: str  #: the question text (the user turn; the system prompt is separate)
    ref: QuestionRef


class Group(TypedDict):
    """One rollout: a question with its L completions, scored by the env's verifier."""

    id: str  #: ``"{source}/r{round}/q{k}"``
    source: str  #: node that generated the completions
    round: int  #: round in which they were generated
    task: str
    question: str  #: the prompt text the completions answer
    answer: str  #: reference answer (an example of a correct one where the scorer checks validity)
    ref: QuestionRef
    completions: tuple[str, ...]
    rewards: np.ndarray  #: float32, shape (L,), verifier scores in [0, 1]
    advantages: np.ndarray  #: float32, shape (L,), group-relative advantages
    local: NotRequired[bool]  #: only inside ``batch``: True for the node's own groups


class Observation(TypedDict):
    round: int
    system_prompt: str
    completions_per_question: int  #: L, completions expected per question
    train_budget: int  #: I + J, groups in each training set (the most J can be)
    questions: tuple[Question, ...]
    pool: tuple[Group, ...]  #: groups from other nodes now in the shared pool
    batch: tuple[Group, ...]  #: training set assembled for this node at the last step


class Action(TypedDict):
    completions: tuple[tuple[str, ...], ...]  #: B tuples of L strings, in question order
    num_external: int  #: J, external groups wanted in the next training set
    share: NotRequired[Any]  #: length-B 0/1 sequence: which groups to publish (default all)
