"""``sapo-env bench-ratio``: scenarios, common random numbers, headroom, tuning, the table."""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pytest

import sapo_experiments.reproduce as rp
from agents.hostile.adversarial import AdversarialAgent
from agents.wrappers.churning import ChurningAgent
from sapo_env import PAPER_TASKS
from sapo_experiments import learners
from sapo_experiments.bench_ratio import (
    SCENARIOS,
    BenchConfig,
    RunSpec,
    bench,
    run_one,
    tracks,
    tune,
)
from sapo_experiments.bench_ratio import cli as bench_cli
from sapo_experiments.bench_ratio import tuning as tuning_module
from sapo_experiments.bench_ratio.config import QUICK, TUNED_FILE, read_tuning, tuning_key
from sapo_experiments.bench_ratio.policies import TUNING_GRID, spec_of
from sapo_experiments.bench_ratio.report import (
    Headroom,
    Row,
    num_external_figure,
    per_seed,
    ratio_ci,
    seeds_to_decide,
    summarise,
    verdict,
)
from sapo_experiments.bench_ratio.scenarios import DriftingDemonstrator, attackers, waves
from sapo_experiments.bench_ratio.sweep import compute, scenario_seed
from sapo_experiments.reproduce.report import t_quantile_975
from sapo_experiments.run_files import load_run

pytestmark = pytest.mark.slow  # whole benchmark sweeps and the tuning
TINY = dict(rounds=12, seeds=2, n_agents=4, jobs=1, progress=False, plots=False, tuned=None)


def parser():
    return bench_cli.add_arguments(argparse.ArgumentParser())


def test_config_validation_names_the_field(tmp_path):
    for bad, message in [(dict(policies=("greedy",)), "unknown policy 'greedy'"),
                         (dict(policies=("ppo",)), "sb3_model is None"),
                         (dict(sb3_model=str(tmp_path / "missing.zip")), "does not exist"),
                         (dict(scenarios=("everyone",)), "scenarios must be among"),
                         (dict(n_agents=1), "n_agents must be >= 2"),
                         (dict(seeds=1001), "seeds must be <= 1000"),
                         (dict(policies=("schedule-4,9",)), "a schedule's phases must be J")]:
        with pytest.raises(ValueError, match=message):
            BenchConfig(tuned=None, **bad)
    with pytest.raises(SystemExit, match="sapo-env bench-ratio: unknown policy"):
        bench_cli.run_from_args(parser().parse_args(["--policies", "greedy"]))


def test_the_stationary_scenarios_assign_roles():
    def roles(scenario, n=8):
        return list(SCENARIOS[scenario].swarm(n, 100, "exp3").roles.values())

    assert roles("all") == ["exp3"] * 8
    assert roles("focal") == ["exp3"] + ["fixed-4"] * 7
    assert roles("mixed") == ["exp3"] * 4 + ["fixed-0", "fixed-2", "fixed-6", "fixed-8"]
    # at odd n the policy takes the larger half, and the companions' J cycle
    assert roles("mixed", 7) == ["exp3"] * 4 + ["fixed-0", "fixed-2", "fixed-6"]
    assert roles("mixed", 11)[6:] == ["fixed-0", "fixed-2", "fixed-6", "fixed-8", "fixed-0"]


