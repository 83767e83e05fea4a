"""Calibrate the simulated learner: fit two parameters to two configurations of a real swarm,
predict the others.

Run by hand (not a test):
    python benchmarks/calibrate_sim.py [--write] [--seeds 2] [--set forget_rate=0.01]
    python benchmarks/calibrate_sim.py --target tiny --set start_tag_prob=0.71 --write
    python benchmarks/calibrate_sim.py --target tiny --set start_tag_prob=0.71 \\
        --free lr off_policy_power --write

The honest test of a simulator is a prediction it was not fitted to. Two targets:

- ``paper`` (the default): the paper's four I/J configurations (8 x Qwen2.5-0.5B, 2000
  rounds, one seed). Minutes on one core when the defaults still fit, about three times as long
  when a ``--set`` or a change to the learner moves the fit.
- ``tiny``: the tiny transformer swarm of ``sapo-env reproduce --learner tiny`` (real GRPO
  learners, 200 rounds; its four configurations and two controls, every seed of the committed
  runs, read from their ``summary.json``). The simulated nodes play the same env: the tiny
  sweep's tasks and system prompt, the same env seeds. A fit takes minutes.

Exactly two free parameters of ``SimulatedLearnerConfig`` are fitted, each to one
configuration's cumulative reward (mean over ``--fit-seeds`` seeds), and every other
configuration is a prediction:

1. ``lr`` governs isolated learning (how far one GRPO step moves the policy): fitted to 8/0
   alone, where nothing is shared.
2. A parameter of learning from others, fitted to 4/4: ``discovery_logit`` (the default: how
   strongly a strategy seen in text, typically another node's "Aha", enters the policy) or,
   with ``--free lr off_policy_power``, ``off_policy_power`` (how much less text the node
   would seldom write teaches it).

Both parameters move both rewards (a node's own rare explorations are text it reads too), so
both are solved at once: Newton steps on log(sim / target) at 8/0 and 4/4, with Broyden's
update of the slopes, until both are within ``--tol`` (2%). The search starts from the
config's defaults (``--start`` moves it). The slopes start from the ones measured in the
first paper calibration, or, for another target or parameter, from one finite-difference step
per parameter. Then every configuration runs on ``--seeds`` seeds; the script reports the
predicted cumulative rewards and ratios to 8/0 beside the target's, whether the target's
ordering holds, and the band width: the mean over rounds of max - min over nodes of each
node's moving-average reward (the paper's Figure 2 band), which the paper says widens as J
grows.

Every other field keeps its default; ``--set field=value`` (repeatable) changes one for the
whole calibration, to see what a mechanism does once the fit has absorbed it, or to match the
target's starting point (``start_tag_prob``: the tiny nodes are warm-started to tag their
answers). Runs use the reproduce sweep's seeds (``sapo_experiments.reproduce.config.seeds_of``,
base seed 0). ``--write`` replaces the section of BENCHMARKS.md named after the target, the
free parameters and the overrides.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from benchmarks_md import add_write_flag, machine, publish

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import SimulatedLearnerConfig, simulated_swarm
from sapo_env.runtime.metrics import PAPER_WINDOW, moving_average
from sapo_experiments.learners import TinyLearners
from sapo_experiments.reproduce.config import BY_LABEL, CONDITIONS, ReproduceConfig, seeds_of

logger = logging.getLogger("calibrate_sim")

BASE_SEED = 0  # the reproduce sweep's default
RATIO_TOLERANCE = 0.2  # a predicted ratio to 8/0 "agrees" within this (or the target's CI)
TINY_SUMMARIES = ("records/tiny-reproduce/lr3e-4/summary.json",
                  "records/tiny-reproduce/eight-seeds/summary.json")
"""The committed tiny sweeps: all six configurations on 3 seeds, and 8/0 and 4/4 on 8."""


@dataclass(frozen=True)
class FreeParameter:
    """One fitted field: how it is searched and what it governs."""

    name: str
    log_scale: bool  # search log(value) (a positive rate) or the value itself
    bounds: tuple[float, float]  # of the value
    governs: str

    def to_search(self, value: float) -> float:
        return math.log(value) if self.log_scale else value

    def from_search(self, x: float) -> float:
        lo, hi = self.bounds
        return min(max(math.exp(x) if self.log_scale else x, lo), hi)


PARAMETERS = {
    "lr": FreeParameter("lr", True, (1e-4, 20.0), "isolated learning"),
    "discovery_logit": FreeParameter("discovery_logit", False, (-12.0, 6.0),
                                     "learning from others: a strategy read enters at it"),
    "off_policy_power": FreeParameter("off_policy_power", False, (0.0, 12.0),
                                      "learning from others: improbable text teaches less"),
}
FITTED_TO = ("8/0", "4/4")  # the first free parameter is fitted to 8/0, the second to 4/4
PAPER_SLOPES = np.array([[0.6, 0.1],
                         [0.26, 0.1]])
"""d log(cumulative reward) / d (log lr, discovery_logit), rows 8/0 and 4/4, as measured near
the paper fit in the first calibration; the fit refines them as it goes."""
MAX_STEP = 1.0  # largest move of one search coordinate per step (e-fold of lr; 1 logit)
FINITE_STEP = 0.3  # search-coordinate step that measures a slope when none is known


@dataclass(frozen=True)
class Target:
    """What the simulator is fitted to: a swarm's cumulative reward by configuration."""

    name: str  #: "paper" or "tiny"
    title: str  #: the learner, in words
    rounds: int
    swarm: dict[str, Any]  #: SwarmConfig fields of every configuration
    cumulative: dict[str, float]  #: configuration label -> mean cumulative reward
    seeds: dict[str, int]  #: configuration label -> seeds behind the mean
    ratio: dict[str, float]  #: label -> ratio to 8/0, paired by seed where there are seeds
    ratio_ci: dict[str, float]  #: 95% CI of that ratio (none for one seed)


