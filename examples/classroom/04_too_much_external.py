"""Too much external data? 2/6 next to 4/4, node by node.

In the paper, nodes that trained on 2 of their own groups and 6 from the swarm (2/6) reached
the same peaks as 4/4 but oscillated: they learned, forgot and learned again, and ended with a
lower cumulative reward. The paper's explanations: strong nodes are dragged down by the
answers of weaker ones, and the pool's quality falls when nodes take more than they add.

This script runs both settings with the same simulated nodes and prints, per setting, the
cumulative reward and a swing measure: the standard deviation, over the second half of the run,
of each node's moving reward, averaged over nodes (learning that settles gives a small swing;
learning and forgetting a large one). It saves
``too_much_external.png``: every node's moving reward, one panel per setting.

``--stubborn K`` makes K nodes unable to learn (a learning rate 200 times smaller): weaker
nodes whose answers the others keep reading, the first of the paper's explanations.

Run:  python examples/classroom/04_too_much_external.py [--rounds 600] [--stubborn 0]
"""

from __future__ import annotations

import argparse

import numpy as np

import sapo_env
from agents.simulated import SimulatedLearnerConfig, simulated_swarm
from sapo_env import metrics


def swing(curves: np.ndarray) -> float:
    """Mean over nodes of the standard deviation of their moving reward in the second half."""
    return float(np.nanstd(curves[len(curves) // 2:], axis=0).mean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=600, help="rounds per run (default 600)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the env and the nodes")
    parser.add_argument("--stubborn", type=int, default=0,
                        help="how many of the 8 nodes cannot learn (default 0)")
    parser.add_argument("--out", default="too_much_external.png", help="where to save the plot")
    args = parser.parse_args(argv)
    if not 0 <= args.stubborn < 8:
        parser.error(f"--stubborn must be in 0..7, got {args.stubborn}")

    window = max(1, min(100, args.rounds // 6))
    normal = SimulatedLearnerConfig()
    stubborn = SimulatedLearnerConfig(lr=normal.lr / 200)
    names = [f"node_{i}" for i in range(8)]
    config = {a: (stubborn if i >= 8 - args.stubborn else normal) for i, a in enumerate(names)}
    learners = [a for a in names if config[a] is normal]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (label, num_external) in zip(axes, (("4/4", 4), ("2/6", 6))):
        env = sapo_env.parallel_env(n=8, max_rounds=args.rounds, num_external=num_external)
        nodes = simulated_swarm(names, seed=args.seed, config=config, num_external=num_external)
        history = sapo_env.run(env, nodes, seed=args.seed, progress=False)
        curves = metrics.moving_average(history.rewards, window)
        columns = [names.index(a) for a in learners]
        print(f"{label}: cumulative reward {history.cumulative_reward:7.1f}   "
              f"(learning nodes only: "
              f"{np.nanmean(history.rewards[:, columns], axis=1).sum():7.1f})   "
              f"swing {swing(curves[:, columns]):.3f}")
        for k, a in enumerate(names):
            ax.plot(curves[:, k], lw=1.0, ls="-" if a in learners else ":")
        ax.set_title(f"{label}" + (f" ({args.stubborn} stubborn nodes, dotted)"
                                   if args.stubborn else ""))
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"reward (moving average, {window} rounds)")
    fig.suptitle("Each node's reward with 4 or 6 external groups out of 8")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"Saved {args.out}")


if __name__ == "__main__":
    main()
