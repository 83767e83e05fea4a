"""Running the benchmark: one swarm per policy, setting and seed, in worker processes or Ray
tasks, resumable; then the table and the figure."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments import learners
from experiments.bench_ratio.config import (
    BenchConfig,
    RunSpec,
    settings_dict,
    spec_of,
    swarm_settings,
)
from experiments.bench_ratio.report import Row, format_markdown, plot_num_external, summarise
from experiments.reproduce.config import seeds_of
from experiments.run_files import RunFile, is_finished, load_run, run_all, write_summary


def policy_seed(base_seed: int, seed_index: int) -> np.random.SeedSequence:
    """The policies' stream of seed ``seed_index``: a third child beside ``seeds_of``'s env
    and learner streams, so adding a policy never changes the swarm it plays in."""
    return np.random.SeedSequence(base_seed, spawn_key=(seed_index, 2))


def run_one(spec: RunSpec) -> Path:
    """Run one swarm and save its per-round arrays to ``out/runs/<name>.npz``."""
    return compute(spec).save()


def compute(spec: RunSpec) -> RunFile:
    """Run one swarm; its file holds the per-round rewards, J and completions generated."""
    import sapo_env

    c = spec.config
    roles = spec.roles()
    names = list(roles)
    initial = {a: spec_of(roles[a]).initial_num_external for a in names}
    env = sapo_env.parallel_env(n=c.n_agents, max_rounds=c.rounds, num_external=initial,
                                **swarm_settings(c))
    env_seed, agent_seed = seeds_of(c.base_seed, spec.seed_index)
    # the learners' own J never matters (the policies set every node's), but building them
    # with the benchmarked policy's start keeps fixed-J runs identical to reproduce's
    agents = c.learner(names, spec_of(spec.policy).initial_num_external, agent_seed)
    streams = policy_seed(c.base_seed, spec.seed_index).spawn(len(names))
    policies = {a: spec_of(roles[a]).build(s, c.rounds, c.sb3_model, a)
                for a, s in zip(names, streams)}
    started = time.perf_counter()
    history = sapo_env.run(env, agents, progress=False, seed=env_seed, ratio_policies=policies)
    meta = {"key": spec.key(), "policy": spec.policy, "setting": spec.setting,
            "seed_index": spec.seed_index, "env_seed": env_seed,
            "seconds": time.perf_counter() - started, "roles": roles}
    return RunFile(spec.path, meta, {
        "rewards": history.rewards, "num_external": history.num_external,
        "generated": history.generated,
        "uses_policy": np.array([roles[a] == spec.policy for a in names])})


@dataclass
class BenchResult:
    config: BenchConfig
    rows: list[Row]
    files: list[Path]
    seconds: float

    @property
    def table_markdown(self) -> str:
        return format_markdown(self.rows, self.config)


def bench(config: BenchConfig | None = None) -> BenchResult:
    """Run (or resume) the benchmark and write the table, figure and summary to ``config.out``."""
    config = config or BenchConfig()
    started = time.perf_counter()
    out = Path(config.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    specs = config.specs()
    todo = [s for s in specs if not (config.resume and is_finished(s.path, s.key()))]
    jobs = min(config.jobs or os.cpu_count() or 1, max(len(todo), 1))
    if isinstance(config.learner, learners.TinyLearners) and todo:
        config.learner.warm_starts(jobs)  # trained once, not by every run at the same time
    run_all(compute, todo, len(specs) - len(todo), jobs, config.progress, config.ray)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for spec in specs:
        runs.setdefault((spec.setting, spec.policy), []).append(load_run(spec.path))
    rows = summarise(config, runs)
    files = [out / "results.md"]
    files[0].write_text(format_markdown(rows, config))
    if config.plots:
        files.append(plot_num_external(config, runs, out / "num_external.png"))
    seconds = time.perf_counter() - started
    files.append(write_summary(
        out / "summary.json", seconds, None if config.ray else jobs, settings_dict(config),
        # the runs' own time, kept across resumes (wall_seconds counts only this call)
        run_seconds_total=round(sum(r["meta"]["seconds"] for rs in runs.values() for r in rs), 1),
        rows=[asdict(x) for x in rows]))
    return BenchResult(config, rows, files, seconds)