PAPER = Target("paper", "the paper's 8 x Qwen2.5-0.5B (one seed)", 2000, {},
               {e.label: e.paper for e in CONDITIONS if e.paper},
               {e.label: 1 for e in CONDITIONS if e.paper},
               {e.label: e.paper / CONDITIONS[0].paper for e in CONDITIONS if e.paper}, {})


def tiny_target(paths: Sequence[str | Path]) -> Target:
    """The tiny sweeps' rows, each configuration from the summary that has the most seeds of
    it (all from one protocol, learner setting and round count)."""
    rows: dict[str, dict[str, Any]] = {}
    settings = None
    for path in paths:
        summary = json.loads(Path(path).read_text())
        s = {k: summary["settings"][k] for k in ("tiny", "rounds", "protocol", "swarm")}
        if settings is not None and s != settings:
            raise SystemExit(f"{path}: other settings than {paths[0]}: {s} != {settings}")
        settings = s
        for row in summary["rows"]:
            if row["seeds"] > rows.get(row["experiment"], {"seeds": 0})["seeds"]:
                rows[row["experiment"]] = row
    assert settings is not None
    tiny = TinyLearners(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in settings["tiny"].items()})
    return Target("tiny", f"tiny transformer specialists ({', '.join(tiny.specialties)}), GRPO "
                  f"lr {tiny.learning_rate:g}", settings["rounds"],
                  {**tiny.swarm_settings(), **settings["swarm"]},
                  {k: r["cumulative"] for k, r in rows.items()},
                  {k: r["seeds"] for k, r in rows.items()},
                  {k: r["ratio"] for k, r in rows.items()},
                  {k: r["ratio_ci"] for k, r in rows.items()})


@dataclass
class Run:
    """One swarm run of simulated learners."""

    label: str
    seed_index: int
    params: tuple[tuple[str, float], ...]
    cumulative: float
    band: float
    wall_s: float


@dataclass
class Calibration:
    target: Target
    overrides: dict[str, float]
    runs: dict[tuple, Run] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)

    def run(self, label: str, seed_index: int, params: dict[str, float]) -> Run:
        """A swarm of simulated learners in configuration ``label``; cached, since the fit
        and the prediction ask for some of the same runs."""
        key = (label, seed_index, tuple(sorted(params.items())))
        if key in self.runs:
            return self.runs[key]
        sweep = ReproduceConfig(learner="sim", rounds=self.target.rounds,
                                swarm=self.target.swarm, experiments=(label,))
        experiment = BY_LABEL[label]
        env = sapo_env.parallel_env(config=sweep.swarm_config(experiment))
        env_seed, agent_seed = seeds_of(BASE_SEED, seed_index)
        agents = simulated_swarm(env.possible_agents, seed=agent_seed,
                                 num_external=experiment.num_external, **self.overrides,
                                 **params)
        start = time.perf_counter()
        history = sapo_env.runtime.run(env, agents, seed=env_seed, progress=False)
        wall = time.perf_counter() - start
        run = Run(label, seed_index, key[2], history.cumulative_reward,
                  band_width(history.rewards), wall)
        logger.info("%s seed %d %s: cumulative %.1f, band %.3f (%.0f s)", label, seed_index,
                    _params_text(params), run.cumulative, run.band, wall)
        self.runs[key] = run
        return run

    def mean_cumulative(self, label: str, seeds: int, params: dict[str, float]) -> float:
        return float(np.mean([self.run(label, s, params).cumulative for s in range(seeds)]))


