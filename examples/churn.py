"""A swarm with churn: nodes that drop out for a round, leave, and join late (simulated learners).

Eight simulated learners at 4 local / 4 external (the paper's best ratio, its protocol and
defaults) under three conditions:

- ``stable``: the same 8 nodes every round;
- ``offline 25%``: each node sits each round out with probability 0.25 (it answers nothing,
  shares nothing and does not train that round);
- ``turnover``: at half time 4 of the 8 founders leave for good and 4 new nodes join
  (PettingZoo forbids revival: a newcomer is a new node, ``node_8`` ... ``node_11``).

What it measures: the swarm's cumulative reward (sum over rounds of the mean reward of the nodes
that played), the founders' mean reward over the last quarter, and for the turnover, how fast
newcomers learn in a swarm that has already learned: their mean reward over their first
``--window`` rounds against the founders' over their own first ``--window`` rounds (when the
swarm started from scratch). Mean and 95% CI over seeds.

    python examples/churn.py                         # 3 seeds x 2000 rounds
    python examples/churn.py --rounds 200 --seeds 1  # a short run
    python examples/churn.py --write records/churn   # the table, figure and numbers

Measured times: docs/environment.md, "Churn: nodes that drop out, leave and join" (the full run)
and BENCHMARKS.md, "Commands as a user runs them" (the short one).

The env's churn semantics: ``sapo_env.churn``; the node that comes and goes:
``agents.wrappers.churning.ChurningAgent``; late joiners: ``SwarmConfig.join_rounds``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import simulated_swarm
from agents.wrappers.churning import ChurningAgent
from sapo_env.extras import require
from sapo_experiments.reproduce.report import mean_ci

FOUNDERS = [f"node_{i}" for i in range(8)]
LEAVERS = FOUNDERS[4:]  # the founders that leave at half time in "turnover"
NEWCOMERS = [f"node_{i}" for i in range(8, 12)]
CONDITIONS = ("stable", "offline 25%", "turnover")


def play(condition: str, rounds: int, seed: int) -> np.ndarray:
    """One run; its (rounds, nodes) rewards, NaN where a node did not play."""
    half = rounds // 2
    turnover = condition == "turnover"
    env = sapo_env.parallel_env(n=12 if turnover else 8, max_rounds=rounds, num_external=4,
                                join_rounds=dict.fromkeys(NEWCOMERS, half) if turnover else None)
    nodes = simulated_swarm(env.possible_agents, seed=seed, num_external=4)
    streams = np.random.SeedSequence(seed).spawn(len(nodes) + 1)[1:]  # churn's own streams
    for (a, node), stream in zip(list(nodes.items()), streams):
        if condition == "offline 25%":
            nodes[a] = ChurningAgent(node, offline_probability=0.25, seed=stream)
        elif turnover and a in LEAVERS:
            nodes[a] = ChurningAgent(node, leave_round=half, seed=stream)
    return sapo_env.runtime.run(env, nodes, seed=seed, progress=False).rewards


def summarise(runs: dict[str, list[np.ndarray]], rounds: int, window: int) -> dict:
    """Per condition, mean and 95% CI over seeds of each measure."""
    last = slice(rounds - rounds // 4, rounds)
    out = {}
    for condition, seeds in runs.items():
        founders = [r[:, :8] for r in seeds]
        measures = {
            "cumulative reward": [float(np.nansum(np.nanmean(r, axis=1))) for r in seeds],
            "founders, last quarter": [float(np.nanmean(f[last])) for f in founders],
            "founders, first rounds": [float(np.nanmean(f[:window])) for f in founders],
            "node-rounds played (%)": [100 * float(np.mean(~np.isnan(r))) for r in founders],
        }
        if condition == "turnover":
            half = rounds // 2
            measures["newcomers, first rounds"] = [
                float(np.nanmean(r[half:half + window, 8:])) for r in seeds]
            measures["stayers, same rounds"] = [
                float(np.nanmean(r[half:half + window, :4])) for r in seeds]
        out[condition] = {k: mean_ci(v) for k, v in measures.items()}
    return out


def markdown(summary: dict, rounds: int, seeds: int, window: int, seconds: float) -> str:
    keys = list(summary["turnover"])
    lines = [
        f"8 simulated learners, 4/4, paper defaults, {rounds} rounds, mean ± 95% CI over "
        f"{seeds} seeds ({seconds / 60:.0f} min here). Rewards are per node-round played; "
        f"'first rounds' is each group's first {window} rounds in the swarm (the founders' from "
        "round 0, the newcomers' from the turnover at half time, the stayers' over the same "
        "rounds as the newcomers').", "",
        "| condition | " + " | ".join(keys) + " |",
        "| --- | " + " | ".join("---:" for _ in keys) + " |",
    ]
    for condition, measures in summary.items():
        cells = [f"{measures[k][0]:.3f} ± {measures[k][1]:.3f}" if k in measures else "–"
                 for k in keys]
        lines.append(f"| {condition} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(runs: dict[str, list[np.ndarray]], path: Path) -> None:
    require("matplotlib", "examples/churn.py --write (its figure)").use("Agg")
    import matplotlib.pyplot as plt

    half = len(runs["turnover"][0]) // 2
    smooth = min(50, max(half // 10, 1))  # rounds of the moving average

    def moving(x: np.ndarray) -> np.ndarray:
        return np.convolve(x, np.ones(smooth) / smooth, mode="valid")

    fig, ax = plt.subplots(figsize=(8, 4))
    for condition, seeds in runs.items():
        mean = np.nanmean([np.nanmean(r[:, :8], axis=1) for r in seeds], axis=0)
        ax.plot(moving(mean), label=f"{condition}: founders")
    newcomers = np.nanmean([np.nanmean(r[half:, 8:], axis=1) for r in runs["turnover"]], axis=0)
    ax.plot(np.arange(half, half + len(newcomers) - smooth + 1), moving(newcomers),
            label="turnover: newcomers", ls="--")
    ax.axvline(half, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("round")
    ax.set_ylabel(f"mean reward ({smooth}-round moving average)")
    ax.set_title("A SAPO swarm with churn (8 simulated learners, 4/4)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--window", type=int, default=None,
                        help="rounds of the 'first rounds' measures (default: rounds // 10)")
    parser.add_argument("--write", type=Path, default=None, metavar="FOLDER",
                        help="write results.md, summary.json and churn.png there")
    args = parser.parse_args(argv)
    window = args.window or max(args.rounds // 10, 1)
    start = time.perf_counter()
    runs = {c: [play(c, args.rounds, seed) for seed in range(args.seeds)] for c in CONDITIONS}
    seconds = time.perf_counter() - start
    summary = summarise(runs, args.rounds, window)
    table = markdown(summary, args.rounds, args.seeds, window, seconds)
    print(table)
    if args.write is not None:
        args.write.mkdir(parents=True, exist_ok=True)
        (args.write / "results.md").write_text(table)
        (args.write / "summary.json").write_text(json.dumps(
            {"rounds": args.rounds, "seeds": args.seeds, "window": window,
             "seconds": round(seconds, 1), "summary": summary}, indent=2) + "\n")
        plot(runs, args.write / "churn.png")
        print(f"wrote {args.write}/results.md, summary.json, churn.png")
    return summary


if __name__ == "__main__":
    main()
