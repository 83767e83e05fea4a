"""Gymnasium spaces of the swarm: a node's observation and action.

Two spaces of our own, because a language model may print any character:

- ``UnicodeText`` is a ``gymnasium.spaces.Text`` that contains *every* Unicode string within
  its length bounds (Gymnasium's ``Text`` only contains strings over a fixed charset). It samples
  short strings over a mixed alphabet (ASCII, the propositional-logic symbols, CJK, emoji):
  random text is a valid action that simply scores 0.
- ``JSONObject`` contains any JSON-serialisable ``dict`` (a task's reasoning-gym config).

A group's space (``GroupSpace``) also admits the optional per-token fields a sender may add
(``logprobs``, ``token_ids``: :mod:`sapo_env.sender_logprobs`) and, in a training set, the
``rescue`` mark (:mod:`sapo_env.rescue`), which no sampled observation holds.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig
from sapo_env.pool_view import PoolView
from sapo_env.sender_logprobs import TOKEN_ID_LIMIT, max_completion_tokens
from sapo_env.types import action_mask

# Characters random text is drawn from: what models print, including outside ASCII.
SAMPLE_CHARSET = (
    string.ascii_letters + string.digits + string.punctuation + " \n\t"
    + "¬∧∨→↔⊕∀∃≠≤≥×÷π√∞αβγ"  # logic and maths symbols (propositional_logic uses the first five)
    + "数学答案问题"  # CJK
    + "🙂🚀🤖✅❌"  # emoji, outside the Basic Multilingual Plane
)
# Bound on text we do not control the length of (questions, prompts, answers).
MAX_TEXT = 1 << 20
# Random completions are kept short: long random text tests nothing more and costs time.
SAMPLE_COMPLETION_CHARS = 64


class UnicodeText(spaces.Text):
    """Any ``str`` of ``min_length``..``max_length`` characters, whatever the characters."""

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        sample_max_length: int | None = None,
        seed: int | np.random.Generator | None = None,
    ):
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)
        self.sample_max_length = min(max_length, sample_max_length or max_length)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
        picks = self.np_random.integers(0, len(self.character_list), size=length)
        return "".join(self.character_list[i] for i in picks)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


class JSONObject(spaces.Space):
    """Any JSON-serialisable ``dict``."""

    def __init__(self, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict):
            return False
        try:
            json.dumps(x)
        except (TypeError, ValueError):
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> dict:
        return {}

    def __repr__(self) -> str:
        return "JSONObject()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, JSONObject)


def _text(max_length: int = MAX_TEXT) -> UnicodeText:
    return UnicodeText(max_length, sample_max_length=32)


def ref_space() -> spaces.Dict:
    return spaces.Dict(
        {
            "task": _text(),
            "config": JSONObject(),
            "seed": spaces.Discrete(2**62),
            "index": spaces.Discrete(MAX_QUESTIONS_PER_STREAM),
        }
    )


def question_space() -> spaces.Dict:
    return spaces.Dict({"id": _text(), "task": _text(), "prompt": _text(), "ref": ref_space()})


class PerTokenArrays(spaces.Space):
    """A tuple of ``completions`` 1-d arrays of at most ``max_length`` entries each: float32
    log-probabilities (finite, <= 0) or int32 token ids (in ``[0, 2**31)``)."""

    def __init__(self, completions: int, max_length: int, ids: bool,
                 seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.completions, self.max_length, self.ids = completions, max_length, ids

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def _holds(self, a: Any) -> bool:
        if not isinstance(a, np.ndarray) or a.ndim != 1 or len(a) > self.max_length:
            return False
        if self.ids:
            return a.dtype == np.int32 and bool(((a >= 0) & (a < TOKEN_ID_LIMIT)).all())
        return a.dtype == np.float32 and bool((np.isfinite(a) & (a <= 0)).all())

    def contains(self, x: Any) -> bool:
        return (isinstance(x, tuple) and len(x) == self.completions
                and all(self._holds(a) for a in x))

    def sample(self, mask: Any = None, probability: Any = None) -> tuple:
        dtype = np.int32 if self.ids else np.float32
        return tuple(np.zeros(0, dtype) for _ in range(self.completions))

    def __repr__(self) -> str:
        return f"PerTokenArrays({self.completions}, {self.max_length}, ids={self.ids})"

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, PerTokenArrays) and other.completions == self.completions
                and other.max_length == self.max_length and other.ids == self.ids)


class GroupSpace(spaces.Dict):
    """A ``Dict`` of a group's fields that also contains groups carrying the optional
    ``optional`` fields (``logprobs``, ``token_ids``; ``rescue`` in a batch), each checked by
    its own space."""

    def __init__(self, fields: dict[str, spaces.Space], optional: dict[str, spaces.Space],
                 seed: int | np.random.Generator | None = None):
        super().__init__(fields, seed=seed)
        self.optional = optional

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict):
            return False
        extra = x.keys() - self.spaces.keys()
        if not extra <= self.optional.keys():
            return False
        return (super().contains({k: v for k, v in x.items() if k not in extra})
                and all(x[k] in self.optional[k] for k in extra))


def group_space(config: SwarmConfig, in_batch: bool) -> GroupSpace:
    """A group as it appears in the pool, or (``in_batch``) in a training set, with ``local``."""
    L = config.completions_per_question
    fields: dict[str, spaces.Space] = {
        "id": _text(),
        "source": _text(),
        "round": spaces.Discrete(config.max_rounds),
        "task": _text(),
        "question": _text(),
        "system_prompt": _text(),
        "answer": _text(),
        "ref": ref_space(),
        "completions": spaces.Tuple([_text(config.max_completion_chars)] * L),
        "rewards": spaces.Box(0.0, 1.0, shape=(L,), dtype=np.float32),
        "advantages": spaces.Box(-np.inf, np.inf, shape=(L,), dtype=np.float32),
    }
    optional: dict[str, spaces.Space] = {}
    if in_batch:
        fields["local"] = spaces.Discrete(2)
        optional["rescue"] = spaces.Discrete(2)
    tokens = max_completion_tokens(config.max_completion_chars)
    return GroupSpace(fields, {"logprobs": PerTokenArrays(L, tokens, ids=False),
                               "token_ids": PerTokenArrays(L, tokens, ids=True), **optional})


class ActionMask(spaces.Space):
    """The ``action_mask`` of an observation: what ``action_space(node).sample(mask)`` needs to
    draw a valid random action this round.

    In Gymnasium's mask format for the action's ``Dict`` space: ``{"completions": (k, None),
    "num_external": None, "share": (k, None)}``, where ``k`` is the number of questions of the
    round (a ``Sequence``'s mask fixes its length; None leaves a part unconstrained).
    """

    def __init__(self, max_questions: int, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_questions = max_questions

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if not isinstance(x, dict) or set(x) != {"completions", "num_external", "share"}:
            return False
        length = x["completions"][0] if isinstance(x["completions"], tuple) else None
        return (isinstance(length, int) and 0 <= length <= self.max_questions
                and x == action_mask(length))

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        return action_mask(int(self.np_random.integers(0, self.max_questions + 1)))

    def __repr__(self) -> str:
        return f"ActionMask({self.max_questions})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ActionMask) and other.max_questions == self.max_questions


def observation_space(config: SwarmConfig) -> spaces.Dict:
    """What a node sees each round (see ``sapo_env.types.Observation``)."""
    return spaces.Dict(
        {
            "round": spaces.Discrete(config.max_rounds + 1),
            "system_prompt": _text(),
            "completions_per_question": spaces.Discrete(1, start=config.completions_per_question),
            "train_budget": spaces.Discrete(1, start=config.train_budget),
            "num_external": spaces.Discrete(config.train_budget + 1),
            "questions": spaces.Sequence(question_space(), stack=False),
            "pool": PoolSequence(group_space(config, in_batch=False)),
            "batch": spaces.Sequence(group_space(config, in_batch=True), stack=False),
            "action_mask": ActionMask(config.max_questions),
        }
    )


class PoolSequence(spaces.Sequence):
    """Gymnasium's unstacked ``Sequence`` that holds a :class:`PoolView` (what the env shows of
    the pool) as well as a tuple."""

    def __init__(self, feature_space: spaces.Space):
        super().__init__(feature_space, stack=False)

    def contains(self, x: Any) -> bool:
        return isinstance(x, (tuple, PoolView)) and all(map(self.feature_space.contains, x))


class QuestionSequence(spaces.Sequence):
    """A ``Sequence`` with one element per question of the node's current round.

    Under the paper's protocol a node's question count changes every round, which no static
    space can express: ``contains`` accepts any length (the env checks the count, and its error
    names it). ``sample()`` without a mask draws as many elements as the node has questions
    now, which it reads through ``current_length`` (given by the env), so that
    ``action_space(node).sample()`` and PettingZoo's tests, which sample without a mask, give
    valid actions. ``sample(observation["action_mask"])`` works as with any Gymnasium space.
    """

    def __init__(self, feature_space: spaces.Space, current_length: Callable[[], int],
                 seed: int | np.random.Generator | None = None):
        super().__init__(feature_space, stack=False, seed=seed)
        self.current_length = current_length

    def sample(self, mask: Any = None, probability: Any = None) -> tuple:
        if mask is None and probability is None:
            mask = (self.current_length(), None)
        return super().sample(mask=mask, probability=probability)


def action_space(config: SwarmConfig, current_questions: Callable[[], int]) -> spaces.Dict:
    """What a node does each round (see ``sapo_env.types.Action``); ``current_questions()``
    says how many questions the node has this round (see ``QuestionSequence``)."""
    completion = UnicodeText(
        config.max_completion_chars, sample_max_length=SAMPLE_COMPLETION_CHARS
    )
    return spaces.Dict(
        {
            "completions": QuestionSequence(
                spaces.Tuple([completion] * config.completions_per_question), current_questions
            ),
            "num_external": spaces.Discrete(config.train_budget + 1),
            "share": QuestionSequence(spaces.Discrete(2), current_questions),
        }
    )
