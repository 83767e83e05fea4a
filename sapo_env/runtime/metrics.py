"""Metrics of a swarm run: pure functions over a ``History``, plus a held-out evaluation
(:mod:`sapo_env.runtime.held_out`, re-exported here).

The paper (arXiv 2509.08721, Section 5) reports the cumulative reward over 2000 rounds and the
per-round swarm reward smoothed by a moving average of window 100, with the minimum and maximum
across nodes as a band. Its reviewers asked for more: reward per task, the health of the shared
pool, how fast a discovery spreads, and a held-out evaluation rather than training reward alone.
Everything here reads a ``History`` (``sapo_env.runtime.run``'s return value) and returns numpy
arrays or small dataclasses; nothing mutates it.

Example::

    >>> import sapo_env.runtime
    >>> from sapo_env.runtime import metrics
    >>> from agents import DemonstratorAgent
    >>> env = sapo_env.parallel_env(n=2, max_rounds=4)
    >>> history = sapo_env.runtime.run(env, [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)],
    ...                        seed=0, progress=False)
    >>> metrics.smoothed_reward(history, window=2).mean.shape
    (4,)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sapo_env.runtime.held_out import HeldOutEvaluator, HeldOutResult, evaluate, held_out_questions
from sapo_env.runtime.records import History, nanmean
from sapo_env.validation import check_int

PAPER_WINDOW = 100
"""The paper's moving-average window, in rounds."""

CumulativeKind = Literal["mean", "total"]


# --- reward ----------------------------------------------------------------------------------
def cumulative_reward(history: History, kind: CumulativeKind = "mean") -> float:
    """Cumulative reward: ``"mean"`` sums the swarm-mean reward over rounds (the paper's
    561.79 ... 1093.31 are on this scale), ``"total"`` sums over rounds and nodes."""
    if kind == "mean":
        return history.cumulative_reward
    if kind == "total":
        return history.cumulative_reward_total
    raise ValueError(f"kind must be 'mean' or 'total', got {kind!r}")


def moving_average(values: np.ndarray, window: int = PAPER_WINDOW) -> np.ndarray:
    """Trailing moving average along axis 0, NaN-aware, same shape as ``values``.

    Entry ``t`` averages rows ``max(0, t - window + 1) .. t`` that are not NaN, so the first
    ``window - 1`` entries average fewer rounds (the curve starts at round 0, as the paper's
    does) and rounds in which a node did not act (NaN) are skipped. NaN where a window has no
    value at all.
    """
    check_int("window", window, 1)
    values = np.asarray(values, dtype=np.float64)
    present = ~np.isnan(values)
    sums = np.cumsum(np.where(present, values, 0.0), axis=0)
    counts = np.cumsum(present, axis=0)
    if len(values) > window:
        sums[window:] = sums[window:] - sums[:-window]
        counts[window:] = counts[window:] - counts[:-window]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


@dataclass(frozen=True)
class SmoothedReward:
    """The paper's Figure 2 for one run: smoothed swarm reward with a min/max band."""

    mean: np.ndarray  #: (rounds,) moving average of the swarm-mean reward
    low: np.ndarray  #: (rounds,) minimum over nodes of each node's moving average
    high: np.ndarray  #: (rounds,) maximum over nodes of each node's moving average
    per_node: np.ndarray  #: (rounds, n) each node's moving average


def smoothed_reward(history: History, window: int = PAPER_WINDOW) -> SmoothedReward:
    """Moving-average reward of the swarm and the band of its nodes (paper, Figure 2)."""
    per_node = moving_average(history.rewards, window)
    filled = np.isnan(per_node).all(axis=1)
    return SmoothedReward(
        mean=moving_average(history.swarm_mean, window),
        low=np.where(filled, np.nan, np.nanmin(np.where(filled[:, None], 0.0, per_node), axis=1)),
        high=np.where(filled, np.nan, np.nanmax(np.where(filled[:, None], 0.0, per_node), axis=1)),
        per_node=per_node,
    )


def task_rewards(history: History) -> dict[str, np.ndarray]:
    """Per task, a (rounds, n) array of each node's mean score on that task in each round.

    NaN where the node drew no question of the task that round (read from the env's
    ``task_scores`` info). Smooth it with ``moving_average``, which skips NaN.
    """
    tasks = sorted({t for infos in history.infos for info in infos.values()
                    for t in info.get("task_scores", {})})
    column = {a: i for i, a in enumerate(history.agents)}
    curves = {t: np.full((history.rounds, len(history.agents)), np.nan) for t in tasks}
    for r, infos in enumerate(history.infos[:history.rounds]):
        for agent, info in infos.items():
            for task, score in info.get("task_scores", {}).items():
                curves[task][r, column[agent]] = score
    return curves


def task_curves(history: History, window: int = PAPER_WINDOW) -> dict[str, np.ndarray]:
    """Per task, the (rounds,) swarm reward on that task, moving-averaged over ``window``."""
    return {task: moving_average(nanmean(scores, axis=1), window)
            for task, scores in task_rewards(history).items()}


# --- pool health -----------------------------------------------------------------------------
def info_array(history: History, key: str, missing: float = np.nan) -> np.ndarray:
    """A (rounds, n) float array of one per-node info value (``missing`` where absent/None)."""
    return _per_node(history.agents, history.infos[:history.rounds], key, missing)


