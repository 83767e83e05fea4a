"""An "Aha" spreading through a swarm: one node starts with a skill the others lack.

Simulated nodes solve questions with named strategies; "verify" (solve, then check) is right
90% of the time, the others at most 40%. Only node_0 knows "verify" at the start, and nobody
can invent it (exploration is off). The other nodes can learn it only by reading node_0's
shared completions in their training batches. With J=0 (no sharing) they never do; with J=4
the skill spreads.

Watch node_0 too: its readers end up using "verify" about three times as often as it does.
That is an artefact of the simulator, not a finding: a strategy a node reads in another's text
enters its policy at ``discovery_logit`` above its current favourite (4.3 times the favourite's
weight, the calibrated default), so each reader adopts "verify" in one jump per task, while
node_0 knew it from the start as one strategy among four and gets no jump: its "verify" grows
only through the gradient, at the small learning rate.

Prints, per node, the round when its probability of using "verify" first passed one half, then
a verdict computed from those rounds, and saves ``aha_spreads.png``: each node's probability of
using "verify", without and with sharing. At the defaults (300 rounds, seed 0) it prints:

Verdict: in 300 rounds, used 'verify' more than half the time: with J=0, 0 of the 7 other
nodes, node_0 never; with J=4, 7 of the 7 other nodes (rounds 28-37), node_0 never.

Measured times at the defaults: examples/classroom/README.md, "Measured at the defaults".

Run:  python examples/classroom/03_aha_spreads.py [--rounds 300] [--seed 0]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import STRATEGIES, SimulatedLearnerConfig, simulated_swarm
from sapo_env.extras import require
from sapo_env.runtime import metrics


def run(num_external: int, rounds: int, seed: int) -> sapo_env.runtime.History:
    env = sapo_env.parallel_env(n=8, max_rounds=rounds, num_external=num_external)
    others = SimulatedLearnerConfig(explore=0.0, num_external=num_external)
    pioneer = SimulatedLearnerConfig(explore=0.0, num_external=num_external,
                                     known_strategies=STRATEGIES)
    config = {a: (pioneer if a == "node_0" else others) for a in env.possible_agents}
    nodes = simulated_swarm(env.possible_agents, seed=seed, config=config)
    return sapo_env.runtime.run(env, nodes, seed=seed, progress=False)


@dataclass
class Spread:
    """Each node's probability of using "verify", round by round, without and with sharing."""

    verify: dict[int, np.ndarray]  # J -> (rounds, n)
    agents: list[str]


def spreads(rounds: int = 300, seed: int = 0) -> Spread:
    """Run J=0 and J=4, printing when each node came to use "verify" more than half the time,
    and end with a verdict line computed from those rounds."""
    verify, reached = {}, {}
    for num_external in (0, 4):
        history = run(num_external, rounds, seed)
        verify[num_external] = metrics.learn_metric(history, "strategy_verify")
        spread = metrics.propagation_of(verify[num_external], history.agents, threshold=0.5)
        reached[num_external] = spread.node_rounds
        print(f"\nJ={num_external}: cumulative reward {history.cumulative_reward:.1f}; round "
              "at which each node used 'verify' more than half the time:")
        print("   " + "  ".join(f"{a}: {'never' if r is None else r}"
                                for a, r in spread.node_rounds.items()))
        if spread.rounds_to_all is not None:
            print(f"   every node got there {spread.rounds_to_all} rounds after "
                  f"{spread.first_node}")
    print("\n" + verdict(reached, rounds))
    return Spread(verify, list(history.agents))


def verdict(reached: dict[int, dict[str, int | None]], rounds: int) -> str:
    """One line: how many of the other nodes took up "verify" without and with sharing, and
    whether they did before the pioneer itself used it more than half the time."""
    parts = []
    for num_external, node_rounds in reached.items():
        others = [r for a, r in node_rounds.items() if a != "node_0"]
        took = sorted(r for r in others if r is not None)
        part = f"with J={num_external}, {len(took)} of the {len(others)} other nodes"
        if took:
            part += f" (rounds {took[0]}-{took[-1]})"
        pioneer = node_rounds.get("node_0")
        part += ", node_0 " + ("never" if pioneer is None else f"at round {pioneer}")
        parts.append(part)
    return (f"Verdict: in {rounds} rounds, used 'verify' more than half the time: "
            + "; ".join(parts) + ".")


def identical(curves: np.ndarray) -> list[list[int]]:
    """The columns of ``curves`` (rounds, nodes) grouped by equal content, each group in
    column order, the groups in the order of their first column."""
    groups: list[list[int]] = []
    for k in range(curves.shape[1]):
        same = next((g for g in groups if np.array_equal(curves[:, g[0]], curves[:, k])), None)
        if same is None:
            groups.append([k])
        else:
            same.append(k)
    return groups


def figure(spread: Spread):
    """Each node's probability of using "verify", one panel per J (a matplotlib ``Figure``).
    Curves that are exactly equal are drawn once, with markers, and the legend says how many
    nodes' lines lie on it (without sharing the other nodes never know "verify")."""
    fig = require("matplotlib.figure", "the classroom figures").Figure(figsize=(11, 4))
    axes = fig.subplots(1, len(spread.verify), sharey=True)
    for ax, (num_external, verify) in zip(axes, spread.verify.items()):
        groups = identical(verify)
        others = sum(1 for g in groups if g[0] != 0 and len(g) == 1)
        labelled = False
        for group in groups:
            curve, first = verify[:, group[0]], group[0]
            if first == 0:
                ax.plot(curve, lw=2.2, color="C0", label="node_0 (pioneer)")
            elif len(group) > 1:
                nodes = ", ".join(spread.agents[k].removeprefix("node_") for k in group)
                ax.plot(curve, lw=1.0, color=f"C{first % 10}", marker="o",
                        markevery=max(1, len(curve) // 12),
                        label=f"{len(group)} identical lines (nodes {nodes})")
            else:
                ax.plot(curve, lw=1.0, color=f"C{first % 10}",
                        label=None if labelled else f"{others} other nodes, a line each")
                labelled = True
        ax.set_title(f"J={num_external}: {'sharing' if num_external else 'no sharing'}")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center right")
    axes[0].set_ylabel("probability of using 'verify' (mean over tasks)")
    fig.suptitle("One node knows a better strategy: does it spread?")
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="rounds per run (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the env and the nodes")
    parser.add_argument("--out", default="out/classroom/aha_spreads.png",
                        help="where to save the plot")
    args = parser.parse_args(argv)
    spread = spreads(args.rounds, args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    figure(spread).savefig(args.out, dpi=110)
    print(f"\nSaved {args.out}")


if __name__ == "__main__":
    main()
