"""``sapo-env bench-ratio``: the settings, the equivalence with reproduce, the table, resume."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import experiments.reproduce as rp
from experiments import learners
from experiments.bench_ratio import BenchConfig, RunSpec, bench, run_one
from experiments.bench_ratio import cli as bench_cli
from experiments.bench_ratio.report import _per_seed
from experiments.run_files import load_run

TINY = dict(rounds=12, seeds=2, n_agents=4, jobs=1, progress=False, plots=False)


def test_config_validation_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="unknown policy 'greedy'"):
        BenchConfig(policies=("greedy",))
    with pytest.raises(ValueError, match="sb3_model is None"):
        BenchConfig(policies=("ppo",))
    with pytest.raises(ValueError, match="does not exist"):
        BenchConfig(sb3_model=str(tmp_path / "missing.zip"))
    with pytest.raises(ValueError, match="settings must be among"):
        BenchConfig(settings=("everyone",))
    with pytest.raises(ValueError, match="n_agents must be >= 2"):
        BenchConfig(n_agents=1)
    with pytest.raises(SystemExit, match="sapo-env bench-ratio: unknown policy"):
        bench_cli.run_from_args(bench_cli.add_arguments(
            __import__("argparse").ArgumentParser()).parse_args(["--policies", "greedy"]))


def test_settings_assign_roles():
    config = BenchConfig(n_agents=8)
    roles = {s: RunSpec("exp3", s, 0, config).roles() for s in ("all", "focal", "mixed")}
    assert set(roles["all"].values()) == {"exp3"}
    assert list(roles["focal"].values()) == ["exp3"] + ["fixed-4"] * 7
    assert list(roles["mixed"].values()) == ["exp3"] * 4 + ["fixed-0", "fixed-2", "fixed-6",
                                                            "fixed-8"]
    # at odd n the policy takes the larger half, and the companions' J cycle
    odd = RunSpec("exp3", "mixed", 0, BenchConfig(n_agents=7)).roles()
    assert list(odd.values()) == ["exp3"] * 4 + ["fixed-0", "fixed-2", "fixed-6"]
    assert list(RunSpec("exp3", "mixed", 0, BenchConfig(n_agents=11)).roles().values())[6:] == [
        "fixed-0", "fixed-2", "fixed-6", "fixed-8", "fixed-0"]


def test_fixed_ratio_gives_exactly_the_reproduce_configuration(tmp_path):
    """FixedRatio(2) for every node is the reproduce sweep's 6/2, seed for seed."""
    bench_config = BenchConfig(out=tmp_path / "bench", policies=("fixed-2",), settings=("all",),
                               **TINY)
    ours = load_run(run_one(RunSpec("fixed-2", "all", 1, bench_config)))
    reproduce_config = rp.ReproduceConfig(out=tmp_path / "rp", experiments=("6/2",), rounds=12,
                                          seeds=2, n_agents=4, tensorboard=False, plots=False,
                                          progress=False)
    theirs = load_run(rp.run_one(rp.RunSpec("6/2", 1, reproduce_config)))
    np.testing.assert_array_equal(ours["rewards"], theirs["rewards"])
    np.testing.assert_array_equal(ours["num_external"], theirs["num_external"])
    np.testing.assert_array_equal(ours["generated"], theirs["generated"])
    assert ours["rewards"].sum() > 0  # not vacuous: the nodes earned something