def _per_node(agents: Sequence[str], rounds: Sequence[Mapping[str, Mapping[str, Any]]],
              key: str, missing: float) -> np.ndarray:
    """(rounds, n) array of ``rounds[r][node][key]`` (``missing`` where absent or None)."""
    column = {a: i for i, a in enumerate(agents)}
    out = np.full((len(rounds), len(agents)), missing, dtype=np.float64)
    for r, by_node in enumerate(rounds):
        for agent, values in by_node.items():
            value = values.get(key)
            if value is not None:
                out[r, column[agent]] = value
    return out


@dataclass(frozen=True)
class PoolHealth:
    """The shared pool over time: what went in, what survived the filter, who gave and took."""

    shared: np.ndarray  #: (rounds,) groups published by all nodes
    shared_mean_reward: np.ndarray  #: (rounds,) mean reward of the published groups
    informative: np.ndarray  #: (rounds,) groups in a node's view of the pool that survive the
    #: filter, averaged over nodes
    informative_fraction: np.ndarray  #: (rounds,) fraction of a node's view of the pool that
    #: survives the filter, averaged over nodes
    contribution: np.ndarray  #: (rounds, n) groups of each node that others took as external
    consumption: np.ndarray  #: (rounds, n) external groups each node trained on
    external_shortfall: np.ndarray  #: (rounds, n) external groups asked for but not available
    #: (rounds,) fraction of their own groups with zero advantage, averaged over the nodes that
    #: answered questions
    zero_advantage_fraction: np.ndarray


def pool_health(history: History) -> PoolHealth:
    """Pool health from the env's infos (see ``SwarmEnv`` infos)."""
    return pool_health_of(history.infos[:history.rounds], history.agents)


def pool_health_of(infos: Sequence[Mapping[str, Mapping[str, Any]]],
                   agents: Sequence[str]) -> PoolHealth:
    """Pool health from a sequence of rounds' infos (one round: TensorBoard's per-round log)."""
    def per_node(key: str, missing: float = np.nan) -> np.ndarray:
        return _per_node(agents, infos, key, missing)

    shared = per_node("shared_groups", 0.0)
    shared_reward = per_node("shared_mean_reward")
    with np.errstate(all="ignore"):
        weighted = np.nansum(np.nan_to_num(shared_reward) * shared, axis=1)
        total = shared.sum(axis=1)
        mean_reward = np.where(total > 0, weighted / np.maximum(total, 1), np.nan)
        size = per_node("pool_size")
        filtered = per_node("pool_size_filtered")
        fraction = nanmean(np.where(size > 0, filtered / np.where(size > 0, size, 1), np.nan),
                           axis=1)
    return PoolHealth(
        shared=total,
        shared_mean_reward=mean_reward,
        informative=nanmean(filtered, axis=1),
        informative_fraction=fraction,
        contribution=per_node("taken_by_others", 0.0),
        consumption=per_node("external_groups", 0.0),
        external_shortfall=per_node("external_shortfall", 0.0),
        zero_advantage_fraction=nanmean(per_node("zero_advantage_fraction"), axis=1),
    )


# --- propagation -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Propagation:
    """How a level of skill spread through the swarm (rounds are 0-based; None: never)."""

    first_round: int | None  #: first round any node's moving reward reached the threshold
    first_node: str | None  #: that node
    rounds_to_half: int | None  #: rounds after ``first_round`` until half the nodes had
    rounds_to_all: int | None  #: rounds after ``first_round`` until every node had
    node_rounds: dict[str, int | None]  #: per node, the round it first reached the threshold


def crossing_rounds(curves: np.ndarray, threshold: float) -> list[int | None]:
    """Per column of a (rounds, n) array, the first row at or above ``threshold``."""
    reached = np.nan_to_num(np.asarray(curves, dtype=np.float64), nan=-np.inf) >= threshold
    return [int(np.argmax(col)) if col.any() else None for col in reached.T]


def propagation_of(curves: np.ndarray, agents: Sequence[str], threshold: float) -> Propagation:
    """Propagation of a threshold crossing through per-node curves (rounds, n)."""
    rounds = crossing_rounds(curves, threshold)
    by_node = dict(zip(agents, rounds))
    reached = sorted(r for r in rounds if r is not None)
    if not reached:
        return Propagation(None, None, None, None, by_node)
    first = reached[0]
    half = math.ceil(len(agents) / 2)
    return Propagation(
        first_round=first,
        first_node=agents[rounds.index(first)],
        rounds_to_half=reached[half - 1] - first if len(reached) >= half else None,
        rounds_to_all=reached[-1] - first if len(reached) == len(agents) else None,
        node_rounds=by_node,
    )


def propagation(history: History, threshold: float = 0.5, window: int = PAPER_WINDOW
                ) -> dict[str, Propagation]:
    """Per task: when the first node's moving reward on the task passes ``threshold``, and how
    many rounds until half and all nodes do. The moving average runs over the rounds in which
    the node drew the task."""
    return {task: propagation_of(moving_average(scores, window), history.agents, threshold)
            for task, scores in task_rewards(history).items()}


def learn_metric(history: History, key: str) -> np.ndarray:
    """A (rounds, n) array of one value the agents' ``learn`` returned (NaN where absent), e.g.
    the simulated learner's ``tag_prob``; ``propagation_of`` applies to it too."""
    return _per_node(history.agents, history.learn_metrics[:history.rounds], key, np.nan)


__all__ = [
    "PAPER_WINDOW",
    "HeldOutEvaluator",
    "HeldOutResult",
    "PoolHealth",
    "Propagation",
    "SmoothedReward",
    "crossing_rounds",
    "cumulative_reward",
    "evaluate",
    "held_out_questions",
    "info_array",
    "learn_metric",
    "moving_average",
    "pool_health",
    "propagation",
    "propagation_of",
    "smoothed_reward",
    "task_curves",
    "task_rewards",
]
