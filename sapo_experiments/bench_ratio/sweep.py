"""Running the benchmark: one swarm per policy, scenario and seed, in worker processes or Ray
tasks, resumable; then the tables and the figure."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.config import TaskSpec
from sapo_experiments import learners
from sapo_experiments.bench_ratio.config import (
    BenchConfig,
    RunSpec,
    settings_dict,
    spec_of,
    swarm_settings,
)
from sapo_experiments.bench_ratio.report import (
    Headroom,
    Row,
    format_markdown,
    plot_num_external,
    summarise,
)
from sapo_experiments.bench_ratio.scenarios import SCENARIOS
from sapo_experiments.reproduce.config import seeds_of
from sapo_experiments.run_files import RunFile, is_finished, load_run, run_all, write_summary


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
    """Run one swarm; its file holds the per-round rewards, J and completions generated."""
    import sapo_env.runtime

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
    started = time.perf_counter()
    cpu = time.process_time()
    history = sapo_env.runtime.run(env, agents, progress=False, seed=env_seed,
                                   ratio_policies=policies)
    env.close()
    meta = {"key": spec.key(), "policy": spec.policy, "scenario": spec.scenario,
            "seed_index": spec.seed_index, "env_seed": env_seed, "roles": roles,
            "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu}
    return RunFile(spec.path, meta, {
        "rewards": history.rewards, "num_external": history.num_external,
        "generated": history.generated,
        "uses_policy": np.array([a in swarm.policy_nodes for a in names])})


def run_specs(specs: list[RunSpec], config: BenchConfig) -> list[dict[str, Any]]:
    """Run (or reuse) ``specs``; their loaded runs, in the order of ``specs``."""
    todo = [s for s in specs if not (config.resume and is_finished(s.path, s.key()))]
    jobs = min(config.jobs or os.cpu_count() or 1, max(len(todo), 1))
    if isinstance(config.learner, learners.TinyLearners) and todo:
        config.learner.warm_starts(jobs)  # trained once, not by every run at the same time
    run_all(compute, todo, len(specs) - len(todo), jobs, config.progress, config.ray)
    return [load_run(spec.path) for spec in specs]


@dataclass
class BenchResult:
    config: BenchConfig
    headroom: list[Headroom]
    rows: list[Row]
    files: list[Path]
    seconds: float

    @property
    def table_markdown(self) -> str:
        return format_markdown(self.headroom, self.rows, self.config)


def bench(config: BenchConfig | None = None) -> BenchResult:
    """Run (or resume) the benchmark and write the tables, figure and summary to
    ``config.out``."""
    config = config or BenchConfig()
    started = time.perf_counter()
    out = Path(config.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    specs = config.specs()
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for spec, run in sorted(zip(specs, run_specs(specs, config)),
                            key=lambda pair: pair[0].seed_index):
        runs.setdefault((spec.scenario, spec.policy), []).append(run)
    headroom, rows = summarise(config, runs)
    files = [out / "results.md"]
    files[0].write_text(format_markdown(headroom, rows, config))
    if config.plots:
        files.append(plot_num_external(config, runs, out / "num_external.png"))
    seconds = time.perf_counter() - started
    every = [r for rs in runs.values() for r in rs]
    files.append(write_summary(
        out / "summary.json", seconds, None if config.ray else (config.jobs or os.cpu_count()),
        settings_dict(config),
        # the runs' own time, kept across resumes (wall_seconds counts only this call)
        run_seconds_total=round(sum(r["meta"]["seconds"] for r in every), 1),
        run_cpu_seconds_total=round(sum(r["meta"].get("cpu_seconds", 0.0) for r in every), 1),
        tuning={k: v for k, v in config.tuning.items() if k != "trace"},
        headroom=[asdict(h) for h in headroom], rows=[asdict(x) for x in rows]))
    return BenchResult(config, headroom, rows, files, seconds)