def test_adaptive_policies_keep_J_in_range_and_the_table_adds_up(tmp_path):
    config = BenchConfig(out=tmp_path, policies=("fixed-4", "fixed-6", "discounted-ucb",
                                                 "pool-quality"), **TINY)
    result = bench(config)
    runs = {p.name: load_run(p) for p in sorted((tmp_path / "runs").glob("*.npz"))}
    assert len(runs) == 4 * 3 * 2
    for run in runs.values():
        j = run["num_external"]
        assert j.min() >= 0 and j.max() <= 8
    ucb = runs["all_discounted-ucb_seed0.npz"]["num_external"]
    assert len(np.unique(ucb)) > 1  # the bandit really moves J
    # the table's numbers are those of the runs
    row = next(r for r in result.rows if (r.setting, r.policy) == ("mixed", "pool-quality"))
    stats = _per_seed([runs["mixed_pool-quality_seed0.npz"], runs["mixed_pool-quality_seed1.npz"]])
    assert row.cumulative == pytest.approx(stats["cumulative"].mean())
    assert row.mean_j == pytest.approx(stats["mean_j"].mean())
    focal = runs["focal_fixed-6_seed0.npz"]
    assert focal["uses_policy"].tolist() == [True, False, False, False]
    assert focal["num_external"][1:, 0].tolist() == [6] * 11
    # the best fixed ratio of each setting is the fixed policy with the higher cumulative,
    # and every policy's difference to it is paired by seed
    for setting in {r.setting for r in result.rows}:
        fixed = {r.policy: r.cumulative for r in result.rows
                 if r.setting == setting and r.policy.startswith("fixed-")}
        best = max(fixed, key=fixed.get)
        rows = [r for r in result.rows if r.setting == setting]
        assert {r.best_fixed for r in rows} == {best}
        for r in rows:
            if r.policy == best:  # no difference to itself
                assert r.vs_best_fixed is None
                continue
            mine = _per_seed([runs[f"{setting}_{r.policy}_seed{k}.npz"] for k in (0, 1)])
            theirs = _per_seed([runs[f"{setting}_{best}_seed{k}.npz"] for k in (0, 1)])
            assert r.vs_best_fixed == pytest.approx(
                (mine["cumulative"] - theirs["cumulative"]).mean())
    table = (tmp_path / "results.md").read_text()
    assert "**mixed**" in table and "(best fixed)" in table
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["rows"]) == 12


def test_same_seed_same_table_and_resume_reuses_runs(tmp_path):
    config = BenchConfig(out=tmp_path, policies=("fixed-4", "exp3"), settings=("all",), **TINY)
    first = bench(config)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.npz")}
    again = bench(config)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # resumed: nothing rerun
    assert first.table_markdown == again.table_markdown
    fresh = bench(BenchConfig(out=tmp_path / "fresh", policies=("fixed-4", "exp3"),
                              settings=("all",), **TINY))
    assert fresh.table_markdown == first.table_markdown


