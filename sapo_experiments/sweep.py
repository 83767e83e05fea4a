"""The skeleton every harness (reproduce, bench-ratio, attack, format-propagation) is: a sweep of
runs, each a cell of the experiment under one seed, run (or found finished) and then reported.

A new experiment is three things; the rest is here:

- its config, a ``SweepConfig`` subclass: its own fields beside the shared ones below, its
  ``presets`` (the values of the fields left at None, full or ``quick``) and its ``specs``
  (every run of the sweep, each a ``RunSpecBase``: a name, a ``key`` and its config);
- its ``compute(spec) -> RunFile`` (``sapo_experiments.run_files``): one run, as plain data;
- its report ``report(config, finished) -> SweepResult``: the table from the finished runs,
  its other files (figures), and what ``summary.json`` says of them.

``run_sweep(config, compute, report)`` runs the runs not finished yet (here, in worker
processes or as Ray tasks: ``run_files.run_all``), loads every run, hands them to the report,
and writes ``results.md`` and ``summary.json``; the harness's own function is that one line.
Its command line is a ``sapo_experiments.sweep_cli.SweepCommand``. ``sapo_experiments.attack``
is the smallest whole example: ``config.py`` (the config and its ``RunSpec``), ``sweep.py``
(``compute``, ``report`` and ``attack``), ``report.py`` (the statistics, the table, the
figure) and ``cli.py``.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from sapo_env.validation import check_int
from sapo_experiments.ray_runs import RayOptions, check_ray
from sapo_experiments.run_files import (
    RunFile,
    is_finished,
    load_run,
    made_by_other_code,
    run_all,
    write_summary,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepConfig(abc.ABC):
    """The settings every sweep has. A harness's config adds its own fields, says what the
    fields left at None take (``presets``) and lists its runs (``specs``); it may also say
    how many processes its runs may use (``processes``), what they share that is made once
    before them (``prepare``) and how ``summary.json`` writes its settings (``settings``)."""

    out: str | Path | None = None
    """Output folder (None: the preset's); a ``Path`` after construction."""
    seeds: int | None = None
    """Seeds per cell of the experiment (None: the preset's). Seed k is the same in every cell
    (common random numbers, ``seeds_of``), so the cells' differences are paired by seed."""
    base_seed: int = 0
    """Root of every seed of the sweep."""
    rounds: int | None = None
    """Rounds per run (None: the preset's)."""
    jobs: int | None = None
    """Runs in parallel processes (None: ``processes``' default, one per CPU core)."""
    ray: RayOptions | None = None
    """Run each run as a Ray task on this Ray instead (``sapo_experiments.ray_runs``; ``jobs``
    left at None): the same runs, scheduled by Ray. What a run reads (a model, a learner's
    module) must be where its task runs. None: processes on this machine."""
    resume: bool = True
    """Reuse finished runs in ``out/runs`` whose settings match."""
    plots: bool = True
    """Write the figures (needs matplotlib, the ``plot`` extra)."""
    progress: bool = True
    """Show a progress bar over runs."""
    quick: bool = False
    """A smoke test for the fields left at None (``presets``); its table says what it cannot
    conclude."""

    def __post_init__(self) -> None:
        # fields left at None take the full or quick sweep's value; given ones are kept
        for name, value in self.presets().items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "out", Path(self.out))
        for name in ("seeds", "rounds"):
            check_int(name, getattr(self, name), 1)
        if self.jobs is not None:
            check_int("jobs", self.jobs, 1)
        check_ray(self.ray, self.jobs)

    @abc.abstractmethod
    def presets(self) -> Mapping[str, Any]:
        """The value each field left at None takes, by field name (``out``, ``seeds`` and
        ``rounds`` at least): the full sweep's, or the quick one's with ``quick``."""

    @abc.abstractmethod
    def specs(self) -> list[RunSpecBase]:
        """Every run of the sweep, in the order the report reads them."""

    def processes(self) -> int:
        """Worker processes the runs may use at most: ``jobs``, else one per CPU core."""
        return self.jobs or os.cpu_count() or 1

    def prepare(self, jobs: int) -> None:  # noqa: B027 (not abstract: most sweeps need nothing)
        """Make, with ``jobs`` processes, what every run needs and none should make on its own
        at the same time as the others (the tiny learners' warm starts); called once before
        the runs when there are any to run. Nothing here."""

    def settings(self) -> dict[str, Any]:
        """The settings as JSON-ready data, for ``summary.json``: every field (a nested
        dataclass as a dict), paths as text."""
        return {k: (str(v) if isinstance(v, Path) else v)
                for k, v in dataclasses.asdict(self).items()}


