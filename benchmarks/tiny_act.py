"""Benchmark: a batched tiny swarm's generation on trained nodes, against another checkout.

Run by hand (not a test):
    python benchmarks/tiny_act.py [--rounds 10] [--repeats 3] [--dtypes float32,bfloat16]
        [--ratios 4,0] [--against PATH] [--write]

Eight nodes of the ratio benchmark's real track (``sapo_experiments.bench_ratio.tracks.
REAL_LEARNER``'s learners: one common base warm-started on basic_arithmetic to 0.10 held-out
accuracy, cached after its first training) act on ``--rounds`` rounds of questions, each
answering 8 - J questions with 8 completions of up to 12 tokens (J of ``--ratios``), one torch
thread. The weights never change (no learning), so every round generates as the base does:
completions end at different lengths, as in a run, where untrained weights run every row to
the token limit (``tiny_swarm.py``'s rounds). Each figure is the median over the rounds of a
process's CPU time in ``act_jointly`` (wall beside it), then the median over ``--repeats``
processes.

``--against PATH``: the same measurement with the code of another checkout of this repository
(a worktree of an earlier commit: ``git worktree add --detach ../before <commit>``), each
process alternating between the two, so that a machine shared with other work loads both
alike; the table gives both and their ratio. ``--write`` replaces the "### Generation on
trained nodes" subsection of BENCHMARKS.md's "## Batched tiny swarm".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # not ROOT: a worker imports its checkout's code

from benchmarks_md import add_write_flag, machine, publish  # noqa: E402

SECTION = "## Batched tiny swarm"
SUBSECTION = "### Generation on trained nodes"


def measure(ratio: int, dtype: str, rounds: int) -> dict[str, float]:
    """One process's act CPU and wall time a round (medians) and mean completion tokens."""
    import dataclasses

    import numpy as np
    import torch

    import sapo_env
    from sapo_experiments.bench_ratio.tracks import REAL_LEARNER

    learners = dataclasses.replace(REAL_LEARNER, dtype=dtype)
    names = [f"node_{i}" for i in range(8)]
    agents = learners(names, ratio, np.random.SeedSequence(0))
    torch.set_num_threads(1)
    joint = agents[0].joint_actor
    tasks = [tuple(task) for task in learners.swarm_settings()["tasks"]]
    env = sapo_env.parallel_env(n=8, tasks=tasks, system_prompt="", num_external=ratio,
                                max_rounds=rounds + 2)
    cpu, wall, tokens = [], [], []
    tokenizer = agents[0].tokenizer
    for round_ in range(rounds + 1):  # round 0 warms up
        observations, _ = env.reset(seed=round_)
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        actions = joint.act_jointly(observations)
        if round_:
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start_wall)
        tokens += [len(tokenizer(c, add_special_tokens=False)["input_ids"])
                   for action in actions.values() for group in action["completions"]
                   for c in group]
    return {"cpu": statistics.median(cpu), "wall": statistics.median(wall),
            "tokens": float(np.mean(tokens))}


def in_process(tree: Path, ratio: int, dtype: str, rounds: int) -> dict[str, float]:
    """``measure`` in a fresh process that imports the code of ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--worker", str(tree), "--ratios", str(ratio),
                          "--dtypes", dtype, "--rounds", str(rounds)],
                         env=env, capture_output=True, text=True, cwd=tree)
    if out.returncode:
        raise RuntimeError(f"the measurement in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(results: dict, args: argparse.Namespace, load: tuple[float, float]) -> str:
    trees = list(results)
    lines = [
        SUBSECTION, "",
        f"`python benchmarks/tiny_act.py --rounds {args.rounds} --repeats {args.repeats} "
        f"--dtypes {args.dtypes} --ratios {args.ratios}"
        + (" --against <checkout>" if args.against else "") + "` on "
        f"{datetime.date.today().isoformat()}, {machine()}, 1 torch thread; load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after (2 cores: above 2, other work shared them; "
        "CPU time is the process's own).", "",
        "Eight nodes of the ratio benchmark's real track (one trained common base, weights "
        "fixed), 8 - J questions each, 8 completions of up to 12 tokens; act CPU a round, the "
        "median over rounds then over processes (wall beside it).", "",
    ]
    columns = ["J", "dtype", "tokens a completion",
               *(f"{label}: {what}" for label in trees for what in ("CPU (ms)", "wall (ms)")),
               *(["ratio (CPU)"] if len(trees) == 2 else [])]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for (ratio, dtype) in results[trees[0]]:
        cells = [results[t][(ratio, dtype)] for t in trees]
        cpu = [statistics.median(r["cpu"] for r in c) for c in cells]
        row = f"| {ratio} | {dtype} | {statistics.mean(r['tokens'] for r in cells[-1]):.2f} |"
        row += "".join(f" {1000 * c:.1f} | {1000 * statistics.median(r['wall'] for r in cs):.1f} |"
                       for c, cs in zip(cpu, cells))
        lines.append(row + (f" {cpu[0] / cpu[1]:.2f}x |" if len(trees) == 2 else ""))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--ratios", default="4,0", help="the J of each measurement")
    parser.add_argument("--against", type=Path, help="another checkout to measure beside this one")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    add_write_flag(parser, " (its subsection)")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(int(args.ratios), args.dtypes, args.rounds)))
        return
    trees = {"before": args.against.resolve()} if args.against else {}
    trees["this checkout"] = ROOT
    cells = [(int(j), d) for j in args.ratios.split(",") for d in args.dtypes.split(",")]
    results: dict = {label: {cell: [] for cell in cells} for label in trees}
    load = os.getloadavg()[0]
    for repeat in range(args.repeats):
        for cell in cells:
            order = list(trees) if repeat % 2 == 0 else list(trees)[::-1]
            for label in order:
                results[label][cell].append(in_process(trees[label], *cell, args.rounds))
    publish(report(results, args, (load, os.getloadavg()[0])), args.write, within=SECTION)


if __name__ == "__main__":
    main()
