"""Does the <answer> format spread through a swarm? One run, written out to read top to bottom.

SmolLM2-135M-Instruct never writes <answer> tags by itself. Under the strict verifier every one
of its completions scores 0, every group it writes has zero advantage, and GRPO gets no
gradient from its own work: it can only learn the format from someone else's text. Here two
SmolLM2 nodes (LoRA adapters on one shared base) share rollouts with a scripted demonstrator
that answers right and writes the tag half the time. Each round prints, per LM node, its tag
use (share of completions with a well-formed <answer>...</answer>), its strict reward (tag
required) and its lenient accuracy (answer read without the tag: arithmetic, not format).

    python examples/format_propagation.py                  # demonstrator, 30 rounds
    python examples/format_propagation.py --rounds 3       # a short run
    python examples/format_propagation.py --condition isolated
    python examples/format_propagation.py --condition demonstrator-leaves --rounds 40

The full experiment (four conditions, two seeds, a table, a figure, TensorBoard) is
``sapo-env format-propagation``; this script is one of its runs, without the bookkeeping.
Measured time of the short run: BENCHMARKS.md, "Commands as a user runs them".
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent, GRPOConfig
from agents.lm.lora import lora_swarm
from sapo_experiments.format_propagation import (
    EASY_ARITHMETIC,
    SHORT_SYSTEM_PROMPT,
    StopsPublishing,
    informative_groups,
    lenient_accuracy,
    tag_use,
)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--condition", default="demonstrator",
                    choices=["isolated", "sharing", "demonstrator", "demonstrator-leaves"])
parser.add_argument("--rounds", type=int, default=30)
parser.add_argument("--lr", type=float, default=3e-4,
                    help="Adam learning rate of each adapter (1e-4 learned nothing in 18 rounds, "
                         "1e-3 collapsed; see FormatConfig.learning_rate)")
parser.add_argument("--tag-probability", type=float, default=0.5,
                    help="probability that a demonstrator answer is inside <answer> tags")
parser.add_argument("--model", default="smollm2-135m")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
args = parser.parse_args()

# --- the swarm: 2 LM nodes (node_0, node_1), and the demonstrator as node_2 where there is one
LM_NODES, B, L = 2, 4, 4
with_demo = args.condition.startswith("demonstrator")
J = 0 if args.condition == "isolated" else 4  # external groups in each LM node's training set
env = sapo_env.parallel_env(
    n=LM_NODES + with_demo, max_rounds=args.rounds,
    tasks=list(EASY_ARITHMETIC), system_prompt=SHORT_SYSTEM_PROMPT,
    answer_format="tag",                        # the strict verifier: no tag, no reward
    questions_per_round=B, completions_per_question=L,
    train_budget=B + J,                         # its own B groups plus J from the pool
    num_external={f"node_{i}": (J if i < LM_NODES else 0) for i in range(LM_NODES + with_demo)},
)

# --- the nodes: the paper's GRPO (clip 0.2 / 0.28, no KL), one LoRA adapter per node
seeds = np.random.SeedSequence(args.seed).spawn(2)
config = GRPOConfig(max_new_tokens=48, learning_rate=args.lr, gradient_checkpointing=False,
                    torch_threads=args.threads)
agents = lora_swarm(args.model, LM_NODES, config, num_external=J, seed=seeds[0])
if with_demo:
    # Right every time, tagged half the time: within a group the tag is then the only thing
    # that separates reward 1 from reward 0, which is what GRPO's relative advantage can teach.
    demo = DemonstratorAgent(accuracy=1.0, tag_probability=args.tag_probability,
                             num_external=0, seed=int(seeds[1].generate_state(1)[0]))
    # "Leaving": from the middle round on it shares nothing (the env has no churn).
    agents.append(StopsPublishing(demo, args.rounds // 2)
                  if args.condition == "demonstrator-leaves" else demo)
nodes = dict(zip(env.possible_agents, agents))

# --- the loop: act, step, learn (sapo_env.runtime.run does the same; we need each round's
# questions)
observations, _ = env.reset(seed=args.seed)
for t in range(args.rounds):
    start = time.perf_counter()
    questions = {a: observations[a]["questions"] for a in env.agents}
    record = sapo_env.runtime.play_round(env, nodes, observations)
    observations = record.observations
    cells = []
    for a in env.possible_agents[:LM_NODES]:
        completions = record.actions[a]["completions"]
        _, external = informative_groups(observations[a]["batch"])
        cells.append(f"{a} tags {tag_use(completions):.2f} reward {record.rewards[a]:.2f} "
                     f"lenient {lenient_accuracy(questions[a], completions):.2f} "
                     f"ext {external}")
    print(f"round {t:3d} | " + " | ".join(cells) + f" | {time.perf_counter() - start:.1f} s",
          flush=True)

print("\nA completion of node_0 in the last round:")
print(record.actions["node_0"]["completions"][0][0])
