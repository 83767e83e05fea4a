"""Isolation vs sharing: eight simulated nodes trained alone (8/0) or sharing (4/4).

Every node trains on 8 groups a round. In 8/0 it answers 8 questions and trains on all 8 of
its groups; in 4/4 it answers 4 and takes 4 groups from what the other nodes shared, after
discarding groups with zero advantage (as in the paper, sharing halves what a node generates).
The third curve is the reviewers' control: an isolated node that answers 16 questions,
discards its own zero-advantage groups and trains on up to 8 informative ones, so that
filtering alone cannot pass for the benefit of sharing.

Prints the cumulative reward of each setting (the paper's measure: the sum over rounds of the
swarm's mean reward) and saves ``isolation_vs_sharing.png``: the swarm reward, moving average,
with the min/max band over nodes (the paper's Figure 2).

Run:  python examples/classroom/02_isolation_vs_sharing.py [--rounds 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import sapo_env
from agents.simulated import simulated_swarm
from sapo_env import metrics

SETTINGS = {  # label: (J, SwarmConfig overrides)
    "8/0 (isolated)": (0, {}),
    "8/0 oversampled + filtered (control)": (0, {"questions_per_round": 16,
                                                  "filter_local": True}),
    "4/4 (sharing)": (4, {}),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=500, help="rounds per run (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the env and the nodes")
    parser.add_argument("--out", default="isolation_vs_sharing.png", help="where to save the plot")
    args = parser.parse_args(argv)

    window = max(1, min(100, args.rounds // 5))
    curves = {}
    for label, (num_external, overrides) in SETTINGS.items():
        started = time.perf_counter()
        env = sapo_env.parallel_env(n=8, max_rounds=args.rounds, num_external=num_external,
                                    **overrides)
        # the same seed in every setting: the same nodes, the same questions
        nodes = simulated_swarm(env.possible_agents, seed=args.seed, num_external=num_external)
        history = sapo_env.run(env, nodes, seed=args.seed, progress=False)
        curves[label] = metrics.smoothed_reward(history, window)
        print(f"{label:37s} cumulative reward {history.cumulative_reward:7.1f}   "
              f"final reward {curves[label].mean[-1]:.3f}   "
              f"({time.perf_counter() - started:.0f} s)")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label, s in curves.items():
        (line,) = ax.plot(s.mean, label=label, lw=1.6)
        ax.fill_between(range(len(s.mean)), s.low, s.high, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(f"swarm reward (moving average, {window} rounds)")
    ax.set_title("8 simulated nodes: alone or sharing (band: min/max over nodes)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"Saved {args.out}")


if __name__ == "__main__":
    main()
