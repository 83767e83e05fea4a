"""Benchmark: a round of 8 tiny GRPO nodes, batched (one call) against node by node (not a test).

Run by hand:  python benchmarks/tiny_swarm.py [--nodes 8] [--rounds 5] [--threads 1,2] [--write]
              python benchmarks/tiny_swarm.py --compare prompt-sharing [--rounds 8]
                  [--dtypes float32,bfloat16] [--write]
              python benchmarks/tiny_swarm.py --compare per-node [--sizes 8,32] [--rounds 5]
                  [--threads 1] [--write]

Each node is an ``agents.GRPOAgent`` on the default tiny model (``agents.tiny``, untrained
weights: speed does not depend on them), in the paper's round: J = 4, so 4 questions a node,
8 completions each, 12 new tokens, empty system prompt. A round is timed in three parts:

- act: every node's completions (``BatchedSwarm.act_jointly`` against each agent's ``act``);
  rows are sampled to EOS or 12 tokens, as in a run;
- learn: every node's GRPO step on its training set, with advantages replaced by a fixed +-1
  pattern so that every group trains (an untrained model scores 0 and would train on
  nothing). The env's default filter drops the pool's zero-advantage groups, which are all of
  an untrained swarm's, so this set is the node's 4 own groups (32 rows);
- step: ``env.step`` (scoring, pool, batches), the same in both.

Both paths run the same rounds on the same weights (they are equal, tested in
tests/test_batched_swarm.py); each figure is the median over the rounds after one warm-up
round, wall time and process CPU time. ``--write`` replaces the "## Batched tiny swarm"
section of BENCHMARKS.md (but its ``###`` subsections), with the machine, date and load
average.

``--compare per-node`` times the batched swarm alone at each of ``--sizes`` (cost per node:
flat in the nodes means it scales), once with glibc's allocator at its defaults and once as the
tiny harness sets it (``sapo_experiments.allocator.keep_freed_memory``), each in a process of
its own, with the page faults and system time of a round; ``--write`` replaces the "### Per-node
cost and the allocator" subsection.

``--compare prompt-sharing`` times the batched swarm against itself instead:
``batched_swarm(share_prompts=True)`` (a prompt's completions read its keys and values once)
against ``share_prompts=False`` (each reads its own copy), in the paper's round with the pool
unfiltered, so that every node trains on 8 groups (4 own, 4 received: 8 distinct prompts, 64 rows),
the most a round can cost. The two swarms play round by round in turn (each goes first in turn) on
envs of the same seed, so that a machine shared with other work loads both alike; in bfloat16 a
third swarm, copied prompts in float32 (a round as it ran before prompt sharing), takes its turn
with them, the baseline of prompt sharing's goal of 2x per round. It also counts each round's
matrix-product FLOPs (``torch.utils.flop_counter``: every ``bmm``, generation and the learn step's
forward and backward, as run, padding included) on a few more rounds, and times a 2048 x 2048
matrix product on this CPU as its peak, in float32 and bfloat16; shares of peak are of GFLOP per
CPU second (process CPU time) on both sides. ``--write`` replaces the "### Prompt-prefix sharing"
subsection.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from benchmarks_md import add_write_flag, machine, write_section, write_subsection  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import sapo_env  # noqa: E402
from agents.lm.grpo import GRPOAgent, GRPOConfig  # noqa: E402
from agents.tiny import TinyModelConfig, tiny_model, tiny_tokenizer  # noqa: E402
from agents.tiny.batched import batched_swarm  # noqa: E402
from sapo_experiments.allocator import keep_freed_memory  # noqa: E402

SECTION = "## Batched tiny swarm"
SUBSECTION = "### Prompt-prefix sharing"
TASKS = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                    "max_digits": 1}),
         ("spell_backward", 1.0, {"min_word_len": 3, "max_word_len": 5})]


def build(nodes: int, batched: bool, share_prompts: bool = True,
          dtype: str = "float32") -> list[GRPOAgent]:
    tok = tiny_tokenizer()
    config = GRPOConfig(max_new_tokens=12, learning_rate=3e-4, device="cpu", dtype=dtype)
    agents = [GRPOAgent(tiny_model(tok, TinyModelConfig(), seed=i), tok, config, seed=i,
                        num_external=4) for i in range(nodes)]
    return batched_swarm(agents, share_prompts=share_prompts) if batched else agents


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
                                                      "learn_cpu", "step_cpu", "faults",
                                                      "system")}
    for _ in range(rounds + 1):
        usage = resource.getrusage(resource.RUSAGE_SELF)
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
        after = resource.getrusage(resource.RUSAGE_SELF)  # the allocator's cost: page faults
        times["faults"].append(after.ru_minflt - usage.ru_minflt)
        times["system"].append(after.ru_stime - usage.ru_stime)
    return {k: v[1:] for k, v in times.items()}  # the first round warms up


class SharingSwarm:
    """One batched swarm (prompt sharing on or off) with its own env, played a round at a time."""

    def __init__(self, nodes: int, rounds: int, share_prompts: bool, dtype: str):
        # filter "none": the pool passes the received groups an untrained swarm's scores
        # would filter out, so every node trains on 8 groups as in a run whose pool informs.
        self.env = sapo_env.parallel_env(n=nodes, tasks=TASKS, system_prompt="",
                                         max_rounds=rounds + 1, filter="none")
        self.joint = build(nodes, True, share_prompts, dtype)[0].joint_actor
        self.observations, _ = self.env.reset(seed=0)
        self.times: dict[str, list[float]] = {k: [] for k in ("act", "learn", "act_cpu",
                                                              "learn_cpu")}

    def play(self, count_flops: bool = False) -> dict[str, float]:
        """One round, timed (or, ``count_flops``, its matrix-product FLOPs counted instead)."""
        flops = {}
        counter = FlopCounterMode(display=False) if count_flops else None
        with counter or _nothing():
            actions, wall, cpu = timed(self.joint.act_jointly, self.observations)
        if counter:
            flops["act"] = counter.get_total_flops()
        else:
            self.times["act"].append(wall)
            self.times["act_cpu"].append(cpu)
        self.observations, *_ = self.env.step(actions)
        batches = {a: informative(self.observations[a]["batch"]) for a in self.observations}
        counter = FlopCounterMode(display=False) if count_flops else None
        with counter or _nothing():
            _, wall, cpu = timed(self.joint.learn_jointly, batches)
        if counter:
            flops["learn"] = counter.get_total_flops()
        else:
            self.times["learn"].append(wall)
            self.times["learn_cpu"].append(cpu)
        return flops


class _nothing:  # noqa: N801  (a context manager that does nothing, where no counter runs)
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def matmul_peak(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    """GFLOP per CPU second (process CPU time, all threads) of the fastest of ``repeats``
    ``size``-square matrix products, at the current thread count: what this CPU's BLAS
    reaches on a shape that suits it. CPU time, not wall: on a machine shared with other work
    wall time counts the others' turns too, and would halve a share of peak."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        a @ b
        best = min(best, time.process_time() - start)
    return 2 * size**3 / best / 1e9


