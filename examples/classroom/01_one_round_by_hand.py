"""One SAPO round by hand: questions, completions, scores, advantages, the filter, the batch.

Three simulated nodes answer their questions; the env scores every completion with
reasoning-gym's verifier, turns the scores of each group (one question, L completions) into
GRPO advantages, drops from the shared pool the groups whose completions all scored the same
(no learning signal), and assembles node_0's training set from its I own groups (the paper does
not filter those) and J groups other nodes shared. As in the paper, a node that takes J
external groups answers only I = budget - J questions itself.
Everything is printed as it happens; ``one_round.png`` shows every score of the round. The
last line is a verdict computed from the round; at the defaults (seed 0) it reads:

Verdict: 4 of the round's 6 groups had zero advantage (3 of them others', filtered from
node_0's pool); node_0 trains on 2 own and 1 external groups, and its probability of writing
answer tags went 0.285 -> 0.287.

Measured times at the defaults: examples/classroom/README.md, "Measured at the defaults".

Run:  python examples/classroom/01_one_round_by_hand.py [--seed 0]
      [--out out/classroom/one_round.png]
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import sapo_env
from agents.sim.simulated import simulated_swarm
from sapo_env.extras import require
from sapo_env.rollouts import has_zero_advantage


def shorten(text: str, width: int = 90) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...")


@dataclass
class Round:
    """One round, as the figure needs it: every published group and each node's reward."""

    groups: dict[str, dict]
    rewards: dict[str, float]
    agents: list[str]


def one_round(seed: int = 0) -> Round:
    """Play one round of three simulated nodes, printing each step and ending with a verdict
    line computed from what happened."""
    # Small numbers so that everything fits on a screen: 3 nodes, a training budget of 4
    # groups, I=2 own + J=2 external, so each node answers 2 questions with 4 completions.
    env = sapo_env.parallel_env(n=3, completions_per_question=4, train_budget=4, num_external=2)
    # start_tag_prob=0.5: half the answers are in <answer> tags, so some groups are mixed
    nodes = simulated_swarm(env.possible_agents, seed=seed, num_external=2,
                            start_tag_prob=0.5)
    observations, _ = env.reset(seed=seed)

    print("1. QUESTIONS: each node answers I = 4 - J = 2 questions of its own, one reasoning-gym")
    print("   task each (with J=2 it takes 2 more groups from the others).")
    for q in observations["node_0"]["questions"]:
        print(f"   node_0  [{q['task']}] {shorten(q['prompt'])}")

    actions = {a: nodes[a].act(observations[a]) for a in env.agents}
    print("\n2. COMPLETIONS: L=4 answers per question. node_0's answers to its first question:")
    for text in actions["node_0"]["completions"][0]:
        print(f"   {shorten(text, 110)!r}")

    observations, rewards, _, _, infos = env.step(actions)
    pool = observations["node_1"]["pool"] + tuple(
        g for g in observations["node_0"]["pool"] if g["source"] == "node_1")
    groups = {g["id"]: g for g in pool}  # every published group (all are shared by default)

    print("\n3. SCORES AND ADVANTAGES: the verifier scores each answer (1 = right and readable);")
    print("   advantage = (score - group mean) / group std. Equal scores give all-zero")
    print("   advantages: the group teaches nothing. Other nodes' such groups are filtered out")
    print("   of node_0's pool; its own are not filtered (the paper filters external groups only).")
    for g in sorted(groups.values(), key=lambda g: g["id"]):
        if not has_zero_advantage(g["rewards"]):
            kept = "kept"
        elif g["source"] == "node_0":
            kept = "zero advantage: own group, not filtered"
        else:
            kept = "FILTERED from the pool (zero advantage)"
        print(f"   {g['id']:14s} {g['task']:24s} scores {np.round(g['rewards'], 2)} "
              f"advantages {np.round(g['advantages'], 2)}  {kept}")

    print("\n4. REWARD of a node = mean score of its own completions this round:")
    for a in env.possible_agents:
        print(f"   {a}: {rewards[a]:.3f}   (shared {infos[a]['shared_groups']} groups; "
              f"{infos[a]['pool_size_filtered']} of the {infos[a]['pool_size']} groups others "
              "shared survive the filter)")

    print("\n5. THE BATCH node_0 trains on: its I=2 own groups + J=2 from the filtered pool")
    for g in observations["node_0"]["batch"]:
        where = "local   " if g["local"] else f"external (from {g['source']})"
        print(f"   {g['id']:14s} {where:26s} advantages {np.round(g['advantages'], 2)}")
    short = infos["node_0"]["external_shortfall"]
    if short:
        print(f"   ({short} external group(s) short: the filtered pool had too few; a batch is "
              "never padded)")
    before = nodes["node_0"].metrics()["tag_prob"]
    after = nodes["node_0"].learn(observations["node_0"]["batch"])["tag_prob"]
    print("\n6. LEARNING: node_0 re-reads the batch's text and takes one policy-gradient step:")
    print(f"   its probability of writing <answer> tags went {before:.3f} -> {after:.3f}")

    batch = observations["node_0"]["batch"]
    zero = [g for g in groups.values() if has_zero_advantage(g["rewards"])]
    print(f"\nVerdict: {len(zero)} of the round's {len(groups)} groups had zero advantage "
          f"({sum(g['source'] != 'node_0' for g in zero)} of them others', filtered from "
          f"node_0's pool); node_0 trains on {sum(g['local'] for g in batch)} own and "
          f"{sum(not g['local'] for g in batch)} external groups, and its probability of "
          f"writing answer tags went {before:.3f} -> {after:.3f}.")
    return Round(groups, {a: float(rewards[a]) for a in env.possible_agents},
                 list(env.possible_agents))