def test_the_non_stationary_scenarios_change_what_they_say_when_they_say():
    from agents import RandomAgent

    learners8 = {f"node_{i}": RandomAgent(seed=i) for i in range(12)}
    seed = np.random.SeedSequence(0)
    # churn: the second half leaves at R/3, as many join at 2R/3 (beginners, at J = 4)
    churn = SCENARIOS["churn"].swarm(8, 300, "exp3")
    assert churn.policy_nodes == ("node_0", "node_1", "node_2", "node_3")
    assert churn.settings["join_rounds"] == {f"node_{i}": 200 for i in range(8, 12)}
    nodes = churn.agents(learners8, seed)
    assert [nodes[f"node_{i}"].leave_round for i in range(4, 8)] == [100] * 4
    assert all(isinstance(nodes[f"node_{i}"], ChurningAgent) for i in range(4, 8))
    assert not any(isinstance(nodes[f"node_{i}"], ChurningAgent) for i in (0, 8))
    # adversarial: 3 in 8 attack from R/2; on-off in [R/4, R/2) and [3R/4, R)
    for name, active in (("adversarial", ((150, 300),)), ("on-off", ((75, 150), (225, 300)))):
        swarm = SCENARIOS[name].swarm(8, 300, "exp3")
        nodes = swarm.agents({f"node_{i}": RandomAgent(seed=i) for i in range(8)}, seed)
        hostile = [a for a, x in nodes.items() if isinstance(x, AdversarialAgent)]
        assert hostile == ["node_5", "node_6", "node_7"] and len(swarm.policy_nodes) == 5
        assert {nodes[a].active for a in hostile} == {active}
        assert {nodes[a].attack for a in hostile} == {"misleading"}
    assert [attackers(n) for n in (2, 4, 8, 16)] == [1, 1, 3, 6]
    # curriculum: three waves of the task list, a mentor that takes nothing
    curriculum = SCENARIOS["curriculum"].swarm(8, 300, "exp3")
    assert [t[3] for t in curriculum.settings["tasks"]] == [0] * 3 + [100] * 3 + [200] * 3
    assert [t[0] for t in curriculum.settings["tasks"]] == [t.name for t in PAPER_TASKS]
    assert curriculum.roles["node_7"] == "fixed-0" and len(curriculum.policy_nodes) == 7
    assert [t.first_round for t in waves(PAPER_TASKS[:2], 300)] == [0, 150]
    # drift: the scripted half's accuracy falls from 0.9 to 0.1 over the run
    drift = SCENARIOS["drift"].swarm(8, 300, "exp3").agents(learners8, seed)
    node = drift["node_7"]
    assert isinstance(node, DriftingDemonstrator)
    observation = {"round": 0, "questions": (), "completions_per_question": 8,
                   "train_budget": 8}
    accuracy = []
    for r in (0, 150, 299):
        node.act({**observation, "round": r})
        accuracy.append(round(node.accuracy, 3))
    assert accuracy == [0.9, round(0.9 - 0.8 * 150 / 299, 3), 0.1]


def test_fixed_ratio_gives_exactly_the_reproduce_configuration(tmp_path):
    """FixedRatio(2) for every node, played by the calibrated simulated learner, is the
    reproduce sweep's 6/2, seed for seed."""
    bench_config = BenchConfig(out=tmp_path / "bench", policies=("fixed-2",), scenarios=("all",),
                               learner=learners.simulated_learners, **TINY)
    ours = load_run(run_one(RunSpec("fixed-2", "all", 1, bench_config)))
    reproduce_config = rp.ReproduceConfig(out=tmp_path / "rp", experiments=("6/2",), rounds=12,
                                          seeds=2, n_agents=4, tensorboard=False, plots=False,
                                          progress=False)
    theirs = load_run(rp.run_one(rp.RunSpec("6/2", 1, reproduce_config)))
    for key in ("rewards", "num_external", "generated"):
        np.testing.assert_array_equal(ours[key], theirs[key])
    assert ours["rewards"].sum() > 0  # not vacuous: the nodes earned something


def test_every_policy_of_a_scenario_plays_the_same_swarm_until_its_choices_differ(tmp_path):
    """Common random numbers: fixed-4 and schedule-4,6 agree in every round before the
    schedule's second phase (round 6 of 12); in that round only node_0 answers fewer
    questions, so the other nodes' rewards still agree; after it their batches differ."""
    config = BenchConfig(out=tmp_path, scenarios=("focal",), **TINY)
    fixed = compute(RunSpec("fixed-4", "focal", 0, config)).arrays["rewards"]
    scheduled = compute(RunSpec("schedule-4,6", "focal", 0, config)).arrays["rewards"]
    np.testing.assert_array_equal(fixed[:6], scheduled[:6])
    np.testing.assert_array_equal(fixed[6, 1:], scheduled[6, 1:])
    assert not np.array_equal(fixed[6:], scheduled[6:])
    again = compute(RunSpec("schedule-4,6", "focal", 0, config)).arrays["rewards"]
    np.testing.assert_array_equal(again, scheduled)  # and the same seed gives the same run


