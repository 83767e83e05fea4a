"""``DemonstratorAgent``: a scripted node that knows the answers (through each question's ref).

The paper notes that swarm nodes need not be language models: humans or scripted policies can
join and share text. A demonstrator re-derives every question's answer from its ``ref`` with
reasoning-gym and writes it in the format the system prompt asks for (``<answer>`` tags), right
with probability ``accuracy``. It never learns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sapo_env.tasks import reference_answer, resolve
from sapo_env.types import Action, Group, Observation
from sapo_env.validation import check_fits_budget, check_int

WRONG_ANSWER = "I do not know"


class DemonstratorAgent:
    """A non-learning node answering correctly with probability ``accuracy``.

    Args:
        accuracy: probability that each completion carries the right answer.
        num_external: J it asks for every round; ``act`` raises if it exceeds the env's
            ``train_budget`` (I+J).
        seed: seed of its own generator.
    """

    def __init__(self, accuracy: float = 1.0, num_external: int = 4, seed: int | None = 0):
        if not 0.0 <= accuracy <= 1.0:
            raise ValueError(f"accuracy must be in [0, 1], got {accuracy}")
        check_int("num_external", num_external, 0)
        self.accuracy = accuracy
        self.num_external = num_external
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def completion(answer: str) -> str:
        """A completion in the format reasoning-gym's default system prompt asks for."""
        return f"Working through the question step by step.\n<answer>{answer}</answer>"

    def act(self, observation: Observation) -> Action:
        check_fits_budget("DemonstratorAgent", self.num_external, observation["train_budget"])
        L = observation["completions_per_question"]
        completions = []
        for question in observation["questions"]:
            answer = reference_answer(resolve(question["ref"]))
            right = self.rng.random(L) < self.accuracy
            completions.append(tuple(self.completion(answer if r else WRONG_ANSWER)
                                     for r in right))
        return {"completions": tuple(completions),
                "num_external": self.num_external}

    def learn(self, batch: Sequence[Group]) -> Mapping[str, float]:
        return {}
