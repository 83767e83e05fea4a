"""The whole experiment: every condition under every seed, one run after another, in worker
processes or as Ray tasks, resumable; then the table, the figure and a summary."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sapo_experiments.format_propagation.config import FormatConfig, RunSpec
from sapo_experiments.format_propagation.report import Row, format_markdown, plot_figure, summarise
from sapo_experiments.format_propagation.run import compute, finished
from sapo_experiments.learners import warm_starts
from sapo_experiments.run_files import load_run, run_all, write_summary


@dataclass
class FormatResult:
    config: FormatConfig
    rows: list[Row]
    runs: dict[str, list[dict[str, Any]]]  #: condition -> per-seed run arrays
    files: list[Path]
    seconds: float

    @property
    def table_markdown(self) -> str:
        return format_markdown(self.rows, self.config)


def jobs_for(config: FormatConfig) -> int:
    """Runs at once: ``config.jobs``, else one per CPU core, or 1 on a GPU (one device)."""
    if config.jobs is not None:
        return config.jobs
    from agents.models import resolve_device

    return 1 if resolve_device(config.device).type != "cpu" else (os.cpu_count() or 1)


def format_propagation(config: FormatConfig | None = None) -> FormatResult:
    """Run (or resume) every run and write ``results.md``, the figure and ``summary.json``.

    Runs go ``jobs_for(config)`` at a time in worker processes (one thread each by default),
    or one after another in this process when that is 1; with ``config.ray``, as Ray tasks
    of ``cpus_per_run`` threads each (by default), under one progress bar over the runs.
    """
    config = config or FormatConfig()
    started = time.perf_counter()
    out = Path(config.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    specs = [RunSpec(c, s, config) for c in config.conditions for s in range(config.seeds)]
    todo = [s for s in specs if not (config.resume and finished(s))]
    jobs = 1 if config.ray else min(jobs_for(config), max(len(todo), 1))
    if todo and config.tiny is not None:  # trained once, not by every run at the same time
        warm_starts(config.tiny_warm_starts(), jobs)
    if config.ray or jobs > 1:
        # one thread per core a run has (its task's cpus_per_run, its process's share) unless
        # told otherwise: each keeps its cores busy. A Ray task draws no bar of rounds
        cores = config.ray.cpus_per_run if config.ray else (os.cpu_count() or 1) // jobs
        per_run = dataclasses.replace(config, threads=config.threads or max(1, int(cores)),
                                      progress=config.progress and not config.ray)
        todo = [RunSpec(s.condition, s.seed_index, per_run) for s in todo]
    # here each run shows its own bar of rounds, so no bar over the runs; on Ray, that one
    run_all(compute, todo, len(specs) - len(todo), jobs,
            progress=config.progress and config.ray is not None, ray=config.ray)

    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in config.conditions}
    for spec in specs:
        runs[spec.condition].append(load_run(spec.path))
    rows = summarise(runs)
    files = [out / "results.md"]
    files[0].write_text(format_markdown(rows, config))
    if config.plots:
        files.append(plot_figure(config, runs))
    seconds = time.perf_counter() - started
    files.append(write_summary(
        out / "summary.json", seconds, None if config.ray else jobs,
        {f.name: (getattr(config, f.name) if f.name != "model" else config.model_name())
         for f in dataclasses.fields(config)},
        run_seconds={spec.name: round(runs[spec.condition][spec.seed_index]["meta"]["seconds"], 1)
                     for spec in specs},
        rows=[dataclasses.asdict(r) for r in rows]))
    return FormatResult(config, rows, runs, files, seconds)