def test_adaptive_policies_keep_J_in_range_and_the_table_adds_up(tmp_path):
    config = BenchConfig(out=tmp_path, policies=("fixed-4", "fixed-6", "discounted-ucb",
                                                 "linucb"),
                         scenarios=("all", "focal", "adversarial"), **TINY)
    result = bench(config)
    runs = {p.name: load_run(p) for p in sorted((tmp_path / "runs").glob("*.npz"))}
    assert len(runs) == 4 * 3 * 2
    for run in runs.values():
        j = run["num_external"]
        assert j.min() >= 0 and j.max() <= 8
    assert len(np.unique(runs["all_discounted-ucb_seed0.npz"]["num_external"])) > 1
    row = next(r for r in result.rows if (r.scenario, r.policy) == ("adversarial", "linucb"))
    stats = per_seed([runs["adversarial_linucb_seed0.npz"], runs["adversarial_linucb_seed1.npz"]])
    assert row.cumulative == pytest.approx(stats["cumulative"].mean())
    assert row.mean_j == pytest.approx(stats["mean_j"].mean())
    # the policy nodes are those that follow the policy, even when companions play the same J
    for policy in ("fixed-6", "fixed-4"):
        focal = runs[f"focal_{policy}_seed0.npz"]
        assert focal["uses_policy"].tolist() == [True, False, False, False]
    assert runs["focal_fixed-6_seed0.npz"]["num_external"][1:, 0].tolist() == [6] * 11
    # without a tuning entry the best fixed ratio is chosen on these seeds, every difference
    # to it paired by seed, and there is no oracle
    for h in result.headroom:
        assert h.best_fixed_on == "held-out seeds" and h.oracle is None and h.headroom is None
        fixed = {r.policy: r.cumulative for r in result.rows
                 if r.scenario == h.scenario and r.kind == "fixed"}
        assert h.best_fixed == max(fixed, key=fixed.get)
        for r in (r for r in result.rows if r.scenario == h.scenario and r.policy != h.best_fixed):
            mine = per_seed([runs[f"{h.scenario}_{r.policy}_seed{k}.npz"] for k in (0, 1)])
            best = per_seed([runs[f"{h.scenario}_{h.best_fixed}_seed{k}.npz"] for k in (0, 1)])
            assert r.vs_best_fixed == pytest.approx(
                (mine["cumulative"] - best["cumulative"]).mean())
            assert r.captured is None
    table = (tmp_path / "results.md").read_text()
    assert "**adversarial**" in table and "(best fixed)" in table and "no oracle" in table
    assert len(json.loads((tmp_path / "summary.json").read_text())["rows"]) == 12


def test_same_seed_same_table_and_resume_reuses_runs(tmp_path):
    config = BenchConfig(out=tmp_path, policies=("fixed-4", "exp3"), scenarios=("on-off",),
                         **TINY)
    first = bench(config)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.npz")}
    again = bench(config)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # resumed: nothing rerun
    assert first.table_markdown == again.table_markdown
    fresh = bench(dataclasses.replace(config, out=tmp_path / "fresh"))
    assert fresh.table_markdown == first.table_markdown


