"""Paired comparisons over seeds, decided together: a report's verdicts with Holm's correction
for the number of tests it makes, equivalence within a bound stated beforehand, and the
smallest effect its seeds can detect.

A sweep pairs its arms by seed (seed k draws the same questions and, with a common base, starts
from the same model in every arm), so each comparison is a paired t-test on the per-seed
differences. A report that makes m tests decides each at family-wise level ``alpha`` with
Holm's step-down procedure (Holm 1979): sort the m p-values, compare the i-th smallest with
``alpha / (m - i + 1)``, and stop at the first that fails. A verdict "higher" or "lower" then
says that the difference is decided in that direction with every test of the report counted;
"not decided" otherwise. With fewer than ``EXPLORATORY_BELOW`` seeds a verdict is labelled
exploratory whatever it says.

A comparison can also be decided the other way: its mean difference lies within an equivalence
bound ``±bound`` fixed before the runs (:func:`decide`). That is the two one-sided tests (TOST,
Schuirmann 1987): mean <= -bound and mean >= bound are each rejected by a one-sided paired
t-test, so the larger of their p-values is the equivalence test's p-value, and at level
``alpha`` it is rejected exactly when the (1 - 2 alpha) t interval lies inside ``±bound``. The
equivalence tests are a family of their own, with Holm's correction over it; a comparison that
is neither higher, lower nor equivalent is "not decided", and :func:`seeds_needed_for` says how
many seeds either test would need at its mean and spread.

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
    >>> level = paired("d - b", [1.00, 1.01, 0.99, 1.00], [1.0, 1.0, 1.0, 1.0])
    >>> [c.verdict for c in decide([comparisons[0], level], bounds=[0.1, 0.1])]
    ['higher', 'equivalent']
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
    verdict: str = "not decided"
    """"higher", "lower" or "not decided" after :func:`holm`; also "equivalent" or
    "identical" after :func:`decide`."""
    bound: float = float("nan")  #: the equivalence bound :func:`decide` tested (NaN: none)
    equivalence_p: float = float("nan")  #: the TOST p-value against ``bound`` (NaN: none)

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

    @property
    def decided(self) -> bool:
        return self.verdict != "not decided"

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


def holm_rejected(p_values: Sequence[float], alpha: float = ALPHA) -> set[int]:
    """The indices of ``p_values`` whose null hypotheses Holm's step-down procedure rejects
    at family-wise level ``alpha``."""
    order = sorted(range(len(p_values)),
                   key=lambda i: p_values[i] if not math.isnan(p_values[i]) else math.inf)
    m, rejected = len(p_values), set()
    for rank, i in enumerate(order):
        if not p_values[i] <= alpha / (m - rank):  # NaN fails too
            break
        rejected.add(i)
    return rejected


def holm(comparisons: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """``comparisons`` in their order, each with its verdict at family-wise level ``alpha``
    over all of them (Holm's step-down procedure)."""
    decided = holm_rejected([c.p_value for c in comparisons], alpha)
    return [dataclasses.replace(c, verdict=("higher" if c.mean > 0 else "lower")
                                if i in decided else "not decided")
            for i, c in enumerate(comparisons)]


def equivalence_p_value(differences: Sequence[float], bound: float) -> float:
    """The TOST p-value that the mean of the paired ``differences`` lies within ``±bound``
    (> 0): the larger of the one-sided t-tests' p-values of mean <= -bound and mean >= bound.
    Without spread, 0 inside the bound and 1 on or outside it."""
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    d = np.asarray(differences, dtype=np.float64)
    if len(d) < 2:
        raise ValueError(f"equivalence needs at least 2 seeds, got {len(d)}")
    n, mean, sd = len(d), float(d.mean()), float(d.std(ddof=1))
    if sd == 0:
        return 0.0 if abs(mean) < bound else 1.0
    se = sd / math.sqrt(n)
    above_lower = float(stats.t.sf((mean + bound) / se, n - 1))  # rejects mean <= -bound
    below_upper = float(stats.t.cdf((mean - bound) / se, n - 1))  # rejects mean >= bound
    return max(above_lower, below_upper)


def decide(comparisons: Sequence[Comparison], bounds: Sequence[float],
           alpha: float = ALPHA) -> list[Comparison]:
    """``comparisons`` in their order, each with its verdict: "higher" or "lower" where Holm
    over their difference tests decides it (:func:`holm`), else "equivalent" where Holm over
    their equivalence tests (:func:`equivalence_p_value` against ``bounds[i]``, each stated
    before the data) decides that its mean difference lies within ``±bounds[i]``, else "not
    decided". Both families at family-wise level ``alpha``; a bound that is not > 0 (NaN: none)
    makes no equivalence test, and its comparison counts in that family as one not rejected.

    A comparison whose every difference is exactly 0 is "identical": its two arms computed
    the same values on every seed (an arm that runs as the other up to where the score is
    read), which says nothing about either; it makes no equivalence test and counts in both
    families as one not rejected."""
    if len(bounds) != len(comparisons):
        raise ValueError(f"bounds: one per comparison, got {len(bounds)} for "
                         f"{len(comparisons)}")
    same = [not any(c.differences) for c in comparisons]
    tested = [dataclasses.replace(c, bound=float(b), equivalence_p=equivalence_p_value(
        c.differences, b) if b > 0 and not alike else float("nan"))
        for c, b, alike in zip(comparisons, bounds, same)]
    equivalent = holm_rejected([c.equivalence_p for c in tested], alpha)
    return [dataclasses.replace(c, verdict="identical") if same[i] else c if c.decided
            else dataclasses.replace(c, verdict="equivalent") if i in equivalent else c
            for i, c in enumerate(holm(tested, alpha))]


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


def equivalence_margin(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """How far inside its bound a true mean difference must lie for the equivalence test at
    ``alpha`` to decide it with probability ``power`` over ``n`` seeds whose differences have
    standard deviation ``sd``: ``(t_{1-alpha, n-1} + t_{power, n-1}) * sd / sqrt(n)`` (the
    usual approximation for a mean away from both ends of the bound)."""
    if n < 2:
        return float("nan")
    df = n - 1
    return float((stats.t.ppf(1 - alpha, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n))


def seeds_needed_for(comparison: Comparison, alpha: float = ALPHA, power: float = POWER,
                     most: int = 1000) -> int | None:
    """The fewest seeds at which, if its mean and spread stayed as measured, ``comparison``
    would be decided with probability ``power``: as a difference (:func:`seeds_needed` for its
    mean) or, with a ``bound`` it lies within, as equivalent (``equivalence_margin`` at most
    ``bound - |mean|``), whichever needs fewer. None: more than ``most`` either way."""
    sd, mean = float(np.std(comparison.differences, ddof=1)), abs(comparison.mean)
    if sd == 0:
        return comparison.seeds
    found = [seeds_needed(sd, mean, alpha, power, most)] if mean > 0 else []
    room = comparison.bound - mean
    if room > 0:  # NaN (no bound) is not
        found.append(next((n for n in range(2, most + 1)
                           if equivalence_margin(sd, n, alpha, power) <= room), None))
    found = [n for n in found if n is not None]
    return min(found) if found else None
