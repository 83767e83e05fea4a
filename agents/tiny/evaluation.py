"""Accuracy of a model on question sets, measured the way a node is rewarded in the env.

``sampled_accuracy(model, tokenizer, questions, max_new_tokens=..., seed=...)`` samples one
completion per question at temperature 1 with at most ``max_new_tokens`` new tokens, under an
empty system prompt (``agents.lm.generation``, as ``GRPOAgent.act`` does), decodes it without
special tokens and scores it with the env's own verifier
(``sapo_env.tasks.score_completions``: the last ``<answer>`` tag, reasoning-gym's scorer, the
env's limits). The accuracy of a task is the mean score, partial credit included: what the
node's reward would be.

Sampling draws from a private torch generator seeded from ``seed`` (a ``SeedSequence``): the same
model, questions and seed give the same numbers, and the global torch random state is
untouched.

Example::

    questions = {"spell_backward": evaluation_questions(TaskSpec("spell_backward"), 64)}
    sampled_accuracy(model, tokenizer, questions, max_new_tokens=12, seed=0)
    # {'spell_backward': 0.205}, for the spell_backward warm start at its defaults
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.lm.generation import chat_prompt_ids, eos_token_ids, generate_completion_ids
from agents.lm.grpo_config import GRPOConfig
from agents.lm.torch_rng import TorchRNG
from sapo_env.scoring.answers import extract_tag
from sapo_env.tasks import DrawnQuestion, score_completions


def sampled_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: Mapping[str, Sequence[DrawnQuestion]],
    *,
    max_new_tokens: int,
    seed: int | np.random.SeedSequence,
) -> dict[str, float]:
    """Mean verifier score per task of one sampled completion per question; see the module
    docstring. The model is left in eval mode."""
    drawn = [d for task_questions in questions.values() for d in task_questions]
    if not drawn:
        return {task: float("nan") for task in questions}
    prompts = [chat_prompt_ids(tokenizer, "", d.question["prompt"]) for d in drawn]
    device = next(model.parameters()).device
    ids = generate_completion_ids(
        model, prompts, config=GRPOConfig(max_new_tokens=max_new_tokens, device=device.type),
        pad_id=tokenizer.pad_token_id, eos_ids=eos_token_ids(model, tokenizer), device=device,
        dtype=torch.float32, rng=TorchRNG(seed, device),
    )
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    scores = iter([float(score_completions(d, [text], extract_tag)[0])
                   for d, text in zip(drawn, texts)])
    return {task: float(np.mean([next(scores) for _ in task_questions]))
            if task_questions else float("nan")
            for task, task_questions in questions.items()}