def test_the_sweep_saves_each_run_as_computed_alone_under_its_old_key(tmp_path):
    """``bench`` on the shared skeleton: every policy in every scenario under every seed as
    ``compute`` makes it alone, under its old key (tests/sweep_outputs.py), and summary.json
    holding the tables of those runs with the settings it always had."""
    from sweep_outputs import check_runs, check_summary

    from sapo_env import __version__

    config = BenchConfig(out=tmp_path, policies=("fixed-4", "exp3"), scenarios=("focal",),
                         rounds=6, seeds=2, n_agents=3, jobs=1, progress=False, plots=False,
                         tuned=None)
    bench(config)
    specs = [RunSpec(p, "focal", k, config) for k in range(2) for p in ("fixed-4", "exp3")]
    saved = check_runs(tmp_path, specs, compute, lambda spec: {
        "version": __version__, "policy": spec.policy, "scenario": "focal",
        "seed": spec.seed_index, "base_seed": 0, "rounds": 6, "n_agents": 3,
        "learner": learners.describe(config.learner), "model": None, "policy_source": None,
        "kwargs": {}})
    runs: dict[tuple, list] = {}
    for spec, run in zip(specs, saved):
        runs.setdefault(("focal", spec.policy), []).append(run)
    summary = check_summary(
        tmp_path, ["date", "machine", "wall_seconds", "jobs", "settings", "run_seconds_total",
                   "run_cpu_seconds_total", "tuning", "headroom", "rows", "scores", "tests"],
        {"out", "policies", "scenarios", "sb3_model", "seeds", "tune_seeds", "base_seed",
         "rounds", "n_agents", "learner", "tuned", "jobs", "ray", "resume", "plots",
         "progress", "quick", "track", "held_out_questions", "held_out_every"})
    headroom, rows = summarise(config, runs)
    assert json.dumps([summary["headroom"], summary["rows"]]) == json.dumps(
        [[dataclasses.asdict(h) for h in headroom], [dataclasses.asdict(r) for r in rows]])
    assert rows[0].cumulative > 0  # not vacuous: the nodes earned something


def test_quick_cli_in_worker_processes(tmp_path, capsys):
    bench_cli.main(["--quick", "--rounds", "6", "--nodes", "3", "--policies", "fixed-4",
                    "thompson", "--jobs", "2", "--out", str(tmp_path), "--no-progress",
                    "--tuned", "none"])
    out = capsys.readouterr().out
    assert "too short to conclude anything" in out and "| thompson |" in out
    assert "**focal**" in out and "**adversarial**" in out  # the quick scenarios
    assert (tmp_path / "num_external.png").stat().st_size > 0


def synthetic(cumulative: float, j: int = 4, rounds: int = 10) -> dict:
    """A run file whose two policy nodes earn ``cumulative`` in all (beside a companion)."""
    rewards = np.full((rounds, 3), cumulative / rounds)
    return {"rewards": rewards, "uses_policy": np.array([True, True, False]),
            "generated": np.full((rounds, 3), 8 * (8 - j)), "num_external": np.full((rounds, 3), j),
            "meta": {}}


def test_headroom_and_captured_fraction_by_hand(tmp_path):
    """A tuning entry names fixed-4 the best fixed ratio and schedule-6,2 the oracle; the
    numbers of the table are those of the formulas, computed here by hand."""
    base = BenchConfig(out=tmp_path, policies=("fixed-2", "fixed-4", "exp3"), seeds=4,
                       scenarios=("focal",), tuned=None, rounds=10)
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps([{"key": tuning_key(base), "policies": {}, "scenarios": {
        "focal": {"best_fixed": "fixed-4", "oracle": "schedule-6,2"}}}]))
    config = dataclasses.replace(base, tuned=path)
    assert config.policies_of("focal") == ("fixed-2", "fixed-4", "exp3", "schedule-6,2")
    fixed = np.array([50.0, 52.0, 47.0, 55.0])
    oracle = fixed + np.array([4.0, 5.0, 3.5, 4.5])
    exp3 = fixed + np.array([2.0, 3.0, 1.0, 2.4])
    runs = {("focal", "fixed-4"): [synthetic(c) for c in fixed],
            ("focal", "fixed-2"): [synthetic(c, 2) for c in fixed - 10],
            ("focal", "exp3"): [synthetic(c) for c in exp3],
            ("focal", "schedule-6,2"): [synthetic(c, 6) for c in oracle]}
    [h], rows = summarise(config, runs)
    d_o, d_p = oracle - fixed, exp3 - fixed
    t = t_quantile_975(3)
    assert h.best_fixed == "fixed-4" and h.best_fixed_on == "training seeds"
    assert h.headroom == pytest.approx(d_o.mean())
    assert h.headroom_ci == pytest.approx(t * d_o.std(ddof=1) / 2)
    assert h.decided
    row = next(r for r in rows if r.policy == "exp3")
    ratio = d_p.mean() / d_o.mean()
    variance = (d_p.var(ddof=1) - 2 * ratio * np.cov(d_p, d_o)[0, 1]
                + ratio**2 * d_o.var(ddof=1)) / (4 * d_o.mean() ** 2)
    assert row.captured == pytest.approx(ratio)
    assert row.captured_ci == pytest.approx(t * np.sqrt(variance))
    assert next(r for r in rows if r.policy == "schedule-6,2").captured is None
    assert next(r for r in rows if r.policy == "fixed-4").vs_best_fixed is None
    text = verdict([h], rows, config)
    assert "Headroom beyond its CI in focal" in text
    # a headroom whose interval reaches 0 is not decided, and no fraction is reported
    runs[("focal", "schedule-6,2")] = [synthetic(c) for c in fixed + np.array([3, -2, 1, -1])]
    [h], rows = summarise(config, runs)
    assert not h.decided and all(r.captured is None for r in rows)
    assert "No headroom beyond its CI in focal" in verdict([h], rows, config)


