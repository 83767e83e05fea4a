"""records/bench-ratio-real/: the real track's report (``results.md``) and PPO's report on the
real track (``ppo/real/results.md``) are what their committed run arrays give, every line, with
the committed tuning entry and model, and each scenario's tuning entry is what its search's
committed runs give, so the real-learner leaderboard can be verified from the repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bench_ratio_record import runs_in

from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.report import per_seed
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


@pytest.mark.parametrize("folder", [RECORD, RECORD / "partial-specialists"],
                         ids=["common-base", "partial-specialists"])
def test_the_real_tracks_search_is_what_its_training_runs_give(folder: Path):
    """The tuning entry's mean cumulative reward of every fixed ratio and schedule it tried
    (``fixed``, ``search``, ``oracle_cumulative``), in each scenario of the track, is the mean
    over the committed runs of the training seeds; the best fixed ratio is the best of the
    fixed ratios, the oracle the best of the schedules."""
    entry, = json.loads((folder / "tuned.json").read_text())
    runs = runs_in(folder / "tuning")
    assert all(len(rs) == entry["key"]["tune_seeds"] for rs in runs.values())
    means = {policy: round(float(per_seed(rs)["cumulative"].mean()), 3)
             for (_, policy), rs in runs.items()}
    scenario = entry["scenarios"]["all"]
    assert scenario["fixed"] == {p: means[p] for p in scenario["fixed"]}
    assert dict(scenario["search"]) == {p: means[p] for p, _ in scenario["search"]}
    assert scenario["best_fixed"] == max(scenario["fixed"], key=scenario["fixed"].get)
    schedules = {p: v for p, v in means.items() if p.startswith("schedule-")}
    assert scenario["oracle"] == max(schedules, key=schedules.get)
    assert scenario["oracle_cumulative"] == means[scenario["oracle"]]