def test_quick_cli_in_worker_processes(tmp_path, capsys):
    bench_cli.main(["--quick", "--rounds", "6", "--nodes", "3", "--policies", "fixed-4",
                    "thompson", "--jobs", "2", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert "too short to conclude anything" in out and "| thompson |" in out
    assert (tmp_path / "num_external.png").stat().st_size > 0


def row(policy, adaptive, diff, diff_ci, d1k, d1k_ci):
    from experiments.bench_ratio.report import Row

    return Row(setting="all", policy=policy, adaptive=adaptive, seeds=3, cumulative=100.0,
               cumulative_ci=5.0, best_fixed="fixed-4", vs_best_fixed=diff,
               vs_best_fixed_ci=diff_ci, final_reward=0.5, generated=32.0, reward_per_1k=10.0,
               per_1k_vs_best_fixed=d1k, per_1k_vs_best_fixed_ci=d1k_ci, mean_j=4.0,
               swarm_cumulative=100.0, worst_node=80.0)


def test_verdict_separates_wins_efficiency_and_nothing():
    from experiments.bench_ratio.report import verdict

    config = BenchConfig(seeds=3)
    best = row("fixed-4", False, None, None, None, None)
    cheap_fixed = row("fixed-7", False, -3.0, 10.0, 5.0, 1.0)  # efficient, loss not significant
    costly_fixed = row("fixed-2", False, -30.0, 10.0, -2.0, 1.0)
    nothing = verdict([best, costly_fixed, row("exp3", True, -5.0, 4.0, 3.0, 4.0)], config)
    assert nothing.startswith("**No adaptive policy beats the best fixed ratio**")
    win = verdict([best, row("exp3", True, 12.0, 4.0, 0.0, 1.0)], config)
    assert "Beats the best fixed ratio" in win and "exp3 in all (+12.0 over fixed-4)" in win
    efficient = verdict([best, cheap_fixed, costly_fixed,
                         row("thompson", True, -1.0, 2.0, 2.5, 1.0)], config)
    assert "thompson in all (+2.50 per 1k over fixed-4; so do the fixed fixed-7)" in efficient
    assert "too short" in verdict([best], BenchConfig(quick=True))
    # an undecided difference says how many seeds it would need; a decided one does not
    assert "Seeds each undecided" not in nothing  # exp3's -5 ± 4 is decided (worse)
    assert "thompson in all 5 (here 3)" in efficient  # -1 ± 2 at 3 seeds: sd 0.80

def test_seeds_to_decide():
    from experiments.bench_ratio.report import seeds_to_decide
    from experiments.reproduce.report import t_quantile_975

    # +1 ± 3 at 3 seeds: sd = 3 * sqrt(3) / 4.303; the answer is the first n whose
    # interval is narrower than 1
    sd = 3 * np.sqrt(3) / t_quantile_975(2)
    n = seeds_to_decide(1.0, 3.0, 3)
    assert t_quantile_975(n - 1) * sd / np.sqrt(n) < 1
    assert t_quantile_975(n - 2) * sd / np.sqrt(n - 1) >= 1
    assert seeds_to_decide(0.0, 1.0, 3) is None and seeds_to_decide(1.0, 0.0, 3) is None
    assert seeds_to_decide(0.001, 100.0, 3) is None  # beyond 1000 seeds


class Alternating:
    """J = 2 and 6 in turn, every 5 rounds (an entered policy for the tests)."""

    def __init__(self, node, seed):
        self.node, self.seed, self.round = node, seed, 0

    def choose(self, observation):
        self.round += 1
        return 2 if (self.round // 5) % 2 else 6

    def update(self, reward, info):
        pass


def made_here():  # not importable by path: defined inside a function
    class Local(Alternating):
        pass
    return Local


def test_your_own_policy_by_class_or_import_path_all_and_any_fixed_j(tmp_path):
    config = BenchConfig(out=tmp_path, policies=(Alternating, "fixed-3"), settings=("focal",),
                         **TINY)
    assert config.policies == ("test_bench_ratio:Alternating", "fixed-3")
    result = bench(config)
    runs = {p.name for p in (tmp_path / "runs").glob("*.npz")}
    assert "focal_Alternating_seed0.npz" in runs and "focal_fixed-3_seed1.npz" in runs
    j = load_run(tmp_path / "runs" / "focal_Alternating_seed0.npz")["num_external"][1:, 0]
    assert set(j.tolist()) == {2, 6}  # the policy drove node_0's J
    assert {r.policy for r in result.rows} == {"test_bench_ratio:Alternating", "fixed-3"}
    assert BenchConfig(policies=("test_bench_ratio:Alternating",)).policies == config.policies[:1]
    everything = BenchConfig(policies=("all",)).policies
    assert "exp3" in everything and "ppo" not in everything
    for bad, message in ((("fixed-9",), "unknown policy 'fixed-9'"),
                         (("nowhere.mod:Policy",), "cannot be imported"),
                         ((made_here(),), "top level of an importable module")):
        with pytest.raises(ValueError, match=message):
            BenchConfig(policies=bad)


def test_the_learner_option_tiny_real_learners_play_the_benchmark(tmp_path, request,
                                                                  monkeypatch):
    """--learner tiny: the tiny specialists (a 2-step warm start here) in the tiny tasks'
    swarm; --learner MODULE:FACTORY names any factory."""
    pytest.importorskip("torch")
    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    parser = bench_cli.add_arguments(__import__("argparse").ArgumentParser())
    config = bench_cli.config_from_args(parser.parse_args(
        ["--learner", "tiny", "--policies", "fixed-4", "test_bench_ratio:Alternating",
         "--settings", "focal", "--seeds", "1", "--rounds", "3", "--nodes", "2", "--jobs", "1",
         "--no-plots", "--no-progress", "--out", str(tmp_path / "out")]))
    config = dataclasses.replace(config, learner=dataclasses.replace(
        config.learner, warm_start_steps=2, target_accuracy=0.99))
    result = bench(config)
    assert "tiny transformer nodes" in result.table_markdown
    run = load_run(tmp_path / "out" / "runs" / "focal_fixed-4_seed0.npz")
    assert run["rewards"].shape == (3, 2) and run["generated"].sum() > 0
    sim = bench_cli.config_from_args(parser.parse_args(
        ["--learner", "experiments.learners:simulated_learners"]))
    assert sim.learner is learners.simulated_learners