def test_the_j_figure_says_it_averages_and_puts_the_scenario_changes_in_its_legend(tmp_path):
    base = BenchConfig(out=tmp_path, policies=("fixed-4", "exp3"), seeds=3,
                       scenarios=("adversarial",), tuned=None, rounds=30)
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps([{"key": tuning_key(base), "policies": {}, "scenarios": {
        "adversarial": {"best_fixed": "fixed-4", "oracle": "schedule-6,2"}}}]))
    config = dataclasses.replace(base, tuned=path)
    runs = {("adversarial", policy): [synthetic(50.0, j, rounds=30) for _ in range(3)]
            for policy, j in (("fixed-4", 4), ("exp3", 3), ("schedule-6,2", 6))}
    figure = num_external_figure(config, runs)
    import matplotlib.pyplot as plt
    plt.close(figure)
    assert SCENARIOS["adversarial"].changes(30)  # the grey bars are drawn
    [legend] = figure.legends
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels == ["best fixed", "exp3", "oracle", "the scenario changes"]
    assert figure.get_suptitle() == ("J in force, mean over the policy nodes and 3 seeds; "
                                     "adaptive policies smoothed over 3 rounds")


def test_ratio_ci_with_a_constant_denominator_is_the_numerator_s_interval():
    numerator = np.array([1.0, 2.0, 4.0])
    ratio, ci = ratio_ci(numerator, np.full(3, 2.0))
    assert ratio == pytest.approx(7 / 6)
    assert ci == pytest.approx(t_quantile_975(2) * numerator.std(ddof=1) / np.sqrt(3) / 2)


def test_verdict_names_captured_fractions_and_what_more_seeds_would_decide():
    config = BenchConfig(seeds=10, tuned=None)
    room = Headroom("adversarial", 10, "fixed-6", "training seeds", 70.0, "schedule-6,6,0,0",
                    73.0, 3.0, 0.5, True, None, 0.6)

    def row(policy, diff, ci, captured=None, captured_ci=None, kind="adaptive"):
        return Row("adversarial", policy, kind, 10, 70 + (diff or 0), 1.0, diff, ci, captured,
                   captured_ci, 0.5, 32.0, 10.0, 4.0, 70.0, 60.0)

    rows = [row("fixed-6", None, None, kind="fixed"),
            row("exp3", 2.1, 0.4, 0.7, 0.15), row("thompson", 0.6, 0.8, 0.2, 0.3)]
    text = verdict([room], rows, config)
    assert "Headroom beyond its CI in adversarial (+3.0 ± 0.5)" in text
    assert "Capturing at least 50% of the headroom beyond the CI: exp3 in adversarial (70 ± 15%)" \
        in text
    assert "Beating the best fixed ratio beyond the CI: exp3 in adversarial (+2.1 ± 0.4)" in text
    assert f"thompson in adversarial {seeds_to_decide(0.6, 0.8, 10)} (here 10)" in text
    nothing = verdict([room], [rows[0], row("exp3", 0.1, 0.2, 0.03, 0.1)], config)
    assert "**No adaptive policy captures 50% of the headroom beyond its CI**" in nothing
    assert "too short" in verdict([room], rows, BenchConfig(quick=True, tuned=None))


