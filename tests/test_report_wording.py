"""The ratio benchmark's report says what its own intervals say: an interval is printed with
the decimals that show its side of 0, "decided" means the printed interval lies above 0, and a
captured fraction too uncertain to mean anything is printed "n/r", not as a number."""

from __future__ import annotations

import re

import numpy as np
import pytest

from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.report import (
    Headroom,
    Row,
    captured_text,
    format_markdown,
    headroom_text,
    lies_above_zero,
    signed,
    verdict,
)

# The committed benchmark's drift scenario (records/bench-ratio/summary.json): the headroom's
# interval lies above 0 (0.936 - 0.896 = 0.040) but at one decimal it prints "+0.9 ± 0.9".
DRIFT = Headroom("drift", 10, "fixed-7", "training seeds", 80.41, "schedule-7,7,2,0", 81.35,
                 0.9361179778623395, 0.8960009782608626, True, None, 1.1507649935368072)


def printed_ends(text: str) -> tuple[float, float]:
    mean, ci = (float(x) for x in re.fullmatch(r"([+-]\d+\.\d+) ± (\d+\.\d+)", text).groups())
    return mean - ci, mean + ci


def test_a_decided_headroom_is_printed_above_zero():
    assert signed(DRIFT.headroom, DRIFT.headroom_ci) == "+0.94 ± 0.90"
    assert lies_above_zero(DRIFT.headroom, DRIFT.headroom_ci)
    text = headroom_text(DRIFT)
    assert "**Headroom: +0.94 ± 0.90** over 10 held-out seeds, its 95% CI lies above 0 " \
        "(uncorrected; the tests, where printed, are Holm-corrected)." in text
    assert "+0.9 ± 0.9" not in text
    assert "Headroom beyond its CI in drift (+0.94 ± 0.90)." in verdict(
        [DRIFT], [], BenchConfig(seeds=10, tuned=None))


def test_an_interval_whose_printed_end_is_zero_is_not_decided():
    touching = Headroom(**{**DRIFT.__dict__, "headroom": 1.0, "headroom_ci": 0.9996,
                           "decided": False})
    assert signed(1.0, 0.9996) == "+1.000 ± 1.000" and not lies_above_zero(1.0, 0.9996)
    assert "**Headroom: +1.000 ± 1.000** over 10 held-out seeds, its 95% CI reaches 0 or " \
        "below" in headroom_text(touching)


def test_decided_is_what_the_printed_interval_says():
    rng = np.random.default_rng(36)
    means = np.concatenate([rng.normal(0, 2, 3000), rng.uniform(-1, 1, 1000) * 1e-3])
    cis = np.abs(means + rng.normal(0, [0.05] * 3000 + [1e-4] * 1000))
    for mean, ci in zip(means, cis):
        lower, _ = printed_ends(signed(mean, ci))
        assert lies_above_zero(mean, ci) == (round(lower, 3) > 0), (mean, ci)
        if lies_above_zero(mean, ci):
            assert mean - ci > 0  # never decided when the exact interval reaches 0


def row(policy, captured, captured_ci, diff=-1.4, diff_ci=1.5):
    return Row("drift", policy, "yours", 10, 79.0, 5.0, diff, diff_ci, captured, captured_ci,
               0.37, 39.4, 8.4, 3.1, 78.0, 65.0)


def test_a_captured_fraction_wider_than_the_headroom_is_not_printed_as_a_number():
    config = BenchConfig(seeds=10, tuned=None, scenarios=("drift",))
    wide, narrow = row("my_policy:BackOff", -1.55, 2.73), row("exp3", 0.34, 0.24, 0.9, 0.7)
    assert captured_text(wide) == "n/r" and captured_text(narrow) == "34 ± 24%"
    assert captured_text(row("x", None, None)) == "–"
    text = format_markdown([DRIFT], [wide, narrow], config)
    assert "-155" not in text and "273" not in text
    assert "| my_policy:BackOff | 79.0 ± 5.0 | -1.4 ± 1.5 | n/r |" in text
    assert "n/r: not resolvable, the captured fraction's 95% CI is wider than ± 100%" in text
    assert "n/r:" not in format_markdown([DRIFT], [narrow], config)


@pytest.mark.parametrize("diff, ci, beats", [(2.1, 0.4, True), (0.04, 0.04, False),
                                             (0.046, 0.04, True)])
def test_beating_the_best_fixed_ratio_uses_the_same_rule(diff, ci, beats):
    text = verdict([DRIFT], [row("exp3", None, None, diff, ci)], BenchConfig(seeds=10, tuned=None))
    assert ("Beating the best fixed ratio beyond the CI: exp3 in drift "
            f"({signed(diff, ci)})" in text) == beats


def test_the_reproduce_verdicts_read_the_printed_interval():
    """``sapo-env reproduce`` prints a ratio to 8/0 with 2 decimals, or 3 where 2 would hide
    its side of 1 (lr3e-5-long's 4/4: 0.979 ± 0.018 excludes 1, "0.98 ± 0.02" touches it),
    and calls it distinguishable only where the printed interval excludes 1; a change is
    printed with 3 decimals, and "rose" only where the printed interval lies above 0."""
    from sapo_experiments.reproduce.report import format_ratio, side_as_printed

    assert format_ratio(0.9793819827718684, 0.01767185277370981) == "0.979 ± 0.018"
    assert format_ratio(0.93, 0.03) == "0.93 ± 0.03" and format_ratio(1.0, 0.0) == "1.00 ± 0.00"
    assert format_ratio(0.9996, 0.0004) == "1.000 ± 0.000"  # touches 1 at 3 decimals too
    assert side_as_printed(0.9996, 0.0004, 1.0, 3) == 0
    assert side_as_printed(0.97, 0.01, 1.0, 2) == -1 and side_as_printed(1.05, 0.02, 1.0, 2) == 1
    assert side_as_printed(0.0126, 0.0124, 0.0, 3) == 1  # "+0.013 ± 0.012": rose
    assert side_as_printed(0.0124, 0.0119, 0.0, 3) == 0  # "+0.012 ± 0.012": flat
