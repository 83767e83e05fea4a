"""Too much external data? 2/6 next to 4/4, over several seeds.

In the paper, nodes that trained on 2 of their own groups and 6 from the swarm (2/6) reached
the same peaks as 4/4 but oscillated: they learned, forgot and learned again, and ended with a
lower cumulative reward. The paper's explanations: strong nodes are dragged down by the
answers of weaker ones, and the pool's quality falls when nodes take more than they add.

This script runs both settings with the same simulated nodes under each seed and prints, per
seed, the cumulative reward and a swing measure: the standard deviation, over the second half
of the run, of each node's moving reward, averaged over nodes (learning that settles gives a
small swing; learning and forgetting a large one). Then it says whether the seeds agree on
which setting earns more. It saves ``too_much_external.png``: under every seed, the learning
nodes' mean moving reward per setting, with the band between the seeds' lowest and highest
(left), and each seed's cumulative reward in both settings, a line per seed (right).

What it shows at its defaults (3 seeds, 600 rounds): the simulator does not decide it. It
prints:

Verdict: 2/6 minus 4/4, per seed: +12.6, -25.3, +7.1; the order changes from seed to seed:
these 3 seeds do not decide which setting earns more.

One seed would have told either story: the lesson is the count of seeds as much as the swarm
(run it with ``--seeds 1 --seed 0`` and then ``--seed 1``). The simulated learner has the
pool-shrinking mechanism (a 2/6 node answers 2 questions, so the pool is thin) but by default
none of the others: it reads others' text as easily as its own and never forgets except
through the gradient. On real learners (tiny transformers trained by GRPO, 200 rounds and 3
seeds in records/tiny-reproduce/lr3e-4/), 2/6 ends at 0.90x of 8/0, below isolated training;
next to 4/4 (0.93x) the difference is inside the seeds' spread.

Measured times at the defaults: examples/classroom/README.md, "Measured at the defaults".

``--stubborn K`` makes K nodes unable to learn (a learning rate 200 times smaller): weaker
nodes whose answers the others keep reading, the first of the paper's explanations.

Run:  python examples/classroom/04_too_much_external.py [--rounds 600] [--seeds 3] [--stubborn 0]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import SimulatedLearnerConfig, simulated_swarm
from sapo_env.extras import require
from sapo_env.runtime import metrics


def swing(curves: np.ndarray) -> float:
    """Mean over nodes of the standard deviation of their moving reward in the second half."""
    return float(np.nanstd(curves[len(curves) // 2:], axis=0).mean())


@dataclass
class Comparison:
    """Per setting, under each seed: the learning nodes' cumulative reward, and their mean
    moving reward round by round (the figure)."""

    earned: dict[str, list[float]]
    curves: dict[str, list[np.ndarray]]
    learners: list[str]
    names: list[str]
    window: int
    first_seed: int
    stubborn: int


def compare(rounds: int = 600, seeds: int = 3, seed: int = 0, stubborn: int = 0) -> Comparison:
    """Run 4/4 and 2/6 under each seed, printing each seed's cumulative rewards and swings,
    then the verdict line."""
    if not 0 <= stubborn < 8:
        raise ValueError(f"stubborn must be in 0..7, got {stubborn}")
    if seeds < 1 or rounds < 1:
        raise ValueError(f"rounds and seeds must be >= 1, got rounds={rounds}, seeds={seeds}")
    window = max(1, min(100, rounds // 6))
    normal = SimulatedLearnerConfig()
    slow = SimulatedLearnerConfig(lr=normal.lr / 200)
    names = [f"node_{i}" for i in range(8)]
    config = {a: (slow if i >= 8 - stubborn else normal) for i, a in enumerate(names)}
    learners = [a for a in names if config[a] is normal]
    columns = [names.index(a) for a in learners]
    settings = (("4/4", 4), ("2/6", 6))

    result = Comparison({label: [] for label, _ in settings}, {label: [] for label, _ in settings},
                        learners, names, window, seed, stubborn)
    for k in range(seed, seed + seeds):
        cells = []
        for label, num_external in settings:
            env = sapo_env.parallel_env(n=8, max_rounds=rounds, num_external=num_external)
            nodes = simulated_swarm(names, seed=k, config=config, num_external=num_external)
            history = sapo_env.runtime.run(env, nodes, seed=k, progress=False)
            curves = metrics.moving_average(history.rewards, window)
            result.curves[label].append(np.nanmean(curves[:, columns], axis=1))
            earned = float(np.nanmean(history.rewards[:, columns], axis=1).sum())
            result.earned[label].append(earned)
            cells.append(f"{label} {earned:6.1f} (swing {swing(curves[:, columns]):.3f})")
        print(f"seed {k}: cumulative reward of the learning nodes: " + "   ".join(cells))
    print(verdict(result.earned))
    return result


def verdict(earned: dict[str, list[float]]) -> str:
    """One line: 2/6 minus 4/4 under each seed, and whether the seeds agree on its sign."""
    differences = np.subtract(earned["2/6"], earned["4/4"])
    line = "Verdict: 2/6 minus 4/4, per seed: " + ", ".join(f"{d:+.1f}" for d in differences)
    if len(differences) == 1:
        return line + "; one seed: run --seeds 3 or more before believing either order."
    if np.all(differences < 0):
        return line + f"; 2/6 earned less than 4/4 under every one of {len(differences)} seeds."
    if np.all(differences > 0):
        return line + f"; 2/6 earned more than 4/4 under every one of {len(differences)} seeds."
    return (line + f"; the order changes from seed to seed: these {len(differences)} seeds do "
            "not decide which setting earns more.")


def figure(result: Comparison):
    """Both settings under every seed (a matplotlib ``Figure``): left, the learning nodes' mean
    moving reward, a thin line per seed and a band from the seeds' lowest to their highest;
    right, each seed's cumulative reward in both settings, joined by a line per seed, so a
    change of order between seeds shows as lines that cross."""
    fig = require("matplotlib.figure", "the classroom figures").Figure(figsize=(11, 4))
    curves_ax, seeds_ax = fig.subplots(1, 2, width_ratios=(2, 1))
    seeds = range(result.first_seed, result.first_seed + len(result.earned["4/4"]))
    for colour, (label, curves) in zip(("C0", "C3"), result.curves.items()):
        stacked = np.array(curves)
        curves_ax.fill_between(np.arange(stacked.shape[1]), stacked.min(axis=0),
                               stacked.max(axis=0), color=colour, alpha=0.2)
        for k, curve in zip(seeds, stacked):
            curves_ax.plot(curve, lw=1.0, color=colour, label=label if k == seeds[0] else None)
    curves_ax.set_xlabel("round")
    curves_ax.set_ylabel(f"reward, mean over learning nodes\n(moving average, {result.window} "
                         "rounds)")
    curves_ax.set_title(f"a line per seed, band: lowest to highest of {len(seeds)} seeds"
                        + (f" ({result.stubborn} stubborn nodes left out)" if result.stubborn
                           else ""), fontsize=9)
    curves_ax.legend(fontsize=8)
    curves_ax.grid(alpha=0.3)
    labels = list(result.earned)
    for k, earned in zip(seeds, zip(*result.earned.values())):
        seeds_ax.plot(labels, earned, marker="o", lw=1.0, color="grey")
        seeds_ax.annotate(f"seed {k}: {earned[1] - earned[0]:+.1f}", (1, earned[1]),
                          xytext=(6, 0), textcoords="offset points", va="center", fontsize=8)
    seeds_ax.set_xlim(-0.3, 1.8)
    seeds_ax.set_ylabel("cumulative reward of the learning nodes")
    seeds_ax.set_title("each seed: 4/4, then 2/6 (2/6 minus 4/4)", fontsize=9)
    seeds_ax.grid(alpha=0.3)
    fig.suptitle("4 or 6 external groups out of 8, under every seed: do the seeds agree?")
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=600, help="rounds per run (default 600)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds, each running both "
                        "settings (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--stubborn", type=int, default=0,
                        help="how many of the 8 nodes cannot learn (default 0)")
    parser.add_argument("--out", default="out/classroom/too_much_external.png",
                        help="where to save the plot")
    args = parser.parse_args(argv)
    if not 0 <= args.stubborn < 8:
        parser.error(f"--stubborn must be in 0..7, got {args.stubborn}")
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    result = compare(args.rounds, args.seeds, args.seed, args.stubborn)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    figure(result).savefig(args.out, dpi=110)
    print(f"Saved {args.out}")


if __name__ == "__main__":
    main()
