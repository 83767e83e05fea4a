"""The whole experiment: every condition under every seed, one run after another, in worker
processes or as Ray tasks, resumable (``sapo_experiments.sweep``); then the table, the figure
and a summary (``report``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sapo_experiments.format_propagation.config import FormatConfig, RunSpec
from sapo_experiments.format_propagation.report import Row, format_markdown, plot_figure, summarise
from sapo_experiments.format_propagation.run import compute
from sapo_experiments.sweep import SweepResult, group_runs, run_seconds, run_sweep


@dataclass(kw_only=True)
class FormatResult(SweepResult):
    config: FormatConfig
    rows: list[Row]
    runs: dict[str, list[dict[str, Any]]]  #: condition -> per-seed run arrays


def report(config: FormatConfig, finished: list[tuple[RunSpec, dict[str, Any]]]
           ) -> FormatResult:
    """The table and the figure."""
    runs = group_runs(finished, lambda spec: spec.condition)
    rows = summarise(runs)
    summary = {"run_seconds": run_seconds(finished),
               "rows": [dataclasses.asdict(r) for r in rows]}
    return FormatResult(config=config, rows=rows, runs=runs, summary=summary,
                        table_markdown=format_markdown(rows, config),
                        files=[plot_figure(config, runs)] if config.plots else [],
                        tensorboard=config.out / "tensorboard" if config.tensorboard else None,
                        wandb=config.out / "wandb" if config.wandb else None)


def format_propagation(config: FormatConfig | None = None) -> FormatResult:
    """Run (or resume) every run and write ``results.md``, the figure and ``summary.json``.

    Runs go ``config.processes()`` at a time in worker processes (one thread each by default),
    or one after another in this process when that is 1; with ``config.ray``, as Ray tasks of
    ``cpus_per_run`` threads each (by default), under one progress bar over the runs.
    """
    config = config or FormatConfig()
    # here each run shows its own bar of rounds, so no bar over the runs; on Ray, that one
    return run_sweep(config, compute, report, for_runs=config.for_runs,
                     bar_over_runs=config.ray is not None)
