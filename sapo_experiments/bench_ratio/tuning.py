"""``sapo-env bench-ratio --tune``: everything chosen before the benchmark, on training seeds.

Three searches, all on the training seeds (``TRAINING_SEED_START``, ``TRAINING_SEED_START +
1``, ...: no held-out table is ever computed on them), every candidate scored by the mean
cumulative reward of the policy nodes over those seeds:

1. **The best fixed ratio** of each scenario: ``fixed-J`` for every J of the track's fixed
   ratios (``Track.fixed_grid``; the ``sim`` track's ``FIXED_GRID``).
2. **The oracle** of each scenario: with a track's ``oracle_grid`` (the ``real`` track), the
   best of its schedules, each played whole, whether or not it beats the best fixed ratio on
   the training seeds. Otherwise the best schedule of ``ORACLE_PHASES``
   equal phases, each a J of the fixed ratios, found by coordinate ascent from the best fixed
   ratio: for each phase in turn, every other J is tried with the other phases kept, and the
   best is kept if it beats the current schedule; the sweep over the phases repeats until a
   sweep changes nothing (at most ``MAX_SWEEPS``). An oracle "in hindsight": it knows the
   scenario, and sees the same rounds the policies are scored on, but it is chosen on other
   seeds than those it is scored on, so its headroom on the held-out seeds is a real one, not
   the best of many noisy tries. Where the coordinate ascent finds no schedule that beats the
   best fixed ratio there is no oracle (None).
3. **The tuning budget** of the built-in adaptive policies: the same for each, the four
   settings of ``TUNING_GRID`` (the first its defaults); the setting with the highest mean,
   over the scenarios, of (its cumulative - the best fixed ratio's) / the best fixed ratio's
   is kept, one setting per policy for every scenario (a policy does not know which scenario
   it is in). A track that does not tune its policies (``Track.tune_policies``, the ``real``
   track) takes the settings of the ``sim`` track's full tuning entry instead, marked
   ``"transferred_from": "sim"``.

The results go into the tuning file (``BenchConfig.tuned``) as the entry for these settings
(learner, rounds, nodes, base seed, training seeds), replacing an older one; the benchmark
reads it. ``summary.json``-style timing is in the entry.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sapo_experiments.bench_ratio.config import (
    DEFAULT_SCENARIOS,
    TRAINING_SEED_START,
    TUNED_FILE,
    BenchConfig,
    RunSpec,
    read_tuning,
    tuning_key,
)
from sapo_experiments.bench_ratio.policies import ADAPTIVE, TUNING_GRID, schedule_label
from sapo_experiments.bench_ratio.report import per_seed
from sapo_experiments.bench_ratio.sweep import compute
from sapo_experiments.run_files import machine_description
from sapo_experiments.sweep import run_specs

ORACLE_PHASES = 4  #: the coordinate ascent's schedules: this many equal phases, a fixed J each
MAX_SWEEPS = 3  #: passes of the oracle's coordinate ascent over the phases, at most


def phases_label(phases: tuple[int, ...]) -> str:
    """A schedule's label; one whose phases are all equal is the fixed ratio it is."""
    return f"fixed-{phases[0]}" if len(set(phases)) == 1 else schedule_label(phases)


class _Scorer:
    """Mean cumulative reward on the training seeds, running what is not yet run."""

    def __init__(self, config: BenchConfig):
        self.config = config
        self.seeds = range(TRAINING_SEED_START, TRAINING_SEED_START + config.tune_seeds)
        self.cpu = 0.0

    def __call__(self, wanted: list[tuple[str, str, int | None]]) -> dict[tuple, float]:
        """``(scenario, label, setting)`` -> mean cumulative reward over the training seeds."""
        wanted = list(dict.fromkeys(wanted))
        specs = [RunSpec(label, scenario, k, self.config, setting)
                 for scenario, label, setting in wanted for k in self.seeds]
        self.config.train_warm_starts(self.config.processes(), self.seeds)
        finished, _ = run_specs(self.config, specs, compute)
        runs = [run for _, run in finished]
        self.cpu += sum(r["meta"].get("cpu_seconds", 0.0) for r in runs)
        n = len(self.seeds)
        return {w: float(per_seed(runs[i * n:(i + 1) * n])["cumulative"].mean())
                for i, w in enumerate(wanted)}


def tune(config: BenchConfig, policies: bool = True) -> dict[str, Any]:
    """Run the three searches on the training seeds (the third only with ``policies``, on the
    scenarios of ``config.scenarios`` that are ``DEFAULT_SCENARIOS``) and write their entry
    into ``config.tuned``, keeping the other scenarios of an entry already there; return the
    entry."""
    if config.tuned is None:
        raise ValueError("tuned is None: give the tuning file to write (--tuned PATH)")
    started = time.perf_counter()
    # untuned, so that the held-out policies' settings cannot leak into the candidates; no
    # held-out evaluation, which no search reads
    base = replace(config, tuned=None, held_out_questions=0)
    score = _Scorer(base)
    scenarios, grid = config.scenarios, config.track_spec.fixed_grid
    fixed = score([(s, f"fixed-{j}", None) for s in scenarios for j in grid])
    entry: dict[str, Any] = {"key": tuning_key(config), "scenarios": {}, "policies": {}}
    best_fixed = {}
    for s in scenarios:
        j = max(grid, key=lambda j: fixed[(s, f"fixed-{j}", None)])
        best_fixed[s] = f"fixed-{j}"
        entry["scenarios"][s] = {"best_fixed": best_fixed[s], "fixed": {
            f"fixed-{j}": round(fixed[(s, f"fixed-{j}", None)], 3) for j in grid}}
    value = {s: fixed[(s, best_fixed[s], None)] for s in scenarios}
    search = _whole_grid if config.track_spec.oracle_grid else _coordinate_ascent
    current, trace = search(config, score, best_fixed, value)
    for s in scenarios:
        entry["scenarios"][s].update(oracle=phases_label(current[s]),
                                     oracle_cumulative=round(value[s], 3), search=trace[s])
        if entry["scenarios"][s]["oracle"] == best_fixed[s]:
            entry["scenarios"][s]["oracle"] = None  # no schedule beat the best fixed ratio
    if not config.track_spec.tune_policies:
        entry["policies"] = transferred_settings()
    elif policies:
        entry["policies"] = _tuned_policies(config, score, best_fixed, fixed)
    entry.update(training_seeds=list(score.seeds), date=_dt.date.today().isoformat(),
                 machine=machine_description(),
                 wall_seconds=round(time.perf_counter() - started, 1),
                 run_cpu_seconds=round(score.cpu, 1))
    write_entry(Path(config.tuned), entry)
    return entry