def test_seeds_to_decide():
    # +1 ± 3 at 3 seeds: sd = 3 * sqrt(3) / 4.303; the answer is the first n whose
    # interval is narrower than 1
    sd = 3 * np.sqrt(3) / t_quantile_975(2)
    n = seeds_to_decide(1.0, 3.0, 3)
    assert t_quantile_975(n - 1) * sd / np.sqrt(n) < 1
    assert t_quantile_975(n - 2) * sd / np.sqrt(n - 1) >= 1
    assert seeds_to_decide(0.0, 1.0, 3) is None and seeds_to_decide(1.0, 0.0, 3) is None
    assert seeds_to_decide(0.001, 100.0, 3) is None  # beyond 1000 seeds


def test_tuning_chooses_on_training_seeds_and_the_benchmark_uses_it(tmp_path, monkeypatch):
    """--tune on a small grid: the best fixed ratio is the best of the fixed runs on the
    training seeds, the oracle beats it there (or is None), each policy keeps the setting with
    the highest mean relative gain; the benchmark then plays both and builds the policy with
    that setting; a second tune of another scenario keeps the first's entry."""
    monkeypatch.setitem(tracks.TRACKS, "sim", dataclasses.replace(tracks.TRACKS["sim"],
                                                                  fixed_grid=(0, 6)))
    monkeypatch.setattr(tuning_module, "ORACLE_PHASES", 2)
    monkeypatch.setattr(tuning_module, "ADAPTIVE", ("exp3",))
    path = tmp_path / "tuned.json"
    config = BenchConfig(out=tmp_path, scenarios=("adversarial",), policies=("exp3",),
                         tune_seeds=2, **{**TINY, "tuned": path})
    entry = tune(config)
    runs = {p.stem: per_seed([load_run(p)])["cumulative"][0]
            for p in (tmp_path / "tuning").glob("*.npz")}
    assert {p.rsplit("_seed", 1)[1] for p in runs} == {"1000", "1001"}
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*"))

    def mean(name):
        return np.mean([runs[f"adversarial_{name}_seed{k}"] for k in (1000, 1001)])

    adversarial = entry["scenarios"]["adversarial"]
    assert adversarial["best_fixed"] == max(("fixed-0", "fixed-6"), key=mean)
    assert adversarial["fixed"] == {f: round(mean(f), 3) for f in ("fixed-0", "fixed-6")}
    if adversarial["oracle"] is not None:
        assert mean(adversarial["oracle"]) > mean(adversarial["best_fixed"])
        assert adversarial["oracle"].startswith("schedule-")
    baseline = mean(adversarial["best_fixed"])
    gains = [(mean(f"exp3_setting{k}") - baseline) / baseline
             for k in range(len(TUNING_GRID["exp3"]))]
    assert entry["policies"]["exp3"]["setting"] == int(np.argmax(gains))
    tuned = dataclasses.replace(config, tuned=path)
    assert tuned.best_fixed("adversarial") == adversarial["best_fixed"]
    best_setting = TUNING_GRID["exp3"][int(np.argmax(gains))]
    assert RunSpec("exp3", "adversarial", 0, tuned).kwargs == best_setting
    result = bench(tuned)
    assert {r.policy for r in result.rows} >= {"exp3", adversarial["best_fixed"]}
    assert result.headroom[0].best_fixed_on == "training seeds"
    # a scenario outside DEFAULT_SCENARIOS gets its best fixed ratio and oracle, not a tuning
    before = entry["policies"]
    tune(dataclasses.replace(config, scenarios=("focal",)))
    merged = read_tuning(path, tuning_key(config))
    assert set(merged["scenarios"]) == {"focal", "adversarial"}
    assert merged["policies"] == before


