"""Warm-start questions: reasoning-gym seeds no swarm uses, and supervised examples from them.

Seeds. reasoning-gym derives item ``i`` of seed ``s`` from ``s + i``. A swarm's question
streams take blocks of ``MAX_QUESTIONS_PER_STREAM`` (2**24) seeds below
``sapo_env.tasks.HELD_OUT_BLOCK``, chosen at random per run, and held-out evaluation takes the
block ``HELD_OUT_BLOCK`` itself; every seed the env reads is therefore below
:data:`WARM_START_SEED` = 2**62. Warm starts read only seeds from 2**62 up, so a warm-started
node has never seen a question of any swarm run or held-out set:

- evaluation: every task's first ``eval_size`` items of seed :data:`EVALUATION_SEED` (2**62),
  whatever the warm-start config and seed, so accuracies of different nodes on a task are
  measured on the same questions;
- training: one stream per task, at seed 2**62 + k * 2**24 with k >= 1 drawn from the warm
  start's generator (``1 <= k <= 2**20``): blocks above the evaluation block, different for
  different warm-start seeds (two streams share a block with probability 2**-20, and then
  repeat the same questions, never evaluation ones). Seeds stay below 2**63 (int64).

Supervised examples. A question becomes the prompt a ``GRPOAgent`` builds under an empty system
prompt (``agents.lm.generation.chat_prompt_ids(tokenizer, "", question)``) and the target
``<answer>{answer}</answer>`` + EOS, the answer being ``sapo_env.tasks.reference_answer``: the
completion a node in the env is rewarded for, tokenized as GRPO re-encodes completions.

Example::

    rng = np.random.default_rng(np.random.SeedSequence(0))
    streams = training_streams([TaskSpec("spell_backward")], rng)
    drawn = draw_batch(streams, np.array([1.0]), rng, 32)
    ids, mask, labels = collate([supervised_example(tokenizer, d) for d in drawn],
                                tokenizer.pad_token_id)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from agents.lm.generation import chat_prompt_ids
from sapo_env.config import MAX_QUESTIONS_PER_STREAM, TaskSpec
from sapo_env.tasks import HELD_OUT_BLOCK, DrawnQuestion, QuestionStream, reference_answer

WARM_START_SEED = (HELD_OUT_BLOCK + 1) * MAX_QUESTIONS_PER_STREAM
"""2**62: the first reasoning-gym seed above every seed a swarm or its held-out set reads."""
EVALUATION_SEED = WARM_START_SEED
"""Seed of every task's warm-start evaluation questions (its first ``eval_size`` items)."""
TRAINING_BLOCKS = 2**20
"""Training streams start at ``WARM_START_SEED + k * MAX_QUESTIONS_PER_STREAM``, 1 <= k <= this."""


def evaluation_questions(spec: TaskSpec, n_questions: int) -> list[DrawnQuestion]:
    """The first ``n_questions`` warm-start evaluation questions of a task (same every call)."""
    if not 1 <= n_questions <= MAX_QUESTIONS_PER_STREAM:
        raise ValueError(f"n_questions must be in [1, {MAX_QUESTIONS_PER_STREAM}], "
                         f"got {n_questions!r}")
    stream = QuestionStream(spec, EVALUATION_SEED)
    return [stream.draw() for _ in range(n_questions)]


def training_streams(specs: Sequence[TaskSpec], rng: np.random.Generator
                     ) -> list[QuestionStream]:
    """One training stream per task, in a seed block drawn from ``rng``; see the docstring.

    A stream holds ``MAX_QUESTIONS_PER_STREAM`` questions before it would run into the next
    block."""
    blocks = rng.integers(1, TRAINING_BLOCKS + 1, size=len(specs))
    return [QuestionStream(spec, WARM_START_SEED + int(k) * MAX_QUESTIONS_PER_STREAM)
            for spec, k in zip(specs, blocks)]


def draw_batch(streams: Sequence[QuestionStream], weights: np.ndarray, rng: np.random.Generator,
               size: int) -> list[DrawnQuestion]:
    """``size`` questions, each from a task drawn by ``weights`` (summing to 1)."""
    choices = rng.choice(len(streams), size=size, p=weights)
    return [streams[c].draw() for c in choices.tolist()]


class Example(NamedTuple):
    """A supervised example: the chat prompt's ids and the target completion's ids."""

    prompt: list[int]  #: the generation prompt under an empty system prompt
    target: list[int]  #: ``<answer>{answer}</answer>`` (or the bare answer) and EOS


def supervised_example(tokenizer: PreTrainedTokenizerBase, drawn: DrawnQuestion,
                       tagged: bool = True) -> Example:
    """The prompt a node sees for the question and the completion it is rewarded for, or with
    ``tagged=False`` the bare answer (which the env's strict verifier scores 0)."""
    prompt = chat_prompt_ids(tokenizer, "", drawn.question["prompt"])
    answer = reference_answer(drawn.entry)
    text = f"<answer>{answer}</answer>" if tagged else answer
    target = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return Example(prompt, target)


def collate(examples: Sequence[Example], pad_id: int
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, labels)``, right-padded: labels are -100 (ignored by the
    loss) on the prompt and the padding, so only the completion is learned."""
    width = max(len(e.prompt) + len(e.target) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for row, (prompt, target) in enumerate(examples):
        n = len(prompt) + len(target)
        ids[row, :n] = torch.tensor(prompt + target, dtype=torch.long)
        mask[row, :n] = 1
        labels[row, len(prompt):n] = torch.tensor(target, dtype=torch.long)
    return ids, mask, labels
