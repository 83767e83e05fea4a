"""Groups (a question with its L scored completions) and GRPO group-relative advantages.

Example::

    >>> import numpy as np
    >>> from sapo_env.rollouts import group_advantages
    >>> group_advantages(np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32)).round(3)
    array([ 0.866, -0.866, -0.866,  0.866], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sapo_env.types import Group, Question

DEFAULT_EPS = 1e-6


def group_advantages(rewards: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """GRPO advantages ``(r - mean) / (std + eps)`` over the last axis (the group's L rewards).

    The standard deviation is the sample one (ddof=1), as in the paper's code (genrl's GRPO
    trainer, torch's default ``std``) and TRL's GRPOTrainer; a group of one completion gets a
    zero advantage (genrl divides only when L > 1). Works on one group (shape ``(L,)``) or on
    many at once (shape ``(..., L)``); a group whose rewards are all equal gets all-zero
    advantages.
    """
    # float64 inside: with a tiny spread, float32 rounding of the mean would be amplified by
    # the division and the advantages would no longer sum to zero
    rewards = np.asarray(rewards, dtype=np.float64)
    mean = rewards.mean(axis=-1, keepdims=True)
    if rewards.shape[-1] < 2:
        return np.zeros_like(rewards, dtype=np.float32)
    std = rewards.std(axis=-1, ddof=1, keepdims=True)
    return ((rewards - mean) / (std + eps)).astype(np.float32)


def has_zero_advantage(rewards: np.ndarray) -> np.ndarray | bool:
    """True where every reward of a group is the same (the group carries no learning signal).

    Partial credit exists (a wrong answer can score above 0), so this compares rewards with each
    other, not with zero.
    """
    rewards = np.asarray(rewards)
    return (rewards.max(axis=-1) == rewards.min(axis=-1))


def stacked_rewards(groups: Sequence[Group]) -> np.ndarray | None:
    """The groups' rewards as one ``(groups, L)`` array, row ``k`` group ``k``'s, when they are
    arrays of one dtype and shape (a swarm's groups: float32, L completions each); None when
    they are not, or there are none."""
    rewards = [g["rewards"] for g in groups]
    kinds = {(r.dtype, r.shape) if isinstance(r, np.ndarray) else None for r in rewards}
    if len(kinds) != 1 or None in kinds:
        return None
    return np.stack(rewards)


def mean_rewards(groups: Sequence[Group]) -> list[float]:
    """Each group's mean reward, ``float(group["rewards"].mean())`` bit for bit, in one call
    for groups whose rewards stack (:func:`stacked_rewards`)."""
    stacked = stacked_rewards(groups)
    if stacked is None:
        return [float(np.asarray(g["rewards"]).mean()) for g in groups]
    return stacked.mean(axis=-1).tolist()


def make_group(
    source: str,
    round_: int,
    k: int,
    question: Question,
    answer: str,
    completions: Sequence[str],
    rewards: np.ndarray,
    advantages: np.ndarray,
    system_prompt: str = "",
    **token_fields: tuple[np.ndarray, ...],
) -> Group:
    """Build the group record; its arrays are made read-only because many nodes see them.
    ``token_fields``: the sender's optional ``logprobs`` and ``token_ids``, already checked
    (:mod:`sapo_env.sender_logprobs`); a group gets those keys only when they were sent."""
    rewards.flags.writeable = False
    advantages.flags.writeable = False
    return {
        "id": f"{source}/r{round_}/q{k}",
        "source": source,
        "round": round_,
        "task": question["task"],
        "question": question["prompt"],
        "system_prompt": system_prompt,
        "answer": answer,
        "ref": question["ref"],
        "completions": tuple(completions),
        "rewards": rewards,
        "advantages": advantages,
        **token_fields,  # type: ignore[typeddict-item]
    }
