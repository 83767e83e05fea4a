"""Paired verdicts with Holm's correction and the minimum detectable effect
(sapo_experiments.verdicts)."""

import dataclasses
import math

import numpy as np
import pytest

from sapo_experiments.verdicts import (
    Comparison,
    decide,
    equivalence_margin,
    equivalence_p_value,
    holm,
    holm_rejected,
    minimum_detectable_effect,
    paired,
    seeds_needed,
    seeds_needed_for,
)


def test_paired_gives_the_t_interval_and_p_value_of_the_differences():
    c = paired("x", [3.0, 4.0, 6.0], [1.0, 1.0, 2.0])  # differences 2, 3, 4
    assert c.differences == (2.0, 3.0, 4.0) and c.mean == 3.0 and c.higher_in == 3
    assert c.reference == pytest.approx(4 / 3)
    # sd 1, n 3: t(0.975, 2) = 4.303; t statistic 3 / (1/sqrt 3) = 5.196, p = 0.0351
    assert c.ci == pytest.approx(4.3027 / math.sqrt(3), rel=1e-4)
    assert c.p_value == pytest.approx(0.03512, rel=1e-3)
    assert c.exploratory
    with pytest.raises(ValueError, match="same number of seeds"):
        paired("x", [1.0, 2.0], [1.0])


def test_holm_steps_down_and_stops_at_the_first_failure():
    def with_p(name, p):
        return Comparison(name, (1.0,), 1.0, 0.1, p)
    tests = [with_p("a", 0.01), with_p("b", 0.04), with_p("c", 0.03), with_p("d", 0.2)]
    # sorted: 0.01 <= 0.05/4, 0.03 > 0.05/3: only a is decided
    assert [c.verdict for c in holm(tests)] == ["higher", "not decided", "not decided",
                                                "not decided"]
    # alone, b (0.04 <= 0.05) would be decided
    assert holm([tests[1]])[0].verdict == "higher"
    lower = Comparison("e", (-1.0,), -1.0, 0.1, 0.001)
    assert holm([lower])[0].verdict == "lower"


def test_a_difference_without_spread_is_decided_unless_it_is_zero():
    assert paired("x", [1.0, 2.0], [0.0, 1.0]).p_value == 0.0
    assert paired("x", [1.0, 2.0], [1.0, 2.0]).p_value == 1.0


def test_minimum_detectable_effect_shrinks_with_seeds_as_one_over_root_n():
    one = minimum_detectable_effect(1.0, 12)
    # t(0.975, 11) + t(0.8, 11) = 2.201 + 0.876
    assert one == pytest.approx((2.2010 + 0.8755) / math.sqrt(12), rel=1e-3)
    assert minimum_detectable_effect(2.0, 12) == pytest.approx(2 * one)
    assert minimum_detectable_effect(1.0, 48) < one / 1.9
    assert math.isnan(minimum_detectable_effect(1.0, 1))


def test_seeds_needed_is_the_first_n_that_detects_the_effect():
    n = seeds_needed(1.0, 0.9)
    assert minimum_detectable_effect(1.0, n) <= 0.9 < minimum_detectable_effect(1.0, n - 1)
    assert seeds_needed(1.0, 1e-3, most=50) is None


def test_the_detectable_effect_of_a_comparison_uses_its_own_spread():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1, 1, 24), rng.normal(0, 1, 24)
    c = paired("x", a, b)
    assert c.detectable() == pytest.approx(
        minimum_detectable_effect(float(np.std(a - b, ddof=1)), 24))
    assert not c.exploratory