class RunSpecBase(abc.ABC):
    """One run of a sweep: a cell of the experiment under one seed. A harness's ``RunSpec`` is
    a frozen dataclass with the fields that say which (the cell, ``seed_index``) and its
    ``config``; it pickles, for worker processes and Ray tasks."""

    config: SweepConfig
    folder: ClassVar[str] = "runs"  #: the folder of ``out`` that holds the run files

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The run's file name, without ``.npz``: its cell and seed."""

    @abc.abstractmethod
    def key(self) -> str:
        """A digest of everything that determines the run's outcome (``run_key``): a file
        with this key is this run, finished."""

    @property
    def path(self) -> Path:
        """Where the run's file goes."""
        return Path(self.config.out) / self.folder / f"{self.name}.npz"


def run_key(settings: Mapping[str, Any]) -> str:
    """A run's key: a digest of ``settings`` (JSON-serialisable; anything else counts by its
    ``str``) and of the ``sapo_env`` version."""
    from sapo_env import __version__

    payload = {"version": __version__, **settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def seeds_of(base_seed: int, seed_index: int) -> tuple[int, np.random.SeedSequence]:
    """The env's reset seed and the agents' seed sequence of seed ``seed_index``: children of
    the base seed, the same in every cell of every harness (common random numbers)."""
    env_seq, agent_seq = np.random.SeedSequence(base_seed, spawn_key=(seed_index,)).spawn(2)
    return int(env_seq.generate_state(1, dtype=np.uint64)[0] >> 1), agent_seq


@dataclass(kw_only=True)
class SweepResult:
    """What a sweep returns, and its command prints: a harness's result adds its table's rows."""

    config: SweepConfig
    table_markdown: str
    """The results table, as ``results.md`` begins (and the command prints it, unless
    ``printed_markdown``)."""
    printed_markdown: str = ""
    """What the command prints in place of ``table_markdown`` (empty: the table itself)."""
    notes_markdown: str = ""
    """What ``results.md`` says below the table (reproduce: the tiny specialists' tables)."""
    files: list[Path] = field(default_factory=list)
    """What the sweep wrote, in order: ``results.md``, the report's other files (figures,
    ...), ``summary.json`` (the report gives ``run_sweep`` the middle ones)."""
    seconds: float = 0.0
    """This call's wall time (a reused run's own time is in its file)."""
    summary: dict[str, Any] = field(default_factory=dict, repr=False)
    """What ``summary.json`` holds after the settings: the table's rows, the runs' times."""
    tensorboard: Path | None = None
    """The folder TensorBoard reads the runs from, where they wrote any."""
    wandb: Path | None = None
    """The folder W&B wrote the runs' files to (``wandb/`` of it), where they logged to W&B."""


Config = TypeVar("Config", bound=SweepConfig)
Result = TypeVar("Result", bound=SweepResult)
Finished = list[tuple[Any, dict[str, Any]]]
"""Each run of a sweep with its file's contents (``load_run``), in the order of its specs."""


def run_specs(config: Config, specs: Sequence[RunSpecBase], compute: Callable[[Any], RunFile],
              for_runs: Callable[[int], Config] | None = None, bar_over_runs: bool = True,
              ) -> tuple[Finished, int | None]:
    """Run the runs of ``specs`` that are not finished (all of them without ``config.resume``)
    and load every run; return them with the worker processes used (None: Ray tasks).

    ``for_runs(jobs)``: the config the runs to do are computed with when they go ``jobs`` at a
    time (a copy whose key is the same; the format-propagation runs size their threads and
    bars to it). ``bar_over_runs``: whether ``config.progress`` shows a bar over the runs
    (False where each run shows its own)."""
    todo = [s for s in specs if not (config.resume and is_finished(s.path, s.key()))]
    other = sum(config.resume and made_by_other_code(s.path, s.key()) for s in todo)
    if other:
        logger.warning("making again %d run(s) whose files hold these settings but were made by "
                       "other code of sapo_env or agents; a long sweep keeps its runs across "
                       "code changes when it runs from a tagged commit in a worktree of its own "
                       "(docs/reproducing.md)", other)
    jobs = min(config.processes(), max(len(todo), 1))
    if todo:
        config.prepare(jobs)
    if for_runs is not None:
        per_run = for_runs(jobs)
        todo = [dataclasses.replace(s, config=per_run) for s in todo]
    run_all(compute, todo, len(specs) - len(todo), jobs, config.progress and bar_over_runs,
            config.ray)
    return [(spec, load_run(spec.path)) for spec in specs], None if config.ray else jobs


def run_sweep(config: Config, compute: Callable[[Any], RunFile],
              report: Callable[[Config, Finished], Result],
              for_runs: Callable[[int], Config] | None = None,
              bar_over_runs: bool = True) -> Result:
    """Run (or resume) the sweep of ``config`` (``run_specs``), ``report`` on its runs (the
    table, and its other files written in ``config.out``), and write ``results.md`` and
    ``summary.json``: the settings, then ``report``'s ``summary``. Return ``report``'s result
    with every file written and the wall time."""
    started = time.perf_counter()
    out = Path(config.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    finished, jobs = run_specs(config, config.specs(), compute, for_runs, bar_over_runs)
    result = report(config, finished)
    (out / "results.md").write_text(result.table_markdown + result.notes_markdown)
    result.seconds = time.perf_counter() - started
    summary = write_summary(out / "summary.json", result.seconds, jobs, config.settings(),
                            **result.summary)
    result.files = [out / "results.md", *result.files, summary]
    return result


def group_runs(finished: Finished, condition: Callable[[Any], Hashable]
               ) -> dict[Any, list[dict[str, Any]]]:
    """The runs by condition (``condition(spec)``: the key of a run's condition), conditions in
    the order they come, seeds in order."""
    grouped: dict[Any, list[dict[str, Any]]] = {}
    for spec, run in finished:
        grouped.setdefault(condition(spec), []).append(run)
    return grouped


def run_seconds(finished: Finished) -> dict[str, float]:
    """Each run's own time by name (kept across resumes, where ``wall_seconds`` counts only
    the call that wrote the summary)."""
    return {spec.name: round(run["meta"]["seconds"], 1) for spec, run in finished}


def total_seconds(finished: Finished, meta: str = "seconds") -> float:
    """The runs' time in all: the sum of each run's ``meta[meta]`` (0 where it has none)."""
    return round(sum(run["meta"].get(meta, 0.0) for _, run in finished), 1)


class Labelled(Protocol):
    label: str  #: a cell's name as its table prints it (a ``slug`` names its files)


def canonical_labels(name: str, given: Iterable[str], known: Mapping[str, Labelled]
                     ) -> tuple[str, ...]:
    """The labels of ``given`` (each a label or slug, a key of ``known``) in order, once each;
    a ValueError naming the field ``name`` if one is unknown or there are none."""
    given = tuple(given)
    if not given or any(g not in known for g in given):
        raise ValueError(f"{name} must be labels or slugs of {list(known)}, got {list(given)}")
    return tuple(dict.fromkeys(known[g].label for g in given))