SCORE_TICKS = (0, 0.01, 0.05, 0.2, 0.5, 1)  # the colour bar's, partial credit among them


def figure(played: Round):
    """Every verifier score of the round, one panel a node, each cell labelled with its score
    (a matplotlib ``Figure``). The colour scale is a power law, so that the partial credit
    some scorers give shows as a light green, apart from 0 (white)."""
    matplotlib = require("matplotlib", "the classroom figures")
    fig = matplotlib.figure.Figure(figsize=(12, 3.6), layout="constrained")
    norm = matplotlib.colors.PowerNorm(gamma=0.3, vmin=0, vmax=1)
    axes = fig.subplots(1, len(played.agents))
    for ax, a in zip(axes, played.agents):
        mine = sorted((g for g in played.groups.values() if g["source"] == a),
                      key=lambda g: g["id"])
        scores = np.array([g["rewards"] for g in mine])
        image = ax.imshow(scores, norm=norm, cmap="Greens")
        for (k, i), score in np.ndenumerate(scores):
            ax.text(i, k, f"{score:.2g}", ha="center", va="center", fontsize=8,
                    color="white" if score > 0.5 else "black")
        for k, g in enumerate(mine):
            if has_zero_advantage(g["rewards"]):
                ax.text(-0.45, k - 0.3, "zero adv.", va="center", fontsize=8, color="crimson")
        ax.set_title(f"{a}: reward {played.rewards[a]:.2f}")
        ax.set_xlabel("completion")
        ax.set_yticks(range(len(mine)), [g["task"] for g in mine], fontsize=7)
    bar = fig.colorbar(image, ax=axes, ticks=SCORE_TICKS, shrink=0.9)
    bar.set_label("verifier score (0 wrong, 1 right; between: partial credit)", fontsize=8)
    fig.suptitle("Verifier scores of one round; all-equal rows carry no signal: "
                 "filtered from the pool, kept in their own node's batch")
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the env and the nodes")
    parser.add_argument("--out", default="out/classroom/one_round.png",
                        help="where to save the plot")
    args = parser.parse_args(argv)
    played = one_round(args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    figure(played).savefig(args.out, dpi=110)
    print(f"\nSaved {args.out}")


if __name__ == "__main__":
    main()
