"""A policy's three scores in one run of the benchmark, from the run's arrays (pure functions).

- **per round** (``"per_round"``): the policy nodes' cumulative reward, the sum over rounds of
  their mean own-completion reward: the leaderboard's ``cumulative``, what the paper plots.
- **at equal generation** (``"at_budget"``): each policy node's own-completion reward summed
  over its first ``budget`` completions, the mean over the policy nodes. The budget is what
  the policy that generates least generates (:func:`generation_budget`), so every node of every
  run reaches it and no run needs to be longer. A node that answers 8 - J questions a round
  reaches it sooner at a low J: at equal generation a low J has fewer rounds (fewer optimizer
  steps) to learn in, which is the trade SAPO makes.
- **held out at the end** (``"held_out"``): the policy nodes' mean held-out accuracy at the
  run's last evaluation (NaN for a run without one).

A round's reward is the mean score of the node's completions that round, so reward times
completions is their summed score; the round in which a node reaches the budget counts only
the completions within it, each at that round's mean. ::

    >>> reward_at_budget(np.array([0.5, 1.0, 0.0]), np.array([4, 4, 4]), budget=6)
    (4.0, 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

SCORES = ("per_round", "at_budget", "held_out")
"""The scores, the ranked one (the primary) first."""
SCORE_NAMES = {"per_round": "reward per round", "at_budget": "reward at equal generation",
               "held_out": "held-out accuracy at the end"}


def round_rewards(rewards: np.ndarray, generated: np.ndarray) -> np.ndarray:
    """The summed score of a node's completions in each round: reward times completions, 0 in
    a round without any (whose reward is NaN)."""
    generated = np.asarray(generated, dtype=np.float64)
    return np.where(generated > 0, np.asarray(rewards, dtype=np.float64) * generated, 0.0)


def reward_at_budget(rewards: np.ndarray, generated: np.ndarray, budget: float
                     ) -> tuple[float, int]:
    """One node's own-completion reward summed over its first ``budget`` (> 0) completions,
    and the round (0-based) in which its completions reached ``budget``; rounds ``rewards``
    and ``generated`` (one value each). ``ValueError`` if it generated fewer."""
    if not budget > 0:
        raise ValueError(f"budget must be > 0, got {budget}")
    total = np.cumsum(generated)
    if not len(total) or total[-1] < budget:
        raise ValueError(f"the node generated {total[-1] if len(total) else 0} completions, "
                         f"fewer than the budget {budget}")
    last = int(np.searchsorted(total, budget))  # the first round at which it is reached
    before = total[last - 1] if last else 0
    summed = round_rewards(rewards[:last], generated[:last]).sum()
    return float(summed + rewards[last] * (budget - before)), last


def generation_budget(runs: Iterable[Mapping[str, Any]]) -> int:
    """The fewest completions a policy node of ``runs`` generated over its run, among the nodes
    that generated any (one that never answers scores 0 at every budget and sets none);
    ``ValueError`` if none did."""
    totals = [t for r in runs for t in r["generated"][:, r["uses_policy"]].sum(axis=0) if t > 0]
    if not totals:
        raise ValueError("no policy node generated a completion: there is no budget to share")
    return int(min(totals))


def run_scores(run: Mapping[str, Any], budget: float) -> dict[str, float]:
    """The three scores of one run (``SCORES``) at ``budget``, and ``budget_round``: the mean
    over its policy nodes that answered of the rounds they played to reach it (its 0-based
    round + 1); NaN where none did."""
    mine = run["uses_policy"]
    rewards, generated = run["rewards"][:, mine], run["generated"][:, mine]
    with np.errstate(all="ignore"):  # a round in which no policy node answered: NaN, skipped
        per_round = float(np.nan_to_num(np.nanmean(rewards, axis=1)).sum())
    at, rounds = [], []
    for k in range(rewards.shape[1]):
        if generated[:, k].sum() == 0:
            at.append(0.0)  # never answered: earned nothing of any budget
            continue
        summed, last = reward_at_budget(rewards[:, k], generated[:, k], budget)
        at.append(summed)
        rounds.append(last + 1)
    return {"per_round": per_round, "at_budget": float(np.mean(at)),
            "held_out": held_out_at_end(run),
            "budget_round": float(np.mean(rounds)) if rounds else float("nan")}


def held_out_at_end(run: Mapping[str, Any]) -> float:
    """The policy nodes' mean held-out accuracy at the run's last evaluation (NaN without
    one, or where every policy node sat it out)."""
    scores = run.get("held_out_scores")
    if scores is None or len(scores) == 0:
        return float("nan")
    last = np.asarray(scores[-1], dtype=np.float64)[run["uses_policy"]]
    return float(np.nanmean(last)) if np.isfinite(last).any() else float("nan")


def per_seed_scores(runs: Iterable[Mapping[str, Any]], budget: float) -> dict[str, np.ndarray]:
    """:func:`run_scores` of each run (the seeds of one policy, in order), by score."""
    each = [run_scores(r, budget) for r in runs]
    return {k: np.asarray([e[k] for e in each]) for k in (*SCORES, "budget_round")}
