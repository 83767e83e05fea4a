"""``sapo-env bench-ratio --track real``: the tiny-learner track, its oracle grid, its three
scores and their tests, an entered policy on it (tiny learners with 2-step warm starts)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import sapo_env
from sapo_experiments import learners
from sapo_experiments.bench_ratio import bench, scoreboard, tracks, tune
from sapo_experiments.bench_ratio import cli as bench_cli
from sapo_experiments.bench_ratio import sweep as sweep_module
from sapo_experiments.bench_ratio.config import BenchConfig, RunSpec
from sapo_experiments.bench_ratio.report import Headroom
from sapo_experiments.bench_ratio.tuning import transferred_settings
from sapo_experiments.run_files import load_run
from sapo_experiments.sweep import seeds_of

RECORD = Path(__file__).resolve().parents[1] / "records" / "bench-ratio" / "runs"


def parse(*argv):
    return bench_cli.config_from_args(
        bench_cli.add_arguments(argparse.ArgumentParser()).parse_args(list(argv)))


def test_the_real_track_is_tiny_learners_from_a_common_base_with_tis_in_bfloat16():
    config = BenchConfig(track="real", tuned=None)
    tiny = config.learner
    assert isinstance(tiny, learners.TinyLearners) and tiny.common_base
    assert (tiny.specialties, tiny.target_accuracy, tiny.off_policy_correction, tiny.dtype) == (
        ("basic_arithmetic",), 0.1, "tis", "bfloat16")
    assert config.scenarios == ("all",) and config.held_out_questions == 256
    assert config.policies[:4] == ("fixed-0", "fixed-2", "fixed-4", "fixed-6")
    assert "fixed-7" not in config.policies and "exp3" in config.policies
    assert 10 <= config.seeds and 100 <= config.rounds <= 200
    # the command line builds the same learner, so its runs have the same keys
    cli = parse("--track", "real")
    assert cli.learner == tiny and RunSpec("fixed-0", "all", 0, cli).key() == RunSpec(
        "fixed-0", "all", 0, config).key()
    assert parse("--track", "real", "--tiny-target-accuracy", "0.2").learner.target_accuracy == 0.2
    quick = BenchConfig(track="real", quick=True, tuned=None)
    assert quick.policies == ("fixed-0", "fixed-4") and quick.rounds < config.rounds
    assert parse("--track", "real", "--quick", "--policy",
                 "test_bench_ratio_real:Throwaway").policies == (
        "fixed-0", "fixed-4", "test_bench_ratio_real:Throwaway")
    with pytest.raises(ValueError, match="track must be one of"):
        BenchConfig(track="elsewhere", tuned=None)


def test_the_sim_tracks_run_keys_are_those_of_its_committed_runs(monkeypatch):
    """Held-out evaluation enters a run's key only where there is one: the simulated track's
    committed leaderboard runs are still the runs it asks for, under the version that made
    them (a run's key includes the package version, so a release makes every run afresh)."""
    monkeypatch.setattr(sapo_env, "__version__", "0.6.0")
    config = BenchConfig()
    for name in ("adversarial_exp3_seed3", "drift_fixed-7_seed0"):
        meta = load_run(RECORD / f"{name}.npz")["meta"]
        spec = RunSpec(meta["policy"], meta["scenario"], meta["seed_index"], config)
        assert spec.key() == meta["key"]
    real = BenchConfig(track="real", tuned=None)
    assert RunSpec("fixed-0", "all", 0, real).key() != RunSpec(
        "fixed-0", "all", 0, dataclasses.replace(real, held_out_questions=64)).key()


def test_warm_starts_are_trained_for_the_seeds_that_run_before_the_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(learners.TinyLearners, "warm_starts", lambda self, jobs, seeds=(),
                        progress=False: calls.append((jobs, [s.spawn_key for s in seeds])))
    config = BenchConfig(track="real", seeds=3, tuned=None, progress=False)
    config.prepare(2)
    assert calls == [(2, [seeds_of(0, k)[1].spawn_key for k in range(3)])]  # the runs' seeds
    config.train_warm_starts(1, range(1000, 1002))
    assert calls[-1] == (1, [seeds_of(0, k)[1].spawn_key for k in (1000, 1001)])
    BenchConfig(seeds=3, tuned=None).prepare(2)  # simulated learners: nothing to train
    assert len(calls) == 2


def test_a_track_with_an_oracle_grid_plays_every_schedule_and_transfers_the_settings(
        tmp_path, monkeypatch):
    """The oracle of a grid is the best of its schedules on the training seeds (every one
    played, each in the trace), whether or not it beats the best fixed ratio; a track that
    does not tune its policies takes the sim track's settings. Simulated learners here, for
    speed."""
    grid = ((0, 6), (6, 0))
    monkeypatch.setitem(tracks.TRACKS, "sim", dataclasses.replace(
        tracks.TRACKS["sim"], fixed_grid=(0, 6), oracle_grid=grid, tune_policies=False))
    config = BenchConfig(out=tmp_path, scenarios=("on-off",), policies=("fixed-0",),
                         tune_seeds=2, rounds=12, seeds=2, n_agents=4, jobs=1, progress=False,
                         plots=False, tuned=tmp_path / "tuned.json", held_out_questions=4)
    entry = tune(config)
    names = {p.stem for p in (tmp_path / "tuning").glob("*.npz")}
    # the search reads no held-out score, so its runs spend nothing on one
    assert "held_out_scores" not in load_run(tmp_path / "tuning" / "on-off_fixed-0_seed1000.npz")
    assert names == {f"on-off_{label}_seed{k}" for k in (1000, 1001) for label in
                     ("fixed-0", "fixed-6", "schedule-0,6", "schedule-6,0")}
    scenario = entry["scenarios"]["on-off"]
    assert [label for label, _ in scenario["search"]] == [
        scenario["best_fixed"], "schedule-0,6", "schedule-6,0"]
    best_schedule = max(scenario["search"][1:], key=lambda t: t[1])
    # the best schedule even where it does not beat the best fixed ratio: the held-out seeds
    # measure its headroom, which may be shown equivalent to none
    assert scenario["oracle"] == best_schedule[0]
    assert scenario["oracle_cumulative"] == best_schedule[1]
    assert entry["policies"] == transferred_settings() and entry["policies"]
    assert all(e["transferred_from"] == "sim" for e in entry["policies"].values())


def synthetic(gain: float, seeds: int = 6, rounds: int = 8, j: int = 0,
              held_out: float | None = None, own: float = 0.0) -> list[dict]:
    """Runs of one policy: two policy nodes answering 8 - j questions of 8 completions a
    round, reward 0.2 a round (cumulative 1.6) plus ``gain`` over the run, seed noise shared
    by every policy (common random numbers) and ``own`` noise of this policy's."""
    out = []
    for k in range(seeds):
        noise = 0.01 * (k % 3 - 1) + own * (k % 2 - 0.5)
        rewards = np.full((rounds, 2), 0.2 + gain / rounds + noise)
        run = {"rewards": rewards, "generated": np.full((rounds, 2), 8.0 * (8 - j)),
               "num_external": np.full((rounds, 2), j), "uses_policy": np.array([True, True])}
        if held_out is not None:
            run["held_out_scores"] = np.array([[0.1, 0.1], [held_out, held_out]])
        out.append(run)
    return out


def test_the_scoreboard_ranks_by_reward_per_round_and_tests_what_it_said_it_would():
    config = BenchConfig(track="real", policies=("fixed-0", "fixed-4", "exp3"), seeds=6,
                         rounds=8, tuned=None)
    runs = {("all", "fixed-0"): synthetic(0.0, held_out=0.15),
            ("all", "fixed-4"): synthetic(-0.4, j=4, held_out=0.15),
            ("all", "exp3"): synthetic(0.001, j=4, held_out=0.15, own=0.0005)}
    headroom = Headroom("all", 6, "fixed-0", "held-out seeds", 1.6, None, None, None, None,
                        False, None, None)
    (board,), tests = scoreboard.boards(config, runs, [headroom])
    assert [r.policy for r in board.rows] == ["exp3", "fixed-0", "fixed-4"]
    assert board.budget == 8 * 4 * 8  # fixed-4's nodes: 32 completions a round, 8 rounds
    fixed4 = next(r for r in board.rows if r.policy == "fixed-4")
    assert fixed4.budget_round == 8 and next(
        r for r in board.rows if r.policy == "fixed-0").budget_round == 4
    # no oracle: the one test is exp3 against the best fixed ratio, per round, and its
    # +0.001 of 1.6 lies within the bound of 3% with every seed's noise cancelling
    assert [(t.policy, t.score) for t in tests] == [("exp3", "per_round")]
    assert tests[0].comparison.verdict == "equivalent"
    assert tests[0].comparison.bound == pytest.approx(0.03 * 1.6)
    # the same difference with 40 times the spread is neither
    runs[("all", "exp3")] = synthetic(0.001, j=4, held_out=0.15, own=0.02)
    assert scoreboard.boards(config, runs, [headroom])[1][0].comparison.verdict == "not decided"
    runs[("all", "exp3")] = synthetic(0.001, j=4, held_out=0.15, own=0.0005)
    text = scoreboard.markdown([board], tests, config)
    assert "Ranked by **reward per round**" in text and "**equivalent**" in text
    assert "| 2 | fixed-0 (best fixed) |" in text and "exploratory" in text
    # with an oracle every score it has data for is tested, held-out accuracy included
    oracle = dataclasses.replace(headroom, oracle="schedule-0,4")
    runs[("all", "schedule-0,4")] = synthetic(0.3, held_out=0.2, own=0.0005)
    with_oracle = dataclasses.replace(config, policies=config.policies + ("schedule-0,4",))
    _, tests = scoreboard.boards(with_oracle, runs, [oracle])
    assert [(t.policy, t.score) for t in tests if t.headroom] == [
        ("schedule-0,4", "per_round"), ("schedule-0,4", "at_budget"),
        ("schedule-0,4", "held_out")]
    assert all(t.comparison.verdict == "higher" for t in tests if t.headroom)


class Throwaway:
    """J = 6 in odd rounds, 2 in even ones (an entered policy for the tests)."""

    def __init__(self, node, seed):
        self.round = 0

    def choose(self, observation):
        self.round += 1
        return 6 if self.round % 2 else 2

    def update(self, reward, info):
        pass


@pytest.mark.slow  # trains two 2-step warm starts and plays four 3-round runs
def test_an_entered_policy_plays_the_real_track_and_a_second_call_reuses_every_run(
        tmp_path, request, monkeypatch):
    pytest.importorskip("torch")
    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    config = parse("--track", "real", "--quick", "--policies", "fixed-4", "--policy",
                   "test_bench_ratio_real:Throwaway",
                   "--rounds", "3", "--nodes", "2", "--seeds", "2", "--jobs", "1",
                   "--no-plots", "--no-progress", "--out", str(tmp_path / "out"))
    config = dataclasses.replace(config, held_out_questions=4, learner=dataclasses.replace(
        config.learner, warm_start_steps=2, target_accuracy=0.99))
    result = bench(config)
    runs = tmp_path / "out" / "runs"
    assert {p.stem for p in runs.glob("*.npz")} == {
        f"all_{label}_seed{k}" for k in (0, 1) for label in ("fixed-4", "Throwaway")}
    mine = load_run(runs / "all_Throwaway_seed1.npz")
    assert mine["num_external"][:, 0].tolist() == [4, 6, 2]  # round 0: the start J, then its
    assert mine["held_out_rounds"].tolist() == [-1, 2] and mine["held_out_scores"].shape == (2, 2)
    assert mine["generated_tokens"].shape == (3, 2) and mine["batch_rewards"].shape == (3, 2)
    assert any(t.policy.endswith("Throwaway") for t in result.tests)
    assert "Three scores" in result.table_markdown and "Throwaway" in result.table_markdown
    assert "real track's quick run" in result.table_markdown

    def no_run(spec):
        raise AssertionError(f"{spec.name} was run again")

    monkeypatch.setattr(sweep_module, "compute", no_run)
    again = bench(config)
    assert again.table_markdown == result.table_markdown
