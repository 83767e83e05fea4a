"""``RandomAgent``: random text and a fixed J; the swarm's noise floor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from agents.plain_state import PlainState
from sapo_env.spaces import SAMPLE_CHARSET
from sapo_env.types import Action, Group, Observation
from sapo_env.validation import check_fits_budget, check_int


class RandomAgent(PlainState):
    """Answers every question with random text (which simply scores 0) and never learns.

    Args:
        num_external: J it asks for every round; ``act`` raises if it exceeds the env's
            ``train_budget`` (I+J).
        max_chars: longest random completion (lengths are uniform in 0..max_chars).
        seed: seed of its own generator.

    ``state_dict()`` / ``load_state_dict(state)``: its generator's state (``agents.plain_state``).
    """

    _state_fields = ("rng",)

    def __init__(self, num_external: int = 4, max_chars: int = 64, seed: int | None = 0):
        check_int("num_external", num_external, 0)
        check_int("max_chars", max_chars, 0)
        self.num_external = num_external
        self.max_chars = max_chars
        self.rng = np.random.default_rng(seed)

    def _text(self) -> str:
        length = self.rng.integers(0, self.max_chars + 1)
        picks = self.rng.integers(0, len(SAMPLE_CHARSET), size=length)
        return "".join(SAMPLE_CHARSET[i] for i in picks)

    def act(self, observation: Observation) -> Action:
        check_fits_budget("RandomAgent", self.num_external, observation["train_budget"])
        L = observation["completions_per_question"]
        completions = tuple(tuple(self._text() for _ in range(L))
                            for _ in observation["questions"])
        return {"completions": completions, "num_external": self.num_external}

    def learn(self, batch: Sequence[Group]) -> Mapping[str, float]:
        return {}