def test_the_committed_tuning_covers_the_default_and_quick_settings():
    """The benchmark as the README runs it (full and --quick) has its oracle and tuned
    policies: the committed tuning file holds entries made with those settings."""
    for config in (BenchConfig(), BenchConfig(quick=True)):
        entry = read_tuning(TUNED_FILE, tuning_key(config))
        assert set(entry["scenarios"]) >= set(config.scenarios), config.quick
        assert all(config.best_fixed(s) for s in config.scenarios)
        assert set(entry["policies"]) == set(TUNING_GRID)
    assert BenchConfig(quick=True).scenarios == QUICK["scenarios"]


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
    config = BenchConfig(out=tmp_path, policies=(Alternating, "fixed-3", "schedule-2,6"),
                         scenarios=("focal",), **TINY)
    assert config.policies == ("test_bench_ratio:Alternating", "fixed-3", "schedule-2,6")
    result = bench(config)
    runs = {p.name for p in (tmp_path / "runs").glob("*.npz")}
    assert "focal_Alternating_seed0.npz" in runs and "focal_fixed-3_seed1.npz" in runs
    j = load_run(tmp_path / "runs" / "focal_Alternating_seed0.npz")["num_external"][1:, 0]
    assert set(j.tolist()) == {2, 6}  # the policy drove node_0's J
    scheduled = load_run(tmp_path / "runs" / "focal_schedule-2,6_seed0.npz")["num_external"]
    assert scheduled[:, 0].tolist() == [2] * 6 + [6] * 6
    assert {r.policy for r in result.rows} == {"test_bench_ratio:Alternating", "fixed-3",
                                              "schedule-2,6"}
    assert next(r for r in result.rows if r.policy.endswith("Alternating")).kind == "yours"
    everything = BenchConfig(policies=("all",), tuned=None).policies
    assert "exp3" in everything and "linucb" in everything and "ppo" not in everything
    for bad, message in ((("fixed-9",), "unknown policy 'fixed-9'"),
                         (("nowhere.mod:Policy",), "cannot be imported"),
                         ((made_here(),), "top level of an importable module")):
        with pytest.raises(ValueError, match=message):
            BenchConfig(policies=bad, tuned=None)
    assert spec_of("schedule-6,0,6").initial_num_external == 6


def test_the_learner_option_tiny_real_learners_play_the_benchmark(tmp_path, request,
                                                                  monkeypatch):
    """--learner tiny: the tiny specialists (a 2-step warm start here) in the tiny tasks'
    swarm; --learner MODULE:FACTORY names any factory."""
    pytest.importorskip("torch")
    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    config = bench_cli.config_from_args(parser().parse_args(
        ["--learner", "tiny", "--policies", "fixed-4", "test_bench_ratio:Alternating",
         "--scenarios", "focal", "--seeds", "1", "--rounds", "3", "--nodes", "2", "--jobs", "1",
         "--no-plots", "--no-progress", "--out", str(tmp_path / "out"), "--tuned", "none"]))
    config = dataclasses.replace(config, learner=dataclasses.replace(
        config.learner, warm_start_steps=2, target_accuracy=0.99))
    result = bench(config)
    assert "tiny transformer nodes" in result.table_markdown
    run = load_run(tmp_path / "out" / "runs" / "focal_fixed-4_seed0.npz")
    assert run["rewards"].shape == (3, 2) and run["generated"].sum() > 0
    sim = bench_cli.config_from_args(parser().parse_args(
        ["--learner", "sapo_experiments.learners:simulated_learners", "--tuned", "none"]))
    assert sim.learner is learners.simulated_learners


def test_scenario_nodes_draw_from_their_own_stream():
    """The scripted nodes and attackers draw from a child of the seed of their own, so adding
    one never moves the learners' or the policies' streams."""
    assert scenario_seed(0, 3).spawn_key == (3, 3)
    assert scenario_seed(0, 3).entropy == np.random.SeedSequence(0).entropy


def test_help_says_quick_is_a_smoke_test_and_gives_the_minutes_long_benchmark():
    text = " ".join(bench_cli.build_parser().format_help().split())
    quick = text.split("--quick")[2].split("--policies LABEL")[0]  # its help, after the usage
    assert "smoke test" in quick and "too short to rank any policy" in quick
    assert "--policies fixed-4 --policy MODULE:NAME" in quick and "min of CPU" in quick
