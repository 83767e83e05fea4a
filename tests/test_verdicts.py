"""Paired verdicts with Holm's correction and the minimum detectable effect
(sapo_experiments.verdicts)."""

import math

import numpy as np
import pytest

from sapo_experiments.verdicts import (
    Comparison,
    holm,
    minimum_detectable_effect,
    paired,
    seeds_needed,
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
