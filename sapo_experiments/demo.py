"""``sapo-env demo``: a small swarm of scripted nodes for a few rounds, with a per-node reward
table (the quickstart; ``examples/quickstart.py`` runs it too).

Three demonstrators (right 90%, 60% and 30% of the time) and one random-text node share their
rollouts for a few rounds on the paper's nine reasoning-gym tasks. Nothing learns here (see
examples/lm_swarm.py for language models); the point is the loop every experiment uses:

    env = sapo_env.parallel_env(n=4)
    history = sapo_env.runtime.run(env, agents)

Run:  sapo-env demo [--rounds 5] [--seed 0] [--render]
"""

from __future__ import annotations

import argparse

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent, RandomAgent


def build_agents(seed: int) -> list:
    return [
        DemonstratorAgent(accuracy=0.9, num_external=4, seed=seed),
        DemonstratorAgent(accuracy=0.6, num_external=4, seed=seed + 1),
        DemonstratorAgent(accuracy=0.3, num_external=4, seed=seed + 2),
        RandomAgent(num_external=4, seed=seed + 3),
    ]


def reward_table(history: sapo_env.runtime.History) -> str:
    header = f"{'round':>5} " + " ".join(f"{a:>8}" for a in history.agents) + f" {'swarm':>7}"
    rows = [header, "-" * len(header)]
    for t in range(history.rounds):
        cells = " ".join(f"{r:8.3f}" for r in history.rewards[t])
        rows.append(f"{t:5d} {cells} {history.swarm_mean[t]:7.3f}")
    rows.append("-" * len(header))
    rows.append(f"cumulative reward (sum of swarm means): {history.cumulative_reward:.3f}; "
                f"over all nodes: {history.cumulative_reward_total:.3f}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sapo-env demo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds to run (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the env and the agents")
    parser.add_argument("--render", action="store_true", help="print the env's round summary")
    args = parser.parse_args(argv)

    env = sapo_env.parallel_env(n=4, max_rounds=args.rounds,
                                render_mode="ansi" if args.render else None)
    agents = build_agents(args.seed)

    class PrintSummary(sapo_env.runtime.Callback):
        def on_round_end(self, record: sapo_env.runtime.RoundRecord) -> None:
            print(env.render(), end="\n\n")

    callbacks = [PrintSummary()] if args.render else []
    history = sapo_env.runtime.run(env, agents, seed=args.seed, callbacks=callbacks, progress=False)
    print("Per-node reward (mean verifier score over the node's own completions of a round)")
    print(reward_table(history))
    used = history.infos[-1]
    print("last round, external groups each node trained on:",
          {a: used[a]["external_groups"] for a in history.agents})


if __name__ == "__main__":
    main()
