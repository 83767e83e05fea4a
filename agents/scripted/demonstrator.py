"""``DemonstratorAgent``: a scripted node that knows the answers (through each question's ref).

The paper notes that swarm nodes need not be language models: humans or scripted policies can
join and share text. A demonstrator re-derives every question's answer from its ``ref`` with
reasoning-gym and writes it in the format the system prompt asks for (``<answer>`` tags), right
with probability ``accuracy``. It never learns.

``tag_probability`` below 1 makes it write some completions without the tag (a plain "The
answer is X."), which the strict verifier scores 0 even when right. That is what a group needs
to *teach* the format: advantages are relative within a group, so a group whose completions all
carry the tag contrasts right with wrong answers only, and one whose completions all score the
same is filtered out of the pool before anyone can sample it. With ``accuracy=1`` and
``tag_probability=0.5`` a group of 4 mixes tagged and untagged answers 7 times in 8, and the tag
is the only thing that separates reward 1 from 0 (the experiment in
``sapo_experiments.format_propagation``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from agents.plain_state import PlainState
from sapo_env.tasks import reference_answer, resolve
from sapo_env.types import Action, Group, Observation
from sapo_env.validation import check_fits_budget, check_int

WRONG_ANSWER = "I do not know"


class DemonstratorAgent(PlainState):
    """A non-learning node answering correctly with probability ``accuracy``.

    Args:
        accuracy: probability that each completion carries the right answer.
        num_external: J it asks for every round; ``act`` raises if it exceeds the env's
            ``train_budget`` (I+J).
        seed: seed of its own generator.
        tag_probability: probability that each completion writes its answer inside
            ``<answer>`` tags (:meth:`completion`); otherwise it is plain text
            (:meth:`untagged_completion`). At 1 (the default) no draw is made for it, so the
            random stream, and every completion, is the same as without the option.

    ``state_dict()`` / ``load_state_dict(state)``: its generator's state (``agents.plain_state``).
    """

    _state_fields = ("rng",)

    def __init__(self, accuracy: float = 1.0, num_external: int = 4, seed: int | None = 0,
                 tag_probability: float = 1.0):
        if not 0.0 <= accuracy <= 1.0:
            raise ValueError(f"accuracy must be in [0, 1], got {accuracy}")
        if not 0.0 <= tag_probability <= 1.0:
            raise ValueError(f"tag_probability must be in [0, 1], got {tag_probability}")
        check_int("num_external", num_external, 0)
        self.accuracy = accuracy
        self.tag_probability = tag_probability
        self.num_external = num_external
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def completion(answer: str) -> str:
        """A completion in the format reasoning-gym's default system prompt asks for."""
        return f"Working through the question step by step.\n<answer>{answer}</answer>"

    @staticmethod
    def untagged_completion(answer: str) -> str:
        """The same answer without the tag: what a lenient reader accepts, the strict one not."""
        return f"The answer is {answer}."

    def act(self, observation: Observation) -> Action:
        check_fits_budget("DemonstratorAgent", self.num_external, observation["train_budget"])
        L = observation["completions_per_question"]
        completions = []
        for question in observation["questions"]:
            answer = reference_answer(resolve(question["ref"]))
            right = self.rng.random(L) < self.accuracy
            tagged = (np.ones(L, dtype=bool) if self.tag_probability == 1.0
                      else self.rng.random(L) < self.tag_probability)
            completions.append(tuple(
                (self.completion if t else self.untagged_completion)(answer if r else WRONG_ANSWER)
                for r, t in zip(right, tagged)))
        return {"completions": tuple(completions),
                "num_external": self.num_external}

    def learn(self, batch: Sequence[Group]) -> Mapping[str, float]:
        return {}