def _with_tost_p(p: float, seeds: int = 6):
    """Differences of mean 0 and their bound at which the TOST p-value is ``p``."""
    from scipy import stats

    d = np.array([1.0, -1.0] * (seeds // 2))
    se = np.std(d, ddof=1) / math.sqrt(seeds)
    return d, float(stats.t.isf(p, seeds - 1) * se)


def test_equivalence_p_value_is_the_larger_one_sided_p_value():
    from scipy import stats

    d = [0.3, 0.1, 0.2]  # mean 0.2, sd 0.1
    se = 0.1 / math.sqrt(3)
    expected = max(stats.t.sf((0.2 + 0.5) / se, 2), stats.t.cdf((0.2 - 0.5) / se, 2))
    assert equivalence_p_value(d, 0.5) == pytest.approx(expected)
    assert expected == pytest.approx(stats.t.cdf(-0.3 / se, 2))  # the nearer end decides
    # at level alpha, equivalent exactly when the (1 - 2 alpha) interval lies inside the bound
    upper_end = 0.2 + stats.t.ppf(0.95, 2) * se
    assert equivalence_p_value(d, upper_end * 1.001) < 0.05 < equivalence_p_value(
        d, upper_end * 0.999)
    assert equivalence_p_value([1.0, 1.0], 2.0) == 0.0  # no spread, inside
    assert equivalence_p_value([1.0, 1.0], 1.0) == 1.0  # no spread, on the bound
    with pytest.raises(ValueError, match="bound must be > 0"):
        equivalence_p_value(d, 0.0)


def test_decide_tries_equivalence_only_where_no_difference_is_decided():
    higher = paired("higher", [1.0, 1.2, 0.9, 1.1], [0.0, 0.1, 0.0, 0.2])
    level = paired("level", [1.00, 1.01, 0.99, 1.00], [1.0, 1.0, 1.0, 1.0])
    wide = paired("wide", [1.0, -1.0, 0.5, -0.5], [0.0, 0.0, 0.0, 0.0])
    decided = decide([higher, level, wide], bounds=[5.0, 0.1, 0.1])
    assert [c.verdict for c in decided] == ["higher", "equivalent", "not decided"]
    assert decided[1].bound == 0.1 and decided[1].equivalence_p < 0.05 and decided[1].decided
    assert not decided[2].decided and decided[2].equivalence_p > 0.05
    with pytest.raises(ValueError, match="one per comparison"):
        decide([higher], bounds=[])


def test_equivalence_tests_are_holm_corrected_as_a_family():
    d, bound = _with_tost_p(0.04)
    alone = paired("a", d, np.zeros(len(d)))
    assert alone.p_value == 1.0  # mean 0: no difference to decide
    assert decide([alone], [bound])[0].verdict == "equivalent"  # 0.04 <= 0.05
    twice = decide([alone, dataclasses.replace(alone, name="b")], [bound, bound])
    assert [c.verdict for c in twice] == ["not decided"] * 2  # 0.04 > 0.05 / 2
    assert holm_rejected([0.01, 0.04, 0.03]) == {0}
    assert holm_rejected([0.01, 0.02]) == {0, 1} and holm_rejected([float("nan")]) == set()
    # a NaN (no test) sorts last whatever its place, and still counts in the family's size
    assert holm_rejected([float("nan"), 0.02]) == {1}
    assert holm_rejected([float("nan"), 0.03]) == set()  # 0.03 > 0.05 / 2
    no_bound = decide([alone], [float("nan")])[0]
    assert no_bound.verdict == "not decided" and np.isnan(no_bound.equivalence_p)


def test_arms_that_computed_the_same_values_are_identical_not_equivalent():
    same = paired("same", [0.3, 0.5, 0.4, 0.6], [0.3, 0.5, 0.4, 0.6])
    d, bound = _with_tost_p(0.04)
    close = paired("close", d, np.zeros(len(d)))
    decided = decide([same, close], bounds=[0.1, bound])
    assert decided[0].verdict == "identical" and decided[0].decided
    assert np.isnan(decided[0].equivalence_p)  # no test: it lends no power to the others
    assert decided[1].verdict == "not decided"  # 0.04 > 0.05 / 2: still a family of two


def test_seeds_needed_for_takes_the_test_that_decides_sooner():
    d = np.array([0.5, -0.5] * 3)  # mean 0, sd 0.5477
    sd = float(np.std(d, ddof=1))
    c = dataclasses.replace(paired("x", d, np.zeros(6)), bound=1.0)
    n = seeds_needed_for(c)
    assert equivalence_margin(sd, n) <= 1.0 < equivalence_margin(sd, n - 1)
    assert seeds_needed_for(dataclasses.replace(c, bound=float("nan"))) is None  # mean 0
    shifted = dataclasses.replace(paired("y", d + 2.0, np.zeros(6)), bound=1.0)
    assert seeds_needed_for(shifted) == seeds_needed(sd, 2.0)  # outside the bound: difference
    # inside the bound but near its end, the difference test can be the quicker one
    near = dataclasses.replace(paired("z", d + 0.9, np.zeros(6)), bound=1.0)
    assert seeds_needed_for(near) == seeds_needed(sd, 0.9)
