"""Gymnasium spaces of the swarm: a node's observation and action.

Two spaces of our own, because a language model may print any character:

- ``UnicodeText`` is a ``gymnasium.spaces.Text`` that contains *every* Unicode string within
  its length bounds (Gymnasium's ``Text`` only contains strings over a fixed charset). It samples
  short strings over a mixed alphabet (ASCII, the propositional-logic symbols, CJK, emoji):
  random text is a valid action that simply scores 0.
- ``JSONObject`` contains any JSON-serialisable ``dict`` (a task's reasoning-gym config).
"""

from __future__ import annotations

import json
import string
from typing import Any

import numpy as np
from gymnasium import spaces

from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig

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


def group_space(config: SwarmConfig, in_batch: bool) -> spaces.Dict:
    """A group as it appears in the pool, or (``in_batch``) in a training set, with ``local``."""
    L = config.completions_per_question
    fields: dict[str, spaces.Space] = {
        "id": _text(),
        "source": _text(),
        "round": spaces.Discrete(config.max_rounds),
        "task": _text(),
        "question": _text(),
        "answer": _text(),
        "ref": ref_space(),
        "completions": spaces.Tuple([_text(config.max_completion_chars)] * L),
        "rewards": spaces.Box(0.0, 1.0, shape=(L,), dtype=np.float32),
        "advantages": spaces.Box(-np.inf, np.inf, shape=(L,), dtype=np.float32),
    }
    if in_batch:
        fields["local"] = spaces.Discrete(2)
    return spaces.Dict(fields)


def observation_space(config: SwarmConfig) -> spaces.Dict:
    """What a node sees each round (see ``sapo_env.types.Observation``)."""
    return spaces.Dict(
        {
            "round": spaces.Discrete(config.max_rounds + 1),
            "system_prompt": _text(),
            "completions_per_question": spaces.Discrete(1, start=config.completions_per_question),
            "train_budget": spaces.Discrete(1, start=config.train_budget),
            "questions": spaces.Tuple([question_space()] * config.questions_per_round),
            "pool": spaces.Sequence(group_space(config, in_batch=False), stack=False),
            "batch": spaces.Sequence(group_space(config, in_batch=True), stack=False),
        }
    )


def action_space(config: SwarmConfig) -> spaces.Dict:
    """What a node does each round (see ``sapo_env.types.Action``)."""
    completion = UnicodeText(
        config.max_completion_chars, sample_max_length=SAMPLE_COMPLETION_CHARS
    )
    return spaces.Dict(
        {
            "completions": spaces.Tuple(
                [spaces.Tuple([completion] * config.completions_per_question)]
                * config.questions_per_round
            ),
            "num_external": spaces.Discrete(config.train_budget + 1),
            "share": spaces.MultiBinary(config.questions_per_round),
        }
    )
