"""An "Aha" spreading through a swarm: one node starts with a skill the others lack.

Simulated nodes solve questions with named strategies; "verify" (solve, then check) is right
90% of the time, the others at most 40%. Only node_0 knows "verify" at the start, and nobody
can invent it (exploration is off). The other nodes can learn it only by reading node_0's
shared completions in their training batches. With J=0 (no sharing) they never do; with J=4
the skill spreads. Watch node_0 too: with the calibrated simulator a strategy read in another
node's text enters the policy above the reader's favourite, while node_0's own "verify" only
grows at the small learning rate, so the readers adopt it faster than the pioneer uses it.

Prints, per node, the round when its probability of using "verify" first passed one half, and
saves ``aha_spreads.png``: each node's probability of using "verify", without and with sharing.

Run:  python examples/classroom/03_aha_spreads.py [--rounds 300] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import sapo_env
import sapo_env.runtime
from agents.simulated import STRATEGIES, SimulatedLearnerConfig, simulated_swarm
from sapo_env.runtime import metrics


def run(num_external: int, rounds: int, seed: int) -> sapo_env.runtime.History:
    env = sapo_env.parallel_env(n=8, max_rounds=rounds, num_external=num_external)
    others = SimulatedLearnerConfig(explore=0.0, num_external=num_external)
    pioneer = SimulatedLearnerConfig(explore=0.0, num_external=num_external,
                                     known_strategies=STRATEGIES)
    config = {a: (pioneer if a == "node_0" else others) for a in env.possible_agents}
    nodes = simulated_swarm(env.possible_agents, seed=seed, config=config)
    return sapo_env.runtime.run(env, nodes, seed=seed, progress=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="rounds per run (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the env and the nodes")
    parser.add_argument("--out", default="out/classroom/aha_spreads.png",
                        help="where to save the plot")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, num_external in zip(axes, (0, 4)):
        history = run(num_external, args.rounds, args.seed)
        verify = metrics.learn_metric(history, "strategy_verify")
        spread = metrics.propagation_of(verify, history.agents, threshold=0.5)
        print(f"\nJ={num_external}: cumulative reward {history.cumulative_reward:.1f}; round "
              "at which each node used 'verify' more than half the time:")
        print("   " + "  ".join(f"{a}: {'never' if r is None else r}"
                                for a, r in spread.node_rounds.items()))
        if spread.rounds_to_all is not None:
            print(f"   every node got there {spread.rounds_to_all} rounds after "
                  f"{spread.first_node}")
        for k, curve in enumerate(verify.T):
            ax.plot(curve, lw=2.2 if k == 0 else 1.0, label="node_0 (pioneer)" if k == 0 else None)
        ax.set_title(f"J={num_external}: {'sharing' if num_external else 'no sharing'}")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("probability of using 'verify' (mean over tasks)")
    axes[0].legend()
    fig.suptitle("One node knows a better strategy: does it spread?")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"\nSaved {args.out}")


if __name__ == "__main__":
    main()
