"""``sapo-env bench-ratio``: ratio policies (adaptive I:J) scored against what adaptation can win.

Every policy plays every scenario (:mod:`sapo_experiments.bench_ratio.scenarios`: three stationary
swarms, skill that drifts, a curriculum, churn, attackers that turn on or go on and off) on
held-out seeds, all policies on the same seeds. Each scenario reports its headroom: the oracle
(the best schedule of a few equal phases, found on training seeds) minus the best fixed ratio
(also found there), and each policy the fraction of that headroom it captures, with 95% CIs
over the paired seeds. Beside reward per round, which ranks, each policy's reward at equal
generation and held-out accuracy at the end, with the report's tests decided (Holm,
equivalence). Two worlds (``tracks``): ``sim``, simulated learners, in which the paper's claim
holds, and ``real``, tiny real learners (``BenchConfig(track="real")``). ::

    from sapo_experiments.bench_ratio import BenchConfig, bench
    result = bench(BenchConfig(quick=True))
    print(result.table_markdown)

Modules: ``scenarios`` (the swarms), ``policies`` (the policies by label), ``tracks`` (the
worlds: learner, scenarios, fixed ratios, presets), ``config`` (the settings, one run),
``tuning`` (the training-seed searches: best fixed ratio, oracle, the policies' tuning),
``sweep`` (running and resuming), ``report`` (statistics, tables, figure), ``scores`` (a
run's three scores), ``scoreboard`` (them side by side, and the tests), ``cli``.
"""

from sapo_experiments.bench_ratio.config import BenchConfig, RunSpec
from sapo_experiments.bench_ratio.policies import POLICIES
from sapo_experiments.bench_ratio.report import Headroom, Row
from sapo_experiments.bench_ratio.scenarios import SCENARIOS
from sapo_experiments.bench_ratio.sweep import BenchResult, bench, run_one
from sapo_experiments.bench_ratio.tracks import TRACKS
from sapo_experiments.bench_ratio.tuning import tune

__all__ = ["POLICIES", "SCENARIOS", "TRACKS", "BenchConfig", "BenchResult", "Headroom", "Row",
           "RunSpec", "bench", "run_one", "tune"]
