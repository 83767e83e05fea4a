"""``sapo-env bench-ratio``: ratio policies (adaptive I:J) evaluated on held-out swarm seeds.

Every policy of ``agents.ratio`` (fixed ratios, the pool-quality and learning-progress rules,
discounted UCB, EXP3, Thompson sampling, and a trained PPO policy when given) drives simulated
learners under the paper's protocol in three settings (every node, one node among fixed J = 4
nodes, a mixed population) over several seeds. The table reports per policy the cumulative
reward with its 95% CI and its paired difference to the best fixed ratio, the generation cost
and the reward per 1,000 generated completions, and for the swarm its cumulative reward and
its worst node; a figure shows J over time. ::

    from experiments.bench_ratio import BenchConfig, bench
    result = bench(BenchConfig(quick=True))
    print(result.table_markdown)

Modules: ``config`` (policies, settings, the benchmark's settings), ``sweep`` (running and
resuming), ``report`` (statistics, table, figure), ``cli``.
"""

from experiments.bench_ratio.config import POLICIES, SETTINGS, BenchConfig, RunSpec
from experiments.bench_ratio.report import Row
from experiments.bench_ratio.sweep import BenchResult, bench, run_one

__all__ = ["POLICIES", "SETTINGS", "BenchConfig", "BenchResult", "Row", "RunSpec", "bench",
           "run_one"]
