"""The attack experiment's runs: one swarm per attack, fraction, defense and seed
(``compute``), and their report (``report``: the tables and the figure);
``sapo_experiments.sweep`` runs them, in worker processes or Ray tasks, resumable."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_experiments.attack.config import (
    ABSENT,
    ATTACK_ENV,
    DEFENSES,
    HONEST_J,
    LEARNER_SWITCHES,
    AttackConfig,
    RunSpec,
)
from sapo_experiments.attack.report import (
    ConditionResult,
    format_markdown,
    plot_attacks,
    summarise,
)
from sapo_experiments.run_files import RunFile
from sapo_experiments.sweep import SweepResult, group_runs, run_sweep, seeds_of, total_seconds


def attack_seed(base_seed: int, seed_index: int) -> np.random.SeedSequence:
    """The adversaries' stream of seed ``seed_index``: a child beside ``seeds_of``'s env and
    learner streams, so the honest nodes and the questions are the same with and without
    attackers (common random numbers)."""
    return np.random.SeedSequence(base_seed, spawn_key=(seed_index, 3))


def run_one(spec: RunSpec) -> Path:
    """Run one swarm and save it to ``out/runs/<name>.npz`` (see ``compute``)."""
    return compute(spec).save()


def compute(spec: RunSpec) -> RunFile:
    """Run one swarm; its file holds per-round rewards, the honest nodes' share of completions
    carrying the injected line, the groups verification rejected, the share of the honest
    nodes' external groups that came from another source than an honest node, the completions
    whose scoring ran out of time or budget, the remote nodes' actions the runner refused, and
    each round's wall time."""
    import sapo_env.runtime
    from agents.sim.injection import carries
    from agents.sim.simulated import simulated_swarm

    c = spec.config
    names = [f"node_{i}" for i in range(c.n_agents)]
    bad = spec.adversaries()
    honest = [a for a in names if a not in bad]
    if spec.attack == ABSENT:  # the honest nodes alone
        names, bad = honest, []
    switches = DEFENSES[spec.defense]
    entry = spec.entry()
    start_j = entry.experiment_j if entry and entry.experiment_j is not None else HONEST_J
    env = sapo_env.parallel_env(
        n=len(names), max_rounds=c.rounds,
        num_external={a: start_j if a in bad else HONEST_J for a in names},
        adversaries={a: spec.attack for a in bad} if spec.transport else None,
        **{k: v for k, v in switches.items() if k not in LEARNER_SWITCHES},
        **ATTACK_ENV.get(spec.attack, {}))
    env_seed, agent_seed = seeds_of(c.base_seed, spec.seed_index)
    agents = simulated_swarm(names, seed=agent_seed, num_external=HONEST_J,
                             **{k: v for k, v in switches.items() if k in LEARNER_SWITCHES})
    if bad and entry and entry.swarm is not None:  # a text or remote attack
        agents = entry.swarm(agents, spec.attack, bad,
                             attack_seed(c.base_seed, spec.seed_index))
    injected, rejected, hostile, stalled, refused, seconds = [], [], [], [], [], []
    clock = [time.perf_counter()]

    class Watch(sapo_env.runtime.Callback):
        def on_round_end(self, record: sapo_env.runtime.RoundRecord) -> None:
            texts = [t for a in honest for g in record.actions[a]["completions"] for t in g]
            injected.append(sum(map(carries, texts)) / len(texts) if texts else 0.0)
            rejected.append(next(iter(record.infos.values()))["rejected_groups_swarm"])
            external = [g["source"] for a in honest for g in record.observations[a]["batch"]
                        if not g["local"]]
            hostile.append(sum(s not in honest for s in external) / len(external)
                           if external else np.nan)
            stalled.append(sum(i["scoring_failures"].get(k, 0) for i in record.infos.values()
                               for k in ("budget", "timeout")))
            refused.append(len(record.refused))
            seconds.append(time.perf_counter() - clock[0])
            clock[0] = time.perf_counter()

    started = time.perf_counter()
    history = sapo_env.runtime.run(env, agents, progress=False, seed=env_seed, callbacks=[Watch()])
    meta = {"key": spec.key(), "attack": spec.attack, "fraction": spec.fraction,
            "defense": spec.defense, "seed_index": spec.seed_index, "env_seed": env_seed,
            "nodes": names, "adversaries": bad, "seconds": time.perf_counter() - started}
    return RunFile(spec.path, meta, {"rewards": history.rewards,
                                     "honest": np.array([a in honest for a in names]),
                                     "injected": np.array(injected),
                                     "rejected": np.array(rejected),
                                     "hostile_share": np.array(hostile, dtype=float),
                                     "scoring_stalled": np.array(stalled),
                                     "refused": np.array(refused),
                                     "round_seconds": np.array(seconds)})


@dataclass(kw_only=True)
class AttackResult(SweepResult):
    config: AttackConfig
    cells: list[ConditionResult]


def report(config: AttackConfig, finished: list[tuple[RunSpec, dict[str, Any]]]
           ) -> AttackResult:
    """The tables and the figure of the honest nodes' reward."""
    cells = summarise(config, group_runs(finished, lambda s: (s.attack, s.fraction, s.defense)))
    figure = config.out / "honest_reward.png"
    return AttackResult(
        config=config, cells=cells, table_markdown=format_markdown(cells, config),
        files=[plot_attacks(config, cells, figure)] if config.plots else [],
        summary={"run_seconds_total": total_seconds(finished),
                 "cells": [asdict(x) for x in cells]})


def attack(config: AttackConfig | None = None) -> AttackResult:
    """Run (or resume) the experiment and write the tables, figure and summary to
    ``config.out``."""
    return run_sweep(config or AttackConfig(), compute, report)