Search = tuple[dict[str, tuple[int, ...]], dict[str, list]]


def _whole_grid(config: BenchConfig, score: _Scorer, best_fixed: dict[str, str],
                value: dict[str, float]) -> Search:
    """The oracle as the best schedule of the track's ``oracle_grid``, every one played, even
    where it does not beat the best fixed ratio on the training seeds (the held-out seeds then
    measure a headroom that may be negative, and can show it equivalent to none); ``value``
    becomes its score. The trace: the best fixed ratio, then every candidate."""
    grid = config.track_spec.oracle_grid
    scores = score([(s, phases_label(c), None) for s in best_fixed for c in grid])
    current, trace = {}, {s: [[best_fixed[s], round(value[s], 3)]] for s in best_fixed}
    for s in best_fixed:
        trace[s] += [[phases_label(c), round(scores[(s, phases_label(c), None)], 3)]
                     for c in grid]
        current[s] = max(grid, key=lambda c: scores[(s, phases_label(c), None)])
        value[s] = scores[(s, phases_label(current[s]), None)]
    return current, trace


def _coordinate_ascent(config: BenchConfig, score: _Scorer, best_fixed: dict[str, str],
                       value: dict[str, float]) -> Search:
    """The oracle by coordinate ascent over ``ORACLE_PHASES`` phases (module docstring), every
    scenario's step in one batch; ``value`` becomes the oracle's score. The trace: each
    schedule that improved."""
    grid = config.track_spec.fixed_grid
    current = {s: (int(best_fixed[s].removeprefix("fixed-")),) * ORACLE_PHASES
               for s in best_fixed}
    trace = {s: [[phases_label(current[s]), round(value[s], 3)]] for s in best_fixed}
    moving = set(best_fixed)
    for _ in range(MAX_SWEEPS):
        changed = set()
        for phase in range(ORACLE_PHASES):
            candidates = {s: [current[s][:phase] + (j,) + current[s][phase + 1:]
                              for j in grid if j != current[s][phase]]
                          for s in moving}
            scores = score([(s, phases_label(c), None) for s in moving for c in candidates[s]])
            for s in moving:
                best = max(candidates[s], key=lambda c: scores[(s, phases_label(c), None)])
                if scores[(s, phases_label(best), None)] > value[s]:
                    current[s], value[s] = best, scores[(s, phases_label(best), None)]
                    trace[s].append([phases_label(best), round(value[s], 3)])
                    changed.add(s)
        moving = changed
        if not moving:
            break
    return current, trace


def _tuned_policies(config: BenchConfig, score: _Scorer, best_fixed: dict[str, str],
                    fixed: dict[tuple, float]) -> dict[str, Any]:
    """The tuning budget (module docstring) on the scenarios that are ``DEFAULT_SCENARIOS``."""
    tuned_on = [s for s in config.scenarios if s in DEFAULT_SCENARIOS]
    scores = score([(s, p, k) for p in ADAPTIVE for k in range(len(TUNING_GRID[p]))
                    for s in tuned_on])
    out = {}
    for p in ADAPTIVE if tuned_on else ():
        gains = [float(np.mean([(scores[(s, p, k)] - fixed[(s, best_fixed[s], None)])
                                / fixed[(s, best_fixed[s], None)] for s in tuned_on]))
                 for k in range(len(TUNING_GRID[p]))]
        chosen = int(np.argmax(gains))  # ties: the first, the defaults
        out[p] = {"kwargs": TUNING_GRID[p][chosen], "setting": chosen,
                  "mean_relative_gain": [round(g, 5) for g in gains], "scenarios": tuned_on}
    return out


def transferred_settings(path: Path = TUNED_FILE) -> dict[str, Any]:
    """The built-in policies' settings of the ``sim`` track's full tuning entry in ``path``,
    each marked ``"transferred_from": "sim"`` ({} without that entry)."""
    sim = read_tuning(path, tuning_key(BenchConfig(tuned=None)))
    return {p: {**e, "transferred_from": "sim"} for p, e in sim.get("policies", {}).items()}


def write_entry(path: Path, entry: dict[str, Any]) -> None:
    """Put ``entry`` into the tuning file at ``path``: an entry with the same key keeps its
    scenarios and policies that ``entry`` does not have."""
    entries = json.loads(path.read_text()) if path.exists() else []
    old = next((e for e in entries if e.get("key") == entry["key"]), {})
    merged = {**old, **entry,
              "scenarios": {**old.get("scenarios", {}), **entry["scenarios"]},
              "policies": {**old.get("policies", {}), **entry["policies"]}}
    entries = [e for e in entries if e.get("key") != entry["key"]] + [merged]
    path.write_text(json.dumps(entries, indent=1) + "\n")
