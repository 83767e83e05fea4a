"""Benchmark: a round of 8 tiny GRPO nodes, batched (one call) against node by node (not a test).

Run by hand:  python benchmarks/tiny_swarm.py [--nodes 8] [--rounds 5] [--threads 1,2] [--write]

Each node is an ``agents.GRPOAgent`` on the default tiny model (``agents.tiny``, untrained
weights: speed does not depend on them), in the paper's round: J = 4, so 4 questions a node,
8 completions each, 12 new tokens, empty system prompt. A round is timed in three parts:

- act: every node's completions (``BatchedSwarm.act_jointly`` against each agent's ``act``);
  rows are sampled to EOS or 12 tokens, as in a run;
- learn: every node's GRPO step on its training set of 8 groups (4 own, 4 from the pool), with
  advantages replaced by a fixed +-1 pattern so that every group trains (an untrained model
  scores 0 and would train on nothing): the most a round can cost;
- step: ``env.step`` (scoring, pool, batches), the same in both.

Both paths run the same rounds on the same weights (they are equal, tested in
tests/test_batched_swarm.py); each figure is the median over the rounds after one warm-up
round, wall time and process CPU time. ``--write`` replaces the "## Batched tiny swarm"
section of BENCHMARKS.md, with the machine, date and load average.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from benchmarks_md import machine, write_section  # noqa: E402

import sapo_env  # noqa: E402
from agents.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.tiny import TinyModelConfig, tiny_model, tiny_tokenizer  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402

SECTION = "## Batched tiny swarm"
TASKS = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                    "max_digits": 1}),
         ("spell_backward", 1.0, {"min_word_len": 3, "max_word_len": 5})]


def build(nodes: int, batched: bool) -> list[GRPOAgent]:
    tok = tiny_tokenizer()
    config = GRPOConfig(max_new_tokens=12, learning_rate=3e-4, device="cpu")
    agents = [GRPOAgent(tiny_model(tok, TinyModelConfig(), seed=i), tok, config, seed=i,
                        num_external=4) for i in range(nodes)]
    return batched_swarm(agents) if batched else agents


def informative(batch):
    """The batch with every group's advantages set to +1 / -1 alternately."""
    return [{**g, "advantages": np.resize(np.array([1.0, -1.0], np.float32),
                                          len(g["completions"]))} for g in batch]


def timed(call, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    result = call(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def run(nodes: int, rounds: int, batched: bool) -> dict[str, list[float]]:
    env = sapo_env.parallel_env(n=nodes, tasks=TASKS, system_prompt="", max_rounds=rounds + 1)
    agents = dict(zip(env.possible_agents, build(nodes, batched)))
    joint = agents["node_0"].joint_actor
    observations, _ = env.reset(seed=0)
    times: dict[str, list[float]] = {k: [] for k in ("act", "learn", "step", "act_cpu",
                                                      "learn_cpu", "step_cpu")}
    for _ in range(rounds + 1):
        if batched:
            actions, wall, cpu = timed(joint.act_jointly, observations)
        else:
            actions, wall, cpu = timed(lambda o: {a: agents[a].act(o[a]) for a in o},
                                       observations)
        times["act"].append(wall)
        times["act_cpu"].append(cpu)
        (observations, *_), wall, cpu = timed(env.step, actions)
        times["step"].append(wall)
        times["step_cpu"].append(cpu)
        batches = {a: informative(observations[a]["batch"]) for a in observations}
        if batched:
            _, wall, cpu = timed(joint.learn_jointly, batches)
        else:
            _, wall, cpu = timed(lambda b: {a: agents[a].learn(b[a]) for a in b}, batches)
        times["learn"].append(wall)
        times["learn_cpu"].append(cpu)
    return {k: v[1:] for k, v in times.items()}  # the first round warms up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="1,2", help="torch thread counts to measure")
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    lines = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        result = {}
        for batched in (False, True):
            times = run(args.nodes, args.rounds, batched)
            result[batched] = {k: statistics.median(v) for k, v in times.items()}
        alone, together = result[False], result[True]
        total_alone = alone["act"] + alone["learn"] + alone["step"]
        total_together = together["act"] + together["learn"] + together["step"]
        cpu_alone = alone["act_cpu"] + alone["learn_cpu"] + alone["step_cpu"]
        cpu_together = together["act_cpu"] + together["learn_cpu"] + together["step_cpu"]
        line = (
            f"- {threads} torch thread{'s' if threads > 1 else ''}: a round of {args.nodes} "
            f"nodes takes **{total_together:.2f} s batched against {total_alone:.2f} s node by "
            f"node: {total_alone / total_together:.1f}x** (goal >= 4x; CPU time "
            f"{cpu_together:.2f} s against {cpu_alone:.2f} s). Act {together['act']:.2f} vs "
            f"{alone['act']:.2f} s ({alone['act'] / together['act']:.1f}x), learn "
            f"{together['learn']:.2f} vs {alone['learn']:.2f} s "
            f"({alone['learn'] / together['learn']:.1f}x), env step {together['step']:.3f} s."
        )
        print(line, flush=True)
        lines.append(line)
    load_after = os.getloadavg()[0]
    section = (
        f"{SECTION}\n\n`python benchmarks/tiny_swarm.py --nodes {args.nodes} --rounds "
        f"{args.rounds} --threads {args.threads}` on {datetime.date.today()}, {machine()}, "
        f"torch {torch.__version__}. Load average before / after: {load_before:.1f} / "
        f"{load_after:.1f} (above the core count, other processes shared the CPU).\n\n"
        "The paper's round for every node (J = 4: 4 questions x 8 completions, 12 new tokens, "
        "training on 8 groups whose advantages are all non-zero, the most a round can cost), "
        "on the default tiny model (`agents.tiny.TinyModelConfig`); medians over "
        f"{args.rounds} rounds after a warm-up round.\n\n" + "\n".join(lines) + "\n"
    )
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
