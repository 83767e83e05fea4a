"""records/bench-ratio-real/: the real track's report (``results.md``) and PPO's report on the
real track (``ppo/real/results.md``) are what their committed run arrays give, every line, with
the committed tuning entry and model, so the real-learner leaderboard can be verified from the
repository."""

from __future__ import annotations

from pathlib import Path

from test_bench_ratio_record import runs_in

from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.sweep import tables

RECORD = Path(__file__).resolve().parents[1] / "records" / "bench-ratio-real"


def test_the_real_tracks_report_is_what_its_arrays_give():
    config = BenchConfig(track="real", seeds=12, tuned=RECORD / "tuned.json")
    assert config.best_fixed("all") == "fixed-4" and config.oracle("all") == "schedule-4,0"
    runs = runs_in(RECORD / "runs")
    assert len(runs) == 11 and all(len(rs) == 12 for rs in runs.values())
    assert tables(config, runs).markdown == (RECORD / "results.md").read_text()


def test_ppos_report_on_the_real_track_is_what_its_arrays_give():
    config = BenchConfig(track="real", seeds=12, policies=("ppo",), tuned=RECORD / "tuned.json",
                         sb3_model=str(RECORD / "ppo" / "ppo_ratio.zip"))
    runs = runs_in(RECORD / "runs", RECORD / "ppo" / "real" / "runs")
    runs = {k: v for k, v in runs.items() if k[1] in config.policies_of("all")}
    assert sorted(p for _, p in runs) == ["fixed-4", "ppo", "schedule-4,0"]
    assert tables(config, runs).markdown == (RECORD / "ppo" / "real" / "results.md").read_text()
