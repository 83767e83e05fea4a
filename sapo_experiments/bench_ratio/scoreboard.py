"""The leaderboard's three scores side by side (:mod:`sapo_experiments.bench_ratio.scores`):
per round, at equal generation and held out at the end, each against the best fixed ratio,
paired by seed; which score ranks; what the seeds decide.

Per scenario the policies are ranked by reward per round (``RANKED``, fixed before the runs:
the paper's score); the other two stand beside it, and every policy's paired difference to the
best fixed ratio on every score is printed with its 95% CI. The report's **tests** are fewer,
also fixed before the runs (:func:`tests_of`):

- the headroom on every score with data: the oracle minus the best fixed ratio;
- every adaptive or entered policy minus the best fixed ratio, on the ranked score.

They are decided together (``sapo_experiments.verdicts.decide``): "higher" or "lower" where Holm
over their difference tests decides it (family-wise 5%), else "equivalent" where Holm over their
equivalence tests decides that the difference lies within ``± EQUIVALENCE[score]`` times the
best fixed ratio's mean on that score, else "not decided", with the seeds that would decide it
at its mean and spread (``verdicts.seeds_needed_for``: 80% power at 5% divided by the number of
tests, Holm's strictest threshold); "identical" where the two arms scored the same on every
seed (an oracle whose first phase is the best fixed ratio, at a generation budget reached
within that phase), which is no evidence either way. Under ``verdicts.EXPLORATORY_BELOW`` seeds
every verdict is labelled exploratory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.report import Headroom, kind_of
from sapo_experiments.bench_ratio.scores import (
    SCORE_NAMES,
    SCORES,
    generation_budget,
    per_seed_scores,
)
from sapo_experiments.intervals import ci_digits
from sapo_experiments.reproduce.report import format_value, mean_ci
from sapo_experiments.verdicts import (
    ALPHA,
    EXPLORATORY_BELOW,
    Comparison,
    decide,
    paired,
    seeds_needed_for,
)

RANKED = SCORES[0]  #: the score that ranks the policies: reward per round
EQUIVALENCE = {"per_round": 0.03, "at_budget": 0.03, "held_out": 0.10}
"""Each score's equivalence bound, as a fraction of the best fixed ratio's mean on it."""
DIGITS = {"per_round": 1, "at_budget": 1, "held_out": 3}  #: decimals a score is printed with


@dataclass
class Cell:
    """One policy's score, and its paired difference to the best fixed ratio."""

    mean: float  #: NaN: no data (no held-out evaluation)
    ci: float
    vs_best: float | None = None
    vs_best_ci: float | None = None


@dataclass
class ScoreRow:
    scenario: str
    policy: str
    kind: str
    budget_round: float  #: rounds its policy nodes played to reach the budget (mean)
    cells: dict[str, Cell]


@dataclass
class Board:
    """One scenario's three scores."""

    scenario: str
    budget: int  #: completions a policy node generates at equal generation
    best_fixed: str | None
    best_fixed_on: str
    oracle: str | None
    rows: list[ScoreRow]  #: ranked by ``RANKED``


@dataclass
class Test:
    """A test of the report, decided with the others."""

    scenario: str
    policy: str
    score: str
    comparison: Comparison
    seeds_needed: int | None  #: where not decided: seeds that would decide it

    @property
    def headroom(self) -> bool:
        return self.comparison.name.startswith("headroom")


def boards(config: BenchConfig, runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
           headrooms: Sequence[Headroom]) -> tuple[list[Board], list[Test]]:
    """Every scenario's board (its best fixed ratio and oracle as its ``Headroom`` says) and
    the report's tests, decided."""
    out, comparisons, bounds, where = [], [], [], []
    for h in headrooms:
        policies = config.policies_of(h.scenario)
        budget = generation_budget(r for p in policies for r in runs[(h.scenario, p)])
        scores = {p: per_seed_scores(runs[(h.scenario, p)], budget) for p in policies}
        best = h.best_fixed if h.best_fixed in scores else None
        rows = []
        for p in policies:
            cells = {}
            for score in SCORES:
                mean, ci = mean_ci(scores[p][score])
                cell = Cell(mean, ci)
                if best is not None and p != best and np.isfinite(mean):
                    cell.vs_best, cell.vs_best_ci = mean_ci(scores[p][score]
                                                            - scores[best][score])
                cells[score] = cell
            rows.append(ScoreRow(h.scenario, p, kind_of(p),
                                 float(np.nanmean(scores[p]["budget_round"])), cells))
        rows.sort(key=lambda r: -r.cells[RANKED].mean)
        out.append(Board(h.scenario, budget, best, h.best_fixed_on, h.oracle, rows))
        for name, policy, score in tests_of(h, policies, scores):
            comparisons.append(paired(name, scores[policy][score], scores[best][score]))
            bounds.append(EQUIVALENCE[score] * abs(float(np.mean(scores[best][score]))))
            where.append((h.scenario, policy, score))
    decided = decide(comparisons, bounds)
    strictest = ALPHA / max(len(decided), 1)
    return out, [Test(s, p, score, c, None if c.decided else seeds_needed_for(c, strictest))
                 for (s, p, score), c in zip(where, decided)]


