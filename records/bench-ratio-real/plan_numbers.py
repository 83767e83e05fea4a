"""The numbers the plan in README.md rests on, from committed run arrays: the seed-to-seed
spread of tiny common-base runs at target 0.10 with TIS (records/tiny-reproduce/sparse-signal/,
8 seeds, 100 rounds: ``p10/`` 8/0, ``p10-tis/`` 4/4 with TIS) and what the real track's seeds
can then detect or show equivalent (``sapo_experiments.verdicts``). ::

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


def runs(folder: str, name: str) -> list[dict]:
    out = []
    for k in range(8):
        run = load_run(SPARSE / folder / "runs" / f"{name}_seed{k}.npz")
        run["uses_policy"] = np.ones(run["rewards"].shape[1], dtype=bool)
        out.append(run)
    return out


def main() -> None:
    base, shared = runs("p10", "8-0"), runs("p10-tis", "4-4")
    budget = generation_budget(base + shared)
    a, b = per_seed_scores(base, budget), per_seed_scores(shared, budget)
    print(f"budget {budget} completions a node (4/4's 100 rounds; 8/0 reaches it in round "
          f"{a['budget_round'][0]:.0f})")
    for score in ("per_round", "at_budget", "held_out"):
        d = b[score] - a[score]
        sd, mean = float(np.std(d, ddof=1)), float(np.mean(a[score]))
        print(f"{score}: 8/0 {mean:.3f} (seeds sd {np.std(a[score], ddof=1):.3f}); 4/4 TIS - "
              f"8/0 {np.mean(d):+.3f}, paired sd {sd:.4f} = {sd / mean:.1%} of 8/0")
        rel = sd / mean
        for n in (10, 12, 16):
            print(f"  {n} seeds: detects {minimum_detectable_effect(rel, n):.1%} "
                  f"({minimum_detectable_effect(rel, n, 0.05 / TESTS):.1%} at 5%/{TESTS}); "
                  f"equivalent within a bound {equivalence_margin(rel, n):.1%} "
                  f"({equivalence_margin(rel, n, 0.05 / TESTS):.1%} at 5%/{TESTS}) above "
                  "the true difference")
        for bound in (0.01, 0.03):
            n = next(n for n in range(2, 5000) if equivalence_margin(rel, n) <= bound)
            print(f"  a true difference of 0 shown within +-{bound:.0%} (80%, 5%): {n} seeds")


if __name__ == "__main__":
    main()
