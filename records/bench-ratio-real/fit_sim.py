"""Does the simulator predict the real track? Fit simulated learners to the track's fixed-0 and
fixed-4 and predict its other arms, as README.md plans ("Does the simulator predict the real
track?"): first the starting level (``strategy_quality`` scaled so that fixed-0's first block
matches), then a grid over ``GRID`` on ``--grid-seeds`` seeds (the loss the squared error of
the 20-round block means of both targets), then the best point on every seed, its predictions
beside the real runs' 95% CIs, and the order of the search's schedules on the training
seeds (``--search``). ::

    python records/bench-ratio-real/fit_sim.py                  # the held-out runs, 12 seeds
    python records/bench-ratio-real/fit_sim.py --runs records/bench-ratio-real/tuning \\
        --seeds 1000 1001 --grid-seeds 1000 --grid lr=0.01,0.03 off_policy_power=0,2 \\
        forget_rate=0 difficulty_spread=0          # a dry run on the training seeds' runs

Simulated runs play this track's env (its tasks and empty system prompt, ``seeds_of`` base seed
0, the same env seeds as the real runs); a run of 200 rounds takes about a second of CPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

import sapo_env
import sapo_env.runtime
from agents.sim.simulated_config import SimulatedLearnerConfig
from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.policies import spec_of
from sapo_experiments.bench_ratio.scores import generation_budget, per_seed_scores
from sapo_experiments.bench_ratio.tracks import REAL_LEARNER
from sapo_experiments.learners import SimulatedLearners
from sapo_experiments.reproduce.report import mean_ci
from sapo_experiments.run_files import load_run
from sapo_experiments.sweep import seeds_of

HERE = Path(__file__).resolve().parent
ROUNDS, NODES, BLOCK = 200, 8, 20
TARGETS = ("fixed-0", "fixed-4")
PREDICTED = ("fixed-2", "fixed-6")
FIXED = ("fixed-0", "fixed-2", "fixed-4", "fixed-6")
BASE = {"explore": 0.0, "start_tag_prob": 0.99}
"""The Aha off (no node ever holds the best strategy) and the bases' tags on every answer."""
GRID = {"lr": (0.005, 0.01, 0.02, 0.04), "off_policy_power": (0.0, 1.0, 2.0, 4.0),
        "forget_rate": (0.0, 0.003, 0.01, 0.03), "difficulty_spread": (0.0, 0.5, 1.0, 2.0)}
QUALITY = SimulatedLearnerConfig().strategy_quality


BENCH = BenchConfig(track="real", rounds=ROUNDS, tuned=None)
"""What the bench builds a fixed ratio's or a schedule's policy from (its rounds)."""


def policy(label: str):
    """A fixed ratio or a schedule of equal phases over ``ROUNDS``, as the bench builds it."""
    return spec_of(label).build(None, None, BENCH, {})


def first_j(label: str) -> int:
    """The J in force in round 0 under ``label``, as in the bench."""
    return spec_of(label).initial_num_external


def simulate(overrides: dict, label: str, seed: int, rounds: int = ROUNDS) -> dict:
    """One simulated run of ``label`` on seed ``seed``: its rewards and completions generated,
    in the shape of a bench run file's arrays."""
    env = sapo_env.parallel_env(n=NODES, max_rounds=rounds, num_external=first_j(label),
                                **REAL_LEARNER.swarm_settings())
    env_seed, agent_seed = seeds_of(0, seed)
    nodes = SimulatedLearners({**BASE, **overrides})(env.possible_agents, first_j(label),
                                                     agent_seed)
    history = sapo_env.runtime.run(env, nodes, seed=env_seed, progress=False,
                                   ratio_policies={a: policy(label) for a in env.possible_agents})
    env.close()
    return {"rewards": history.rewards, "generated": history.generated,
            "uses_policy": np.ones(NODES, dtype=bool)}