def tests_of(h: Headroom, policies: Sequence[str], scores: Mapping[str, Mapping[str, Any]]
             ) -> list[tuple[str, str, str]]:
    """The tests of one scenario (module docstring), as (name, policy, score); none without
    a best fixed ratio or with fewer than 2 seeds."""
    best = h.best_fixed
    if best not in scores or len(scores[best][RANKED]) < 2:
        return []
    found = []
    if h.oracle is not None:
        found += [(f"headroom {SCORE_NAMES[s]} in {h.scenario}", h.oracle, s) for s in SCORES
                  if np.isfinite(scores[h.oracle][s]).all() and np.isfinite(
                      scores[best][s]).all()]
    found += [(f"{p} - {best} {SCORE_NAMES[RANKED]} in {h.scenario}", p, RANKED)
              for p in policies if kind_of(p) in ("adaptive", "yours")]
    return found


def signed(mean: float, ci: float | None, score: str) -> str:
    """A difference on ``score`` and its 95% CI, "+0.012 ± 0.009", with ``DIGITS[score]``
    decimals or the more :func:`ci_digits` needs to show the interval's side of 0."""
    d = ci_digits(mean, ci, DIGITS[score])
    return f"{mean:+.{d}f}" + ("" if ci is None or not np.isfinite(ci) else f" ± {ci:.{d}f}")


def _cell(cell: Cell, score: str) -> str:
    return "–" if not np.isfinite(cell.mean) else format_value(cell.mean, cell.ci,
                                                               DIGITS[score])


def _versus(cell: Cell, score: str, test: Test | None) -> str:
    if cell.vs_best is None:
        return "–"
    text = signed(cell.vs_best, cell.vs_best_ci, score)
    return text + (f" **{test.comparison.verdict}**" if test is not None else "")


def markdown(boards_: Sequence[Board], tests: Sequence[Test], config: BenchConfig) -> str:
    """The three scores' tables, one per scenario, and what the tests decide."""
    lines = [
        "## Three scores: per round, at equal generation, held out",
        "",
        f"Track `{config.track}`: {config.track_spec.world}. Ranked by **{SCORE_NAMES[RANKED]}** "
        "(the cumulative reward above, the score fixed before the runs); beside it the "
        "reward at equal generation (each policy node's own-completion reward summed over its "
        "first B completions, B the fewest any policy node generated, so no run needs to be "
        "longer; rounds to B: how many rounds that took) and the held-out accuracy at the "
        "last evaluation. vs best fixed: paired difference to the best fixed ratio, 95% CI; "
        "the report's tests carry their verdict."]
    by = {(t.scenario, t.policy, t.score): t for t in tests}
    for b in boards_:
        lines += ["", f"**{b.scenario}**: B = {b.budget:,} completions a policy node; best fixed "
                  f"ratio {b.best_fixed or '–'} (chosen on the {b.best_fixed_on}).", "",
                  "| rank | policy | per round | vs best fixed | at equal generation | vs best "
                  "fixed | rounds to B | held out | vs best fixed |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for rank, r in enumerate(b.rows, 1):
            name = r.policy + (" (best fixed)" if r.policy == b.best_fixed else "") + (
                " (oracle)" if r.policy == b.oracle else "")
            cells = [c for s in SCORES for c in (
                _cell(r.cells[s], s), _versus(r.cells[s], s, by.get((r.scenario, r.policy, s))))]
            cells.insert(4, format_value(r.budget_round, None, 0))
            lines.append(f"| {rank} | {name} | " + " | ".join(cells) + " |")
    lines += ["", tests_text(tests, config)]
    return "\n".join(lines) + "\n"


def tests_text(tests: Sequence[Test], config: BenchConfig) -> str:
    """What the tests decide, and how many seeds would decide the rest."""
    if not tests:
        return "No tests: no best fixed ratio, no adaptive policy or fewer than 2 seeds."
    bounds = ", ".join(f"± {EQUIVALENCE[s]:.0%} ({SCORE_NAMES[s]})" for s in SCORES)
    text = [f"**Tests** ({len(tests)}; Holm over their difference tests and, apart, over "
            f"their equivalence tests, family-wise 5%; equivalent: within {bounds} of the "
            "best fixed ratio's mean; seeds that would decide one: 80% power at 5% / "
            f"{len(tests)}, at its mean and spread)" + (
                f", **exploratory** ({config.seeds} seeds, under {EXPLORATORY_BELOW})"
                if config.seeds < EXPLORATORY_BELOW else "") + ":", ""]
    for t in tests:
        c = t.comparison
        relative = f" ({c.mean / c.reference:+.1%})" if c.reference else ""
        what = (f"headroom on {SCORE_NAMES[t.score]} in {t.scenario} ({t.policy})"
                if t.headroom else f"{t.policy} in {t.scenario}")
        more = ("; its two arms computed the same score on every seed: no evidence either way"
                if c.verdict == "identical" else "" if c.decided
                else f"; {t.seeds_needed} seeds would decide it" if t.seeds_needed
                else "; more than 1000 seeds would")
        text.append(f"- {what}: {signed(c.mean, c.ci, t.score)}{relative}, {c.higher_in} of "
                    f"{c.seeds} seeds higher: **{c.verdict}**{more}")
    return "\n".join(text)