def band_width(rewards: np.ndarray, window: int = PAPER_WINDOW) -> float:
    """Mean over rounds of (max - min over nodes) of each node's moving-average reward."""
    smoothed = moving_average(rewards, min(window, max(1, len(rewards) // 10)))
    return float(np.nanmean(np.nanmax(smoothed, axis=1) - np.nanmin(smoothed, axis=1)))


def fit(cal: Calibration, free: Sequence[FreeParameter], start: dict[str, float],
        slopes: np.ndarray | None, fit_seeds: int, tol: float, max_steps: int
        ) -> dict[str, float]:
    """Solve ``log(sim / target) = 0`` at 8/0 and 4/4 for the free parameters at once.

    A Newton iteration on the two residuals with Broyden's update of their slopes, starting
    from ``slopes`` (None: one finite-difference step per parameter). Stops when every
    residual is within ``tol``; otherwise returns the best point seen after ``max_steps``.
    """
    x = np.array([p.to_search(start[p.name]) for p in free])
    r = residuals(cal, free, x, fit_seeds, "start")
    if slopes is None:
        slopes = np.zeros((len(free), len(free)))
        for k in range(len(free)):
            dx = np.zeros(len(free))
            dx[k] = FINITE_STEP if free[k].to_search(free[k].bounds[1]) > x[k] + FINITE_STEP \
                else -FINITE_STEP
            slopes[:, k] = (residuals(cal, free, x + dx, fit_seeds, f"slope {free[k].name}")
                            - r) / dx[k]
    best = (np.abs(r).max(), x)
    for step in range(1, max_steps + 1):
        if np.abs(r).max() <= tol:
            break
        try:
            dx = np.linalg.solve(slopes, -r)
        except np.linalg.LinAlgError:  # a parameter that moves nothing: least squares
            dx = np.linalg.lstsq(slopes, -r, rcond=None)[0]
        dx *= min(1.0, MAX_STEP / max(np.abs(dx).max(), 1e-12))  # the slopes are only local
        x_new = np.array([p.to_search(p.from_search(v)) for p, v in zip(free, x + dx)])
        dx = x_new - x
        if not dx @ dx > 0:  # pinned at a bound: nothing left to try
            break
        r_new = residuals(cal, free, x_new, fit_seeds, f"step {step}")
        slopes += np.outer(r_new - r - slopes @ dx, dx) / (dx @ dx)  # Broyden's secant update
        x, r = x_new, r_new
        best = min(best, (np.abs(r).max(), x), key=lambda b: b[0])
    return {p.name: p.from_search(v) for p, v in zip(free, best[1])}


def residuals(cal: Calibration, free: Sequence[FreeParameter], x: np.ndarray, fit_seeds: int,
              where: str) -> np.ndarray:
    """``log(sim / target)`` at 8/0 and 4/4 at search point ``x``."""
    params = {p.name: p.from_search(v) for p, v in zip(free, x)}
    out = []
    for label in FITTED_TO:
        target = cal.target.cumulative[label]
        value = cal.mean_cumulative(label, fit_seeds, params)
        out.append(math.log(value / target))
        cal.trace.append(f"{where} ({_params_text(params)}): {label} {value:.1f}, "
                         f"target {target:.2f}")
    return np.array(out)


def _params_text(params: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in params.items())


def predict(cal: Calibration, params: dict[str, float], seeds: int) -> dict[str, dict]:
    out = {}
    for label in cal.target.cumulative:
        runs = [cal.run(label, s, params) for s in range(seeds)]
        out[label] = {"cumulative": float(np.mean([r.cumulative for r in runs])),
                      "per_seed": [r.cumulative for r in runs],
                      "band": float(np.mean([r.band for r in runs])),
                      "wall_s": float(np.mean([r.wall_s for r in runs]))}
    base = out["8/0"]["cumulative"]
    for label in out:
        out[label]["ratio"] = out[label]["cumulative"] / base
    return out


def agreement(target: Target, label: str, predicted_ratio: float) -> tuple[float, float, bool]:
    """The gap of a predicted ratio to the target's, the width it is judged by (the target's
    95% CI where it has one, at least ``RATIO_TOLERANCE``), and whether it is within it."""
    gap = predicted_ratio - target.ratio[label]
    width = max(RATIO_TOLERANCE if target.name == "paper" else 0.0,
                target.ratio_ci.get(label) or 0.0)
    return gap, width, abs(gap) <= width


def heading(target: Target, free: Sequence[FreeParameter], overrides: dict[str, float]) -> str:
    text = "## Simulated learner calibration"
    if target.name != "paper":
        text += f" to the {target.name} learner"
    if [p.name for p in free] != ["lr", "discovery_logit"]:
        text += f", fitting {' and '.join(p.name for p in free)}"
    return text + (f" ({_params_text(overrides)})" if overrides else "")


def report(cal: Calibration, free: Sequence[FreeParameter], params: dict[str, float],
           result: dict[str, dict], seeds: int, fit_seeds: int, tol: float, minutes: float,
           command: str) -> str:
    """The BENCHMARKS.md section: fitted values, the table beside the target, the verdicts."""
    target = cal.target
    # how far the fit got, on the seeds it was fitted on (cached runs: nothing new runs)
    misses = {label: cal.mean_cumulative(label, fit_seeds, params) / target.cumulative[label]
              - 1 for label in FITTED_TO}
    converged = all(abs(math.log1p(m)) <= tol for m in misses.values())
    labels = list(target.cumulative)
    sim_order = sorted(labels, key=lambda k: -result[k]["cumulative"])
    target_order = sorted(labels, key=lambda k: -target.cumulative[k])
    paper_j = [k for k in ("8/0", "6/2", "4/4", "2/6") if k in labels]
    bands = [result[k]["band"] for k in paper_j]
    fit_seed_text = f"seed{'s' if fit_seeds > 1 else ''} 0" + (
        f"-{fit_seeds - 1}" if fit_seeds > 1 else "")
    lines = [
        heading(target, free, cal.overrides), "",
        f"`{command}` on {datetime.date.today()}, {machine()}; {minutes:.0f} min in all. "
        f"8 simulated learners x {target.rounds} rounds in the env of the target "
        f"({target.title}): the paper's protocol (a node with J external groups answers "
        f"8 - J questions)"
        + (", the target's tasks and system prompt" if target.swarm else "")
        + f", reproduce-sweep seeds (base seed {BASE_SEED}); fitted on {fit_seed_text}, "
        f"predicted on seeds 0-{seeds - 1}."
        + (f" Fixed overrides: {_params_text(cal.overrides)}." if cal.overrides else ""), "",
        f"Fitted to the target's {' and '.join(FITTED_TO)} cumulative rewards only: "
        + "; ".join(f"`{p.name}` = {params[p.name]:.4g} ({p.governs}, fitted to {label})"
                    for p, label in zip(free, FITTED_TO)) + ". "
        + ("The fit holds within the tolerance" if converged else
           "**The fit failed**: no value found reaches the target within the tolerance; the "
           "best point is shown")
        + f" ({', '.join(f'{k} {100 * m:+.1f}%' for k, m in misses.items())} on the fitted "
        f"seeds; tolerance {100 * tol:.0f}%).", "",
        "| configuration | role | target | target seeds | sim, mean | sim per seed | "
        "ratio to 8/0: target | sim | agrees | band width (sim) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    agreeing, predicted = [], [k for k in labels if k not in FITTED_TO]
    for label in labels:
        r = result[label]
        role = ("fitted" if converged else "fit failed") if label in FITTED_TO \
            else "**predicted**"
        ci = target.ratio_ci.get(label)
        gap, width, ok = agreement(target, label, r["ratio"])
        if label in predicted and ok:
            agreeing.append(label)
        lines.append(
            f"| {label} | {role} | {target.cumulative[label]:.2f} | {target.seeds[label]} | "
            f"{r['cumulative']:.1f} | {' / '.join(f'{c:.0f}' for c in r['per_seed'])} | "
            f"{target.ratio[label]:.2f}{f' ± {ci:.2f}' if ci else ''} | {r['ratio']:.2f} | "
            f"{'–' if label == '8/0' else ('yes' if ok else 'no')} ({gap:+.2f}) | "
            f"{r['band']:.3f} |")
    lines += [
        "",
        "A predicted ratio agrees when it lies within the target's 95% CI"
        + (f" (the paper has one seed: within {RATIO_TOLERANCE})" if target.name == "paper"
           else "") + f". Predictions that agree: {len(agreeing)} of {len(predicted)}"
        + (f" ({', '.join(agreeing)})" if agreeing else "") + ".",
        f"- Ordering: sim {' > '.join(sim_order)}; target {' > '.join(target_order)}: "
        f"{'the same' if sim_order == target_order else 'not the same'}.",
        f"- Band width by J ({', '.join(paper_j)}): {', '.join(f'{b:.3f}' for b in bands)}: "
        f"{'widens' if all(b2 > b1 for b1, b2 in zip(bands, bands[1:])) else 'does not widen'}"
        f" with J at every step.",
        f"- One run of 8 nodes x {target.rounds} rounds, env included: 8/0 "
        f"{result['8/0']['wall_s']:.1f} s, 4/4 {result['4/4']['wall_s']:.1f} s (a node with J "
        f"external answers 8 - J questions, so the env's scoring shrinks with J).",
        "",
        "<details><summary>Fit trace</summary>", "",
        *[f"- {t}" for t in cal.trace],
        "", "</details>", "",
    ]
    return "\n".join(lines)


def _parse_set(items: Sequence[str], free: Sequence[FreeParameter]) -> dict[str, float]:
    names = {f.name for f in dataclasses.fields(SimulatedLearnerConfig)}
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in names or not value:
            raise SystemExit(f"--set expects field=value with a SimulatedLearnerConfig field, "
                             f"got {item!r}")
        if name in {p.name for p in free}:
            raise SystemExit(f"--set {name}: {name} is fitted, not set")
        out[name] = float(value)
    SimulatedLearnerConfig(**out)  # a ValueError names a bad value now, not after 20 minutes
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=["paper", "tiny"], default="paper",
                        help="fit to the paper's table or to the committed tiny sweeps")
    parser.add_argument("--tiny-summary", nargs="+", default=list(TINY_SUMMARIES),
                        help="summary.json files of the tiny sweeps (--target tiny)")
    parser.add_argument("--free", nargs=2, default=["lr", "discovery_logit"],
                        choices=list(PARAMETERS), metavar="FIELD",
                        help="the two fitted fields: the first to 8/0, the second to 4/4 "
                             "(default: lr discovery_logit)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds of the final prediction (default: paper 2, tiny 8)")
    parser.add_argument("--fit-seeds", type=int, default=None,
                        help="seeds whose mean the fit matches (each costs a run per step; "
                             "default: paper 1, tiny 8)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per run (default: the target's; others: smoke runs)")
    parser.add_argument("--tol", type=float, default=0.02,
                        help="fit tolerance on log(cumulative reward)")
    parser.add_argument("--max-steps", type=int, default=6,
                        help="Newton steps of the fit (each runs 8/0 and 4/4 once per fit seed)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="fix a SimulatedLearnerConfig field for the whole calibration")
    parser.add_argument("--start", action="append", default=[], metavar="FIELD=VALUE",
                        help="where the search of a fitted field starts (default: its "
                             "current default)")
    add_write_flag(parser)
    args = parser.parse_args(argv)
    tiny = args.target == "tiny"
    seeds = args.seeds or (8 if tiny else 2)
    fit_seeds = args.fit_seeds or (8 if tiny else 1)
    if seeds < 1 or fit_seeds < 1 or args.free[0] == args.free[1]:
        parser.error("--seeds and --fit-seeds must be >= 1, and --free two different fields")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    free = [PARAMETERS[name] for name in args.free]
    overrides = _parse_set(args.set, free)
    target = tiny_target(args.tiny_summary) if tiny else PAPER
    if args.rounds:  # a smoke run: the target scaled to the shorter run
        scale = args.rounds / target.rounds
        target = dataclasses.replace(target, rounds=args.rounds, cumulative={
            k: v * scale for k, v in target.cumulative.items()})
    defaults = SimulatedLearnerConfig()
    start = {p.name: float(getattr(defaults, p.name)) for p in free}
    for item in args.start:
        name, _, value = item.partition("=")
        if name not in start or not value:
            parser.error(f"--start expects field=value with a fitted field {sorted(start)}, "
                         f"got {item!r}")
        start[name] = float(value)
    known = target.name == "paper" and args.free == ["lr", "discovery_logit"]
    cal = Calibration(target=target, overrides=overrides)
    began = time.perf_counter()
    params = fit(cal, free, start, PAPER_SLOPES.copy() if known else None, fit_seeds, args.tol,
                 args.max_steps)
    result = predict(cal, params, seeds)
    minutes = (time.perf_counter() - began) / 60
    command = " ".join(["python benchmarks/calibrate_sim.py"]
                       + (["--target tiny"] if tiny else [])
                       + ([f"--free {' '.join(args.free)}"] if args.free != [
                           "lr", "discovery_logit"] else [])
                       + [f"--set {s}" for s in args.set]
                       + [f"--start {s}" for s in args.start]
                       + ([f"--seeds {seeds}"] if args.seeds else []))
    section = report(cal, free, params, result, seeds, fit_seeds, args.tol, minutes,
                     command + " --write" * args.write)
    publish(section, args.write)


if __name__ == "__main__":
    main()
