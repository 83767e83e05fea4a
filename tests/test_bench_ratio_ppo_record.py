"""records/bench-ratio-real/ppo/: the PPO meta-agent trained among the simulated track's nodes.
Its report in that world (``sim/results.md``) is what its committed run arrays give, every line
of it, with the committed model and tuning entry."""

from __future__ import annotations

from pathlib import Path

from test_bench_ratio_record import runs_in

from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.sweep import tables

PPO = Path(__file__).resolve().parents[1] / "records" / "bench-ratio-real" / "ppo"


def test_the_simulated_worlds_report_is_what_its_arrays_give():
    config = BenchConfig(track="sim", scenarios=("all",), rounds=200, seeds=12,
                         policies=("fixed-0", "fixed-2", "fixed-4", "fixed-6", "fixed-7", "ppo"),
                         sb3_model=str(PPO / "ppo_ratio.zip"), tuned=PPO / "tuned-sim.json")
    assert config.best_fixed("all") == "fixed-6" and config.oracle("all") == "schedule-6,4,6,6"
    runs = runs_in(PPO / "sim" / "runs")
    assert len(runs) == 7 and all(len(rs) == 12 for rs in runs.values())
    assert tables(config, runs).markdown == (PPO / "sim" / "results.md").read_text()
