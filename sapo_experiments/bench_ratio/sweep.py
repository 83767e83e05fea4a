"""The benchmark's runs: one swarm per policy, scenario and seed (``compute``), and their report
(``report``: the tables and the figure); ``sapo_experiments.sweep`` runs them, in worker
processes or Ray tasks, resumable."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.config import TaskSpec
from sapo_experiments import learners
from sapo_experiments.bench_ratio import scoreboard
from sapo_experiments.bench_ratio.config import BenchConfig, RunSpec, spec_of, swarm_settings
from sapo_experiments.bench_ratio.report import (
    Headroom,
    Row,
    format_markdown,
    plot_num_external,
    summarise,
)
from sapo_experiments.bench_ratio.scenarios import SCENARIOS
from sapo_experiments.reproduce.sweep import compute_arrays
from sapo_experiments.run_files import RunFile
from sapo_experiments.sweep import SweepResult, group_runs, run_sweep, seeds_of, total_seconds


def policy_seed(base_seed: int, seed_index: int) -> np.random.SeedSequence:
    """The policies' stream of seed ``seed_index``: a third child beside ``seeds_of``'s env
    and learner streams, so adding a policy never changes the swarm it plays in."""
    return np.random.SeedSequence(base_seed, spawn_key=(seed_index, 2))


def scenario_seed(base_seed: int, seed_index: int) -> np.random.SeedSequence:
    """The scenario's own nodes' stream (scripted nodes, attackers): a fourth child."""
    return np.random.SeedSequence(base_seed, spawn_key=(seed_index, 3))


def run_one(spec: RunSpec) -> Path:
    """Run one swarm and save its per-round arrays to ``out/runs/<name>.npz``."""
    return compute(spec).save()


def compute(spec: RunSpec) -> RunFile:
    """Run one swarm; its file holds the per-round rewards, J and completions generated, and
    with held-out evaluation (``held_out_questions``) the held-out scores; with tiny learners
    also what each node-round cost (``reproduce.sweep.compute_arrays``) and the reward of
    what each node trained on (``batch_rewards``, received groups included)."""
    import sapo_env.runtime
    from sapo_env.runtime import metrics

    c = spec.config
    learner_settings = swarm_settings(c)
    tasks = [TaskSpec.coerce(t) for t in learner_settings.get("tasks", ())] or None
    swarm = SCENARIOS[spec.scenario].swarm(c.n_agents, c.rounds, spec.policy, tasks)
    roles = swarm.roles
    names = list(roles)
    initial = {a: spec_of(label).initial_num_external for a, label in roles.items()}
    env = sapo_env.parallel_env(n=len(names), max_rounds=c.rounds, num_external=initial,
                                **{**learner_settings, **swarm.settings})
    env_seed, agent_seed = seeds_of(c.base_seed, spec.seed_index)
    # the learners' own J never matters (the policies set every node's), but building them
    # with the benchmarked policy's start keeps fixed-J runs identical to reproduce's
    built = c.learner(names, spec_of(spec.policy).initial_num_external, agent_seed)
    agents = swarm.agents(dict(zip(names, built)), scenario_seed(c.base_seed, spec.seed_index))
    streams = policy_seed(c.base_seed, spec.seed_index).spawn(len(names))
    policies = {a: spec_of(label).build(s, a, c, spec.kwargs if a in swarm.policy_nodes
                                        else {})
                for (a, label), s in zip(roles.items(), streams)}
    tiny = isinstance(c.learner, learners.TinyLearners)
    # tiny learners: also what the base knew before round 0 (a simulated learner keys its
    # sampling on the round, so an evaluation before it would change its run)
    held_out = metrics.HeldOutEvaluator(every=c.held_out_every, n_questions=c.held_out_questions,
                                        seed=c.base_seed, at_start=tiny)
    started = time.perf_counter()
    cpu = time.process_time()
    history = sapo_env.runtime.run(env, agents, progress=False, seed=env_seed,
                                   ratio_policies=policies,
                                   callbacks=[held_out] if c.held_out_questions else [])
    env.close()
    meta = {"key": spec.key(), "policy": spec.policy, "scenario": spec.scenario,
            "seed_index": spec.seed_index, "env_seed": env_seed, "roles": roles,
            "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu}
    arrays = {"rewards": history.rewards, "num_external": history.num_external,
              "generated": history.generated,
              "uses_policy": np.array([a in swarm.policy_nodes for a in names])}
    if c.held_out_questions:
        result = held_out.result
        arrays.update(held_out_rounds=np.asarray(result.rounds, dtype=np.int64),
                      held_out_scores=result.as_array())
    if tiny:
        arrays.update(compute_arrays(history),
                      batch_rewards=metrics.info_array(history, "batch_mean_reward"))
    return RunFile(spec.path, meta, arrays)


@dataclass(kw_only=True)
class BenchResult(SweepResult):
    config: BenchConfig
    headroom: list[Headroom]
    rows: list[Row]
    boards: list[scoreboard.Board]  #: the three scores of each scenario
    tests: list[scoreboard.Test]  #: the report's tests, decided


@dataclass
class Tables:
    """What the report computes from the runs, and ``results.md``'s text."""

    headroom: list[Headroom]
    rows: list[Row]
    boards: list[scoreboard.Board]
    tests: list[scoreboard.Test]
    markdown: str  #: the leaderboard, then the three scores


def tables(config: BenchConfig, runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]]
           ) -> Tables:
    """The report's tables from the runs by (scenario, policy), seeds in order."""
    headroom, rows = summarise(config, runs)
    boards, tests = scoreboard.boards(config, runs, headroom)
    return Tables(headroom, rows, boards, tests, format_markdown(headroom, rows, config) + "\n"
                  + scoreboard.markdown(boards, tests, config))


def report(config: BenchConfig, finished: list[tuple[RunSpec, dict[str, Any]]]) -> BenchResult:
    """The tables (the leaderboard, then the three scores, ``scoreboard``) and the figure of J
    over time."""
    runs = group_runs(finished, lambda spec: (spec.scenario, spec.policy))
    t = tables(config, runs)
    figure = config.out / "num_external.png"
    return BenchResult(
        config=config, headroom=t.headroom, rows=t.rows, boards=t.boards, tests=t.tests,
        table_markdown=t.markdown,
        files=[plot_num_external(config, runs, figure)] if config.plots else [],
        summary={"run_seconds_total": total_seconds(finished),
                 "run_cpu_seconds_total": total_seconds(finished, "cpu_seconds"),
                 "tuning": {k: v for k, v in config.tuning.items() if k != "trace"},
                 "headroom": [asdict(h) for h in t.headroom],
                 "rows": [asdict(x) for x in t.rows],
                 "scores": [asdict(b) for b in t.boards],
                 "tests": [asdict(x) for x in t.tests]})


def bench(config: BenchConfig | None = None) -> BenchResult:
    """Run (or resume) the benchmark and write the tables, figure and summary to
    ``config.out``."""
    return run_sweep(config or BenchConfig(), compute, report)