def blocks(runs: list[dict]) -> np.ndarray:
    """The mean over runs of the nodes' mean reward in each ``BLOCK``-round block."""
    per_round = np.mean([np.nanmean(r["rewards"], axis=1) for r in runs], axis=0)
    return per_round[: len(per_round) // BLOCK * BLOCK].reshape(-1, BLOCK).mean(axis=1)


def real_runs(folder: Path, label: str, seeds: list[int]) -> list[dict]:
    return [load_run(folder / f"all_{label}_seed{k}.npz") for k in seeds]


def starting_level(target: float, seeds: list[int]) -> float:
    """The factor on ``strategy_quality`` at which fixed-0's first block matches ``target``
    (bisection; the first block rises with the factor)."""
    low, high = 0.05, 1.0 / max(QUALITY)
    for _ in range(12):
        mid = (low + high) / 2
        quality = tuple(q * mid for q in QUALITY)
        first = blocks([simulate({"strategy_quality": quality}, "fixed-0", k, BLOCK)
                        for k in seeds])[0]
        low, high = (mid, high) if first < target else (low, mid)
    return (low + high) / 2


def grid_search(targets: dict[str, np.ndarray], quality: tuple, seeds: list[int],
                grid: dict[str, tuple]) -> list[dict]:
    """Every point of ``grid`` with its loss, best first."""
    points = []
    for values in itertools.product(*grid.values()):
        overrides = {"strategy_quality": quality, **dict(zip(grid, values))}
        loss = sum(float(np.sum((blocks([simulate(overrides, label, k) for k in seeds])
                                 - targets[label]) ** 2)) for label in TARGETS)
        points.append({"overrides": dict(zip(grid, values)), "loss": loss})
    return sorted(points, key=lambda p: p["loss"])


def judged(name: str, sim: np.ndarray, real: np.ndarray) -> dict:
    """The simulated mean beside the real mean and 95% CI over seeds; inside or not."""
    mean, ci = mean_ci(real)
    value = float(np.mean(sim))
    return {"what": name, "sim": round(value, 4), "real": round(mean, 4), "ci": round(ci, 4),
            "inside": bool(abs(value - mean) <= ci)}


def predictions(overrides: dict, folder: Path, seeds: list[int], oracle: str | None,
                best: str) -> list[dict]:
    """The fit's predictions on ``seeds``, judged against the real runs there."""
    labels = list(FIXED) + ([oracle] if oracle else [])
    sim = {lab: [simulate(overrides, lab, k) for k in seeds] for lab in labels}
    real = {lab: real_runs(folder, lab, seeds) for lab in labels}
    budget = generation_budget([r for lab in FIXED for r in real[lab]])
    s = {lab: per_seed_scores(sim[lab], budget) for lab in labels}
    r = {lab: per_seed_scores(real[lab], budget) for lab in labels}
    out = []
    for lab in labels:
        out.append(judged(f"{lab} per round", s[lab]["per_round"], r[lab]["per_round"]))
        if lab != "fixed-0":
            out.append(judged(f"{lab} / fixed-0", s[lab]["per_round"] / s["fixed-0"]["per_round"],
                              r[lab]["per_round"] / r["fixed-0"]["per_round"]))
    if oracle:
        out.append(judged(f"headroom ({oracle} - {best})",
                          s[oracle]["per_round"] - s[best]["per_round"],
                          r[oracle]["per_round"] - r[best]["per_round"]))
    for score in ("per_round", "at_budget"):
        order = {w: sorted(FIXED, key=lambda lab: -np.mean(x[lab][score])) for w, x in
                 (("sim", s), ("real", r))}
        out.append({"what": f"ranking of the fixed ratios, {score}", **order,
                    "inside": order["sim"] == order["real"]})
    return out


def schedule_order(overrides: dict, folder: Path) -> dict:
    """The order of every fixed ratio and schedule of the search (its runs in ``folder``, the
    training seeds) by mean cumulative reward, simulated and real, and their Spearman rank
    correlation: on 2 seeds the order is what can be compared, not the values."""
    from scipy.stats import spearmanr

    by_label: dict[str, list[int]] = {}
    for path in sorted(folder.glob("all_*_seed*.npz")):
        label, seed = path.stem.removeprefix("all_").rsplit("_seed", 1)
        by_label.setdefault(label, []).append(int(seed))
    labels = sorted(by_label)
    real = [np.mean([np.nanmean(r["rewards"], axis=1).sum()
                     for r in real_runs(folder, lab, by_label[lab])]) for lab in labels]
    sim = [np.mean([np.nanmean(simulate(overrides, lab, k)["rewards"], axis=1).sum()
                    for k in by_label[lab]]) for lab in labels]
    rho = spearmanr(sim, real).statistic
    return {"what": "order of the search's fixed ratios and schedules (training seeds)",
            "sim": [labels[i] for i in np.argsort(sim)[::-1]],
            "real": [labels[i] for i in np.argsort(real)[::-1]], "spearman": round(float(rho), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=HERE / "runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(12)))
    parser.add_argument("--grid-seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--grid", nargs="*", default=[], metavar="NAME=V1,V2",
                        help="replace one parameter's values in GRID (a dry run's smaller grid)")
    parser.add_argument("--search", type=Path, default=HERE / "tuning",
                        help="the search's runs (training seeds) whose order is predicted")
    parser.add_argument("--out", type=Path, default=None, help="write the fit as JSON here")
    args = parser.parse_args()
    grid = dict(GRID)
    for item in args.grid:
        name, _, values = item.partition("=")
        grid[name] = tuple(float(v) for v in values.split(","))
    tuned = json.loads((HERE / "tuned.json").read_text()) if (HERE / "tuned.json").exists() else []
    scenario = tuned[0]["scenarios"]["all"] if tuned else {}
    started, cpu = time.perf_counter(), time.process_time()
    targets = {lab: blocks(real_runs(args.runs, lab, args.seeds)) for lab in TARGETS}
    factor = starting_level(float(targets["fixed-0"][0]), args.grid_seeds)
    quality = tuple(round(q * factor, 5) for q in QUALITY)
    points = grid_search(targets, quality, args.grid_seeds, grid)
    best = {"strategy_quality": quality, **points[0]["overrides"]}
    result = {"targets": {k: v.round(4).tolist() for k, v in targets.items()},
              "quality_factor": round(factor, 4), "best": best, "grid": points[:10],
              "predictions": predictions(best, args.runs, args.seeds, scenario.get("oracle"),
                                         scenario.get("best_fixed", "fixed-0")),
              "search_order": schedule_order(best, args.search),
              "wall_seconds": round(time.perf_counter() - started, 1),
              "cpu_seconds": round(time.process_time() - cpu, 1)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