def bfloat16_instructions() -> str:
    """The CPU's bfloat16 instruction sets as /proc/cpuinfo names them, or "none"."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    found = [f for f in flags if "bf16" in f]
    return ", ".join(found) if found else "none"


def compare_prompt_sharing(nodes: int, rounds: int, threads: list[int], dtypes: list[str]
                           ) -> str:
    """Rounds with prompt sharing against rounds without, interleaved; the subsection text."""
    load_before = os.getloadavg()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines, peaks = [], []
    for count in threads:
        torch.set_num_threads(count)
        fp32, bf16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
        peaks.append(f"{count} thread{'s' if count > 1 else ''}: {fp32:.0f} GFLOP per CPU "
                     f"second float32, {bf16:.0f} bfloat16")
        for dtype in dtypes:
            line = compare_at(nodes, rounds, count, dtype, fp32 if dtype == "float32" else bf16)
            print(line, flush=True)
            lines.append(line)
    load_after = os.getloadavg()
    return (
        f"{SUBSECTION}\n\n`python benchmarks/tiny_swarm.py --compare prompt-sharing --nodes "
        f"{nodes} --rounds {rounds} --threads {','.join(map(str, threads))} --dtypes "
        f"{','.join(dtypes)}` on "
        f"{datetime.date.today()}, {machine()}, torch {torch.__version__}; bfloat16 "
        f"instructions: {bfloat16_instructions()}. Load average (1, 5, 15 min) before "
        f"{', '.join(f'{x:.1f}' for x in load_before)}, after "
        f"{', '.join(f'{x:.1f}' for x in load_after)} (`{uptime_before}`): other work "
        "may share the CPU: the swarms compared play round by round in turn, so that it loads them "
        "alike.\n\n"
        "`batched_swarm(share_prompts=True)`, where a prompt's completions read its keys and "
        "values once (`grouped_prefix_forward`) and the layers compute with the fast "
        "arithmetic (`agents.tiny.fast_kernels`: norms folded into the next matrix, fused "
        "RMSNorm and SwiGLU gradients, prompt passes on packed real tokens with a lean last "
        "layer), against `share_prompts=False`, where each completion row reads its own copy "
        "of them (`GroupedCache.select_rows`) with the reference arithmetic, which is how the "
        "swarm computed before prompt sharing, bit for bit. Both forward each distinct prompt "
        "once. The "
        "paper's round for every node with the pool unfiltered: 4 questions x 8 completions "
        "of up to 12 tokens, training on 8 groups (64 rows, 8 prompts) with advantages all "
        f"non-zero; medians over {rounds} rounds after a warm-up round, env step not "
        "included. FLOPs: matrix products as run (padding included), counted by "
        "`torch.utils.flop_counter` on 2 more rounds; the backward counts twice the forward. "
        "Shares of peak are in CPU time (process CPU time, all threads) on both sides, so that "
        "other work on the machine does not halve them. Peak: the fastest 2048 x 2048 matrix "
        "product, "
        f"{'; '.join(peaks)}; each line's share of peak is against its dtype's.\n\n"
        + "\n".join(lines) + "\n"
    )


def compare_at(nodes: int, rounds: int, count: int, dtype: str, peak: float) -> str:
    """One line of the comparison: ``count`` torch threads, compute dtype ``dtype``, whose
    matrix-product ``peak`` (GFLOP/s) the line measures itself against. In a dtype other than
    float32 a third swarm, copied prompts in float32 (a round as it ran before prompt
    sharing), plays in turn with the two, and the line gives the gain over it too."""
    contestants = [(True, dtype), (False, dtype)] + ([(False, "float32")] * (dtype != "float32"))
    swarms = {key: SharingSwarm(nodes, rounds + 3, *key) for key in contestants}
    for r in range(rounds + 1):  # round 0 warms up; each swarm goes first in turn
        for key in contestants[r % len(contestants):] + contestants[: r % len(contestants)]:
            swarms[key].play()
    shared, copied = (True, dtype), (False, dtype)
    flops = {key: [swarms[key].play(count_flops=True) for _ in range(2)]
             for key in (shared, copied)}
    median = {key: {k: statistics.median(v[1:]) for k, v in swarm.times.items()}
              for key, swarm in swarms.items()}
    gflop = {key: {part: statistics.mean(f[part] for f in counted) / 1e9
                   for part in ("act", "learn")} for key, counted in flops.items()}
    old, new = median[copied], median[shared]
    old_round, new_round = old["act"] + old["learn"], new["act"] + new["learn"]
    old_cpu, new_cpu = old["act_cpu"] + old["learn_cpu"], new["act_cpu"] + new["learn_cpu"]
    round_gflop = gflop[shared]["act"] + gflop[shared]["learn"]
    copied_gflop = gflop[copied]["act"] + gflop[copied]["learn"]
    line = (
        f"- {dtype}, {count} torch thread{'s' if count > 1 else ''}: act + learn of a round "
        f"**{new_round:.2f} s shared against {old_round:.2f} s copied: "
        f"{old_round / new_round:.2f}x** (CPU time {new_cpu:.2f} s against {old_cpu:.2f} s: "
        f"{old_cpu / new_cpu:.2f}x). Act {new['act']:.3f} vs {old['act']:.3f} s "
        f"({old['act'] / new['act']:.2f}x; CPU {new['act_cpu']:.3f} vs "
        f"{old['act_cpu']:.3f} s), learn {new['learn']:.3f} vs {old['learn']:.3f} s "
        f"({old['learn'] / new['learn']:.2f}x; CPU {new['learn_cpu']:.3f} vs "
        f"{old['learn_cpu']:.3f} s). Matrix products: {round_gflop:.1f} GFLOP a round shared "
        f"(act {gflop[shared]['act']:.1f}, learn {gflop[shared]['learn']:.1f}), "
        f"{copied_gflop:.1f} copied, so **{round_gflop / new_cpu:.0f} GFLOP per CPU second "
        f"shared, {100 * round_gflop / new_cpu / peak:.0f}% of the {dtype} peak** "
        f"({copied_gflop / old_cpu:.0f}, {100 * copied_gflop / old_cpu / peak:.0f}% copied; "
        f"{round_gflop / new_round:.0f} GFLOP per wall second shared); act alone "
        f"{100 * gflop[shared]['act'] / new['act_cpu'] / peak:.0f}%, learn alone "
        f"{100 * gflop[shared]['learn'] / new['learn_cpu'] / peak:.0f}% of peak "
        f"({100 * gflop[copied]['learn'] / old['learn_cpu'] / peak:.0f}% copied)."
    )
    if dtype != "float32":
        base = median[(False, "float32")]
        base_round, base_cpu = base["act"] + base["learn"], base["act_cpu"] + base["learn_cpu"]
        line += (f" Against the copied float32 round (a round before prompt sharing), played "
                 f"in turn with these: {base_round:.2f} s (CPU {base_cpu:.2f} s), so "
                 f"**{base_round / new_round:.2f}x** ({base_cpu / new_cpu:.2f}x in CPU time).")
    return line


PER_NODE = "### Per-node cost and the allocator"


def per_node_worker(sizes: list[int], rounds: int, allocator: str) -> dict:
    """In a process of its own: the batched swarm's rounds at each size, with glibc's
    allocator at its defaults or as the tiny harness sets it (``keep_freed_memory``)."""
    if allocator == "kept" and not keep_freed_memory():
        raise SystemExit("no glibc mallopt here: nothing to compare")
    found = {}
    for nodes in sizes:
        median = {k: statistics.median(v) for k, v in run(nodes, rounds, batched=True).items()}
        found[nodes] = {
            "wall": median["act"] + median["learn"] + median["step"],
            "cpu": median["act_cpu"] + median["learn_cpu"] + median["step_cpu"],
            "act_cpu": median["act_cpu"], "learn_cpu": median["learn_cpu"],
            "faults": median["faults"], "system": median["system"]}
    return found


def compare_per_node(sizes: list[int], rounds: int, threads: int) -> str:
    """The batched swarm's cost per node at each size, glibc's defaults against the tiny
    harness's setting, each in a process of its own; the subsection text."""
    load_before = os.getloadavg()
    results = {}
    for allocator in ("default", "kept"):
        out = subprocess.run([sys.executable, __file__, "--per-node-worker", allocator,
                              "--sizes", ",".join(map(str, sizes)), "--rounds", str(rounds),
                              "--threads", str(threads)], capture_output=True, text=True,
                             check=True)
        results[allocator] = {int(k): v for k, v in
                              json.loads(out.stdout.strip().splitlines()[-1]).items()}
        print(allocator, results[allocator], flush=True)
    load_after = os.getloadavg()
    rows = []
    for allocator, label in (("default", "glibc's defaults"),
                             ("kept", "`keep_freed_memory()` (the tiny harness)")):
        found = results[allocator]
        for nodes in sizes:
            r = found[nodes]
            rows.append(
                f"| {label} | {nodes} | {1e3 * r['cpu'] / nodes:.0f} | "
                f"{r['cpu'] / nodes / (found[sizes[0]]['cpu'] / sizes[0]):.2f} | "
                f"{1e3 * r['wall'] / nodes:.0f} | {1e3 * r['act_cpu'] / nodes:.0f} | "
                f"{1e3 * r['learn_cpu'] / nodes:.0f} | {r['system']:.2f} | "
                f"{r['faults']:,.0f} |")
    return (
        f"{PER_NODE}\n\n`python benchmarks/tiny_swarm.py --compare per-node --sizes "
        f"{','.join(map(str, sizes))} --rounds {rounds} --threads {threads}` on "
        f"{datetime.date.today()}, {machine()}, torch {torch.__version__}, {threads} torch "
        f"thread{'s' if threads > 1 else ''}. Load average (1, 5, 15 min) before "
        f"{', '.join(f'{x:.1f}' for x in load_before)}, after "
        f"{', '.join(f'{x:.1f}' for x in load_after)} (2 cores: above 2, other work shared "
        "them; CPU time is the process's own).\n\n"
        "The batched swarm (`batched_swarm`, as the tiny harness runs it), every node in the "
        "paper's round (J = 4: 4 questions x 8 completions of up to 12 new tokens; learning "
        "on its training set with advantages set to +1 / -1); the env step included; medians "
        f"over {rounds} rounds after a warm-up round, each allocator in a process of its own "
        "(its settings are the process's). System time and minor page faults of a round "
        "(`resource.getrusage`), medians too. "
        "`keep_freed_memory()` (`sapo_experiments.allocator`) sets glibc's `M_MMAP_THRESHOLD`"
        " to 32 MiB, `M_TRIM_THRESHOLD` to 2 GiB - 1 and `M_TOP_PAD` to 256 MiB through "
        "`mallopt`: freed blocks stay in the process instead of being unmapped and faulted in"
        " again at the next step. The tiny harness (`sapo_experiments.tiny_learners`) calls "
        "it where a swarm is built and where a warm start trains; for other processes, the "
        "same is `MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=2147483647 "
        "MALLOC_TOP_PAD_=268435456` in the environment at their start.\n\n"
        "| allocator | nodes | CPU per node (ms) | per node / at "
        f"{sizes[0]} | wall per node (ms) | act CPU per node (ms) | learn CPU per node (ms) | "
        "system time a round (s) | minor faults a round |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="1,2", help="torch thread counts to measure")
    parser.add_argument("--compare", choices=("node-by-node", "prompt-sharing", "per-node"),
                        default="node-by-node",
                        help="batched against node by node, prompt sharing on against off, or "
                             "the batched swarm's cost per node at --sizes, glibc's allocator "
                             "at its defaults against keep_freed_memory()")
    parser.add_argument("--sizes", default="8,32", help="swarm sizes for --compare per-node")
    parser.add_argument("--per-node-worker", choices=("default", "kept"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--dtypes", default="float32",
                        help="compute dtypes for --compare prompt-sharing (float32,bfloat16)")
    add_write_flag(parser)
    args = parser.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    sizes = [int(n) for n in args.sizes.split(",")]
    if args.per_node_worker:
        torch.set_num_threads(thread_counts[0])
        print(json.dumps(per_node_worker(sizes, args.rounds, args.per_node_worker)))
        return
    if args.compare == "per-node":
        subsection = compare_per_node(sizes, args.rounds, thread_counts[0])
        print(subsection)
        if args.write:
            write_subsection(SECTION, subsection)
        return
    if args.compare == "prompt-sharing":
        subsection = compare_prompt_sharing(args.nodes, args.rounds, thread_counts,
                                            args.dtypes.split(","))
        if args.write:
            write_subsection(SECTION, subsection)
        return
    load_before = os.getloadavg()[0]
    lines = []
    for threads in thread_counts:
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
        write_section(section, keep_subsections=True)


if __name__ == "__main__":
    main()
