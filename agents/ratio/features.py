"""What a node has seen, as a fixed-length vector for a learned I:J ratio policy.

``RatioFeatures`` turns the rounds a node has played into the observation of a learned ratio
policy (the meta environments of ``sapo_experiments.meta``, ``agents.ratio.sb3.SB3Ratio``): feed it
each round's outcome with ``update(reward, info)`` and read it with ``vector(observation)``,
where ``reward`` and ``info`` are the node's reward and ``infos[node]`` of the round just
played and ``observation`` is the node's env observation for its next round.

Every feature is scale-free (a fraction, a reward in [0, 1], or a count per ``train_budget``),
so one trained policy reads swarms of any size and budget the same way; every one is clipped
into ``FEATURE_LOW``/``FEATURE_HIGH`` (``feature_space()``), and a missing value (an info that
is None because there was nothing to measure) maps to the documented number below, never NaN.

Features, in ``FEATURE_NAMES`` order ("window": the last ``window`` rounds played):

==================  =====================  =======================================================
name                bounds                 meaning (value when there is nothing to measure)
==================  =====================  =======================================================
reward_mean         [0, 1]                 own reward, mean over the last ``window`` rounds in
                                           which the node answered questions: rounds at
                                           J = ``train_budget`` say nothing about its skill (0)
reward_trend        [-1, 1]                ``reward_mean`` minus the same mean over the
                                           ``window`` answered rounds before those: learning (> 0)
                                           or forgetting (< 0) (0 until both windows have a round)
pool_size           [0, ``POOL_CLIP``]     groups in the node's filtered view of the pool, per
                                           ``train_budget``, window mean: below J / budget the
                                           pool cannot fill its J slots (0 before any round)
pool_reward         [0, 1]                 mean reward of those groups, window mean over rounds
                                           with a non-empty pool (0)
zero_advantage      [0, 1]                 share of its own groups with zero advantage, window
                                           mean over answered rounds (1: no informative group)
num_external        [0, 1]                 the J in force for the next round, per
                                           ``train_budget`` (the observation's; 0 at budget 0)
shortfall           [0, 1]                 training slots left empty (local plus external
                                           shortfall), per ``train_budget``, window mean (0)
taken_by_others     [0, ``POOL_CLIP``]     its own groups that other nodes trained on, per
                                           ``train_budget``, window mean: what its questions
                                           give the swarm (0)
progress            [0, 1]                 round / ``max_rounds``: how much of the run is left
                                           to profit from learning now (clipped at 1)
==================  =====================  =======================================================

Example::

    >>> import sapo_env
    >>> from agents.ratio.features import FEATURE_NAMES, RatioFeatures
    >>> env = sapo_env.parallel_env(n=2, max_rounds=3, train_budget=2, num_external=1)
    >>> observations, _ = env.reset(seed=0)
    >>> features = RatioFeatures(max_rounds=3)
    >>> dict(zip(FEATURE_NAMES, features.vector(observations["node_0"]).tolist()))["num_external"]
    0.5
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

from agents.plain_state import PlainState
from sapo_env.validation import check_int

FEATURE_NAMES: tuple[str, ...] = (
    "reward_mean",
    "reward_trend",
    "pool_size",
    "pool_reward",
    "zero_advantage",
    "num_external",
    "shortfall",
    "taken_by_others",
    "progress",
)

POOL_CLIP = 4.0
"""Upper bound of the per-budget counts: a pool holding four training sets' worth of informative
groups can fill any J; more says nothing new to a ratio policy."""

_BOUNDS = {
    "reward_mean": (0.0, 1.0),
    "reward_trend": (-1.0, 1.0),
    "pool_size": (0.0, POOL_CLIP),
    "pool_reward": (0.0, 1.0),
    "zero_advantage": (0.0, 1.0),
    "num_external": (0.0, 1.0),
    "shortfall": (0.0, 1.0),
    "taken_by_others": (0.0, POOL_CLIP),
    "progress": (0.0, 1.0),
}
FEATURE_LOW = np.array([_BOUNDS[name][0] for name in FEATURE_NAMES], dtype=np.float32)
FEATURE_HIGH = np.array([_BOUNDS[name][1] for name in FEATURE_NAMES], dtype=np.float32)


def feature_space() -> gymnasium.spaces.Box:
    """A new ``Box`` holding every ``RatioFeatures.vector`` (cache it: PettingZoo wants the same
    space object on every call)."""
    return gymnasium.spaces.Box(FEATURE_LOW, FEATURE_HIGH, dtype=np.float32)


def _mean(values: Any, default: float) -> float:
    values = list(values)
    return sum(values) / len(values) if values else default


class RatioFeatures(PlainState):
    """The running summary of one node's rounds (see the module docstring for the features).

    Args:
        max_rounds: length of the run the policy plays, for ``progress``; use the episode length
            the policy was trained with, so that ``progress`` means the same thing.
        window: rounds averaged by the window features (10: long enough to smooth the noise of
            one round's 64 scores, short enough to follow a learning curve that moves over tens
            of rounds).

    ``state_dict()`` / ``load_state_dict(state)``: the rounds it remembers, as plain data.
    """

    _state_fields = ("_answered", "_zero_advantage", "_pool_reward", "_pool_size",
                     "_shortfall", "_taken")

    def __init__(self, max_rounds: int, window: int = 10):
        check_int("max_rounds", max_rounds, 1)
        check_int("window", window, 1)
        self.max_rounds = max_rounds
        self.window = window
        # own rewards of answered rounds: the last two windows, for the mean and the trend
        self._answered: deque[float] = deque(maxlen=2 * window)
        self._zero_advantage: deque[float] = deque(maxlen=window)  # answered rounds only
        self._pool_reward: deque[float] = deque(maxlen=window)  # rounds with a non-empty pool
        # raw counts of every round, normalised by the budget in ``vector``
        self._pool_size: deque[int] = deque(maxlen=window)
        self._shortfall: deque[int] = deque(maxlen=window)
        self._taken: deque[int] = deque(maxlen=window)

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        """Record one round: ``reward`` is the node's env reward (its mean verifier score, not a
        shaped meta reward) and ``info`` its ``infos[node]`` of that round."""
        if isinstance(reward, bool) or not isinstance(reward, (int, float, np.floating)) \
                or not math.isfinite(reward):
            raise ValueError(f"reward must be a finite number, got {reward!r}")
        if info["generated_completions"] > 0:
            self._answered.append(float(reward))
            if info["zero_advantage_fraction"] is not None:
                self._zero_advantage.append(float(info["zero_advantage_fraction"]))
        if info["pool_mean_reward_filtered"] is not None:
            self._pool_reward.append(float(info["pool_mean_reward_filtered"]))
        self._pool_size.append(int(info["pool_size_filtered"]))
        self._shortfall.append(int(info["local_shortfall"]) + int(info["external_shortfall"]))
        self._taken.append(int(info["taken_by_others"]))

    def values(self, observation: Mapping[str, Any]) -> dict[str, float]:
        """The features by name, unclipped (``vector`` clips them into their bounds)."""
        budget = int(observation["train_budget"])
        per_budget = 1.0 / budget if budget > 0 else 0.0
        answered = list(self._answered)
        recent, before = answered[-self.window:], answered[:-self.window]
        reward_mean = _mean(recent, 0.0)
        return {
            "reward_mean": reward_mean,
            "reward_trend": reward_mean - _mean(before, 0.0) if before else 0.0,
            "pool_size": _mean(self._pool_size, 0.0) * per_budget,
            "pool_reward": _mean(self._pool_reward, 0.0),
            "zero_advantage": _mean(self._zero_advantage, 1.0),
            "num_external": int(observation["num_external"]) * per_budget,
            "shortfall": _mean(self._shortfall, 0.0) * per_budget,
            "taken_by_others": _mean(self._taken, 0.0) * per_budget,
            "progress": int(observation["round"]) / self.max_rounds,
        }

    def vector(self, observation: Mapping[str, Any]) -> np.ndarray:
        """The features as a float32 array in ``FEATURE_NAMES`` order, inside their bounds.

        ``observation`` is the node's env observation (its ``round``, ``train_budget`` and
        ``num_external`` are read)."""
        values = self.values(observation)
        vector = np.array([values[name] for name in FEATURE_NAMES], dtype=np.float32)
        return np.clip(vector, FEATURE_LOW, FEATURE_HIGH)
