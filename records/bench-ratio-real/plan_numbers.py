"""The numbers the plan in README.md rests on, from committed run arrays: the seed-to-seed
spread of tiny common-base runs at target 0.10 with TIS (records/tiny-reproduce/sparse-signal/,
8 seeds, 100 rounds: ``p10/`` 8/0, ``p10-tis/`` 4/4 with TIS) and of the partial specialists'
(records/where-sharing-pays/partial-specialists/, 12 seeds, 200 rounds: 8/0 and 4/4 with TIS),
and what the real track's seeds can then detect or show equivalent
(``sapo_experiments.verdicts``). ::

    python records/bench-ratio-real/plan_numbers.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sapo_experiments.bench_ratio.scores import generation_budget, per_seed_scores
from sapo_experiments.run_files import load_run
from sapo_experiments.verdicts import equivalence_margin, minimum_detectable_effect

SPARSE = Path(__file__).resolve().parents[1] / "tiny-reproduce" / "sparse-signal"
TESTS = 9  #: the real track's tests: the headroom on 3 scores, 6 adaptive policies per round


PARTIAL = Path(__file__).resolve().parents[1] / "where-sharing-pays" / "partial-specialists"
PARTIAL_TESTS = 3  #: the partial specialists' scenario: the headroom on 3 scores
PARTIAL_BUDGET = 3200  #: fixed-6's 16 completions a round x 200 rounds


def runs(folder: Path, name: str, seeds: int) -> list[dict]:
    out = []
    for k in range(seeds):
        run = load_run(folder / "runs" / f"{name}_seed{k}.npz")
        run["uses_policy"] = np.ones(run["rewards"].shape[1], dtype=bool)
        out.append(run)
    return out


def main() -> None:
    print("== common base at 0.10 (sparse-signal p10 / p10-tis), 9 tests ==")
    base, shared = runs(SPARSE / "p10", "8-0", 8), runs(SPARSE / "p10-tis", "4-4", 8)
    spread(base, shared, generation_budget(base + shared), TESTS, "4/4's 100 rounds")
    print(f"== partial specialists (where-sharing-pays), {PARTIAL_TESTS} tests ==")
    base, shared = runs(PARTIAL, "8-0", 12), runs(PARTIAL, "4-4", 12)
    spread(base, shared, PARTIAL_BUDGET, PARTIAL_TESTS, "fixed-6's 200 rounds")


def spread(base: list[dict], shared: list[dict], budget: int, tests: int, what: str) -> None:
    """4/4 TIS - 8/0 on the three scores: its paired spread and what it lets seeds decide."""
    a, b = per_seed_scores(base, budget), per_seed_scores(shared, budget)
    print(f"budget {budget} completions a node ({what}; 8/0 reaches it in round "
          f"{a['budget_round'][0]:.0f})")
    for score in ("per_round", "at_budget", "held_out"):
        d = b[score] - a[score]
        sd, mean = float(np.std(d, ddof=1)), float(np.mean(a[score]))
        print(f"{score}: 8/0 {mean:.3f} (seeds sd {np.std(a[score], ddof=1):.3f}); 4/4 TIS - "
              f"8/0 {np.mean(d):+.3f}, paired sd {sd:.4f} = {sd / mean:.1%} of 8/0")
        rel = sd / mean
        for n in (10, 12, 16):
            print(f"  {n} seeds: detects {minimum_detectable_effect(rel, n):.1%} "
                  f"({minimum_detectable_effect(rel, n, 0.05 / tests):.1%} at 5%/{tests}); "
                  f"equivalent within a bound {equivalence_margin(rel, n):.1%} "
                  f"({equivalence_margin(rel, n, 0.05 / tests):.1%} at 5%/{tests}) above "
                  "the true difference")
        for bound in (0.01, 0.03):
            n = next(n for n in range(2, 5000) if equivalence_margin(rel, n) <= bound)
            print(f"  a true difference of 0 shown within +-{bound:.0%} (80%, 5%): {n} seeds")


if __name__ == "__main__":
    main()
