"""Paired comparisons over seeds, decided together: a report's verdicts with Holm's correction
for the number of tests it makes, and the smallest effect its seeds can detect.

A sweep pairs its arms by seed (seed k draws the same questions and, with a common base, starts
from the same model in every arm), so each comparison is a paired t-test on the per-seed
differences. A report that makes m tests decides each at family-wise level ``alpha`` with
Holm's step-down procedure (Holm 1979): sort the m p-values, compare the i-th smallest with
``alpha / (m - i + 1)``, and stop at the first that fails. A verdict "higher" or "lower" then
says that the difference is decided in that direction with every test of the report counted;
"not decided" otherwise. With fewer than ``EXPLORATORY_BELOW`` seeds a verdict is labelled
exploratory whatever it says.

The minimum detectable effect is the true mean difference that a two-sided paired t-test at
level ``alpha`` detects with probability ``power`` given the seeds' standard deviation of the
differences: ``(t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n)`` (the usual normal
approximation with t quantiles in place of z), which a report states beside its result so
that "not decided" reads as "smaller than this, if anything".

Example::

    >>> comparisons = [paired("a - b", [1.0, 1.2, 0.9, 1.1], [0.0, 0.1, 0.0, 0.2]),
    ...                paired("c - b", [0.1, -0.2, 0.3, 0.0], [0.0, 0.1, 0.0, 0.2])]
    >>> [(c.name, c.verdict) for c in holm(comparisons)]
    [('a - b', 'higher'), ('c - b', 'not decided')]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sapo_env.extras import require

stats = require("scipy.stats", "sapo_experiments.verdicts")

ALPHA = 0.05
"""Family-wise error rate of a report's verdicts."""
POWER = 0.8
"""Power at which a report states its minimum detectable effect."""
EXPLORATORY_BELOW = 12
"""Seeds under which a verdict is labelled exploratory."""


@dataclass(frozen=True)
class Comparison:
    """One paired comparison over seeds, and its verdict once decided with the others."""

    name: str
    differences: tuple[float, ...]  #: per seed, a - b
    mean: float
    ci: float  #: half-width of the (uncorrected) 95% t interval of the mean difference
    p_value: float  #: two-sided paired t-test of a mean difference of 0
    reference: float = float("nan")  #: mean of b, to read the difference relative to it
    verdict: str = "not decided"  #: "higher", "lower" or "not decided", after :func:`holm`

    @property
    def seeds(self) -> int:
        return len(self.differences)

    @property
    def higher_in(self) -> int:
        """Seeds in which a is higher than b."""
        return sum(d > 0 for d in self.differences)

    @property
    def exploratory(self) -> bool:
        return self.seeds < EXPLORATORY_BELOW

    def detectable(self, alpha: float = ALPHA, power: float = POWER) -> float:
        """The minimum detectable mean difference at these seeds (module docstring)."""
        return minimum_detectable_effect(np.std(self.differences, ddof=1), self.seeds,
                                         alpha, power)


def paired(name: str, a: Sequence[float], b: Sequence[float]) -> Comparison:
    """The comparison of ``a`` with ``b``, paired by index (seed); both need the same length,
    at least 2."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"{name}: paired values need the same number of seeds, at least 2; "
                         f"got {len(a)} and {len(b)}")
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n, mean, sd = len(d), float(d.mean()), float(d.std(ddof=1))
    ci = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    if sd == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    return Comparison(name, tuple(map(float, d)), mean, ci, p, float(np.mean(b)))


def holm(comparisons: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """``comparisons`` in their order, each with its verdict at family-wise level ``alpha``
    over all of them (Holm's step-down procedure)."""
    order = sorted(range(len(comparisons)), key=lambda i: comparisons[i].p_value)
    m, decided = len(comparisons), set()
    for rank, i in enumerate(order):
        if comparisons[i].p_value > alpha / (m - rank):
            break
        decided.add(i)
    return [dataclasses.replace(c, verdict=("higher" if c.mean > 0 else "lower")
                                if i in decided else "not decided")
            for i, c in enumerate(comparisons)]


def minimum_detectable_effect(sd: float, n: int, alpha: float = ALPHA,
                              power: float = POWER) -> float:
    """The mean difference a two-sided paired t-test at ``alpha`` detects with probability
    ``power`` over ``n`` seeds whose differences have standard deviation ``sd``."""
    if n < 2:
        return float("nan")
    df = n - 1
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n))


def seeds_needed(sd: float, effect: float, alpha: float = ALPHA, power: float = POWER,
                 most: int = 1000) -> int | None:
    """The fewest seeds whose minimum detectable effect is at most ``effect`` (None: more
    than ``most``)."""
    for n in range(2, most + 1):
        if minimum_detectable_effect(sd, n, alpha, power) <= effect:
            return n
    return None
