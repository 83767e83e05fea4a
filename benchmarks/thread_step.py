"""Benchmark: ``env.step`` called from a worker thread, where scoring runs in a child process.

Run by hand (not a test):  python benchmarks/thread_step.py [--rounds 10] [--sizes 8 512] [--write]

The signal timer that bounds each completion's scoring works only in the main thread; from any
other thread the env scores in a child process that it can kill
(``sapo_env.scoring.process_scoring``).
This measures what that costs: the median ``env.step`` at the paper defaults (the canned
completions of ``benchmarks/env_step.py``: ~300 characters, every other one right), called in
the main thread and from a worker thread, wall time, and the CPU time of this process and of
the scoring child (read from /proc, so Linux only). One warm-up step each (it starts the child
and builds its datasets) is not timed.

``--write`` replaces the "## Env step from a worker thread" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks_md import add_write_flag, machine, publish
from env_step import canned_actions

import sapo_env

SECTION = "## Env step from a worker thread"


def child_cpu(env) -> float:
    """CPU seconds the env's scoring child has used (0 before it exists)."""
    pid = env._scoring.isolated.child_pid  # the env's default LocalScoring
    if pid is None:
        return 0.0
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(n: int, rounds: int, in_thread: bool) -> dict:
    env = sapo_env.parallel_env(n=n, max_rounds=rounds + 2)
    observations, _ = env.reset(seed=0)
    walls, cpus, children = [], [], []
    with ThreadPoolExecutor(1) as worker:
        def step(actions):
            return worker.submit(env.step, actions).result() if in_thread else env.step(actions)

        observations, *_ = step(canned_actions(observations))  # warm-up: child, datasets
        for _ in range(rounds):
            actions = canned_actions(observations)
            wall, cpu, child = time.perf_counter(), time.process_time(), child_cpu(env)
            observations, *_ = step(actions)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            children.append(child_cpu(env) - child)
    env.close()
    return {"n": n, "thread": in_thread, "wall_ms": 1e3 * statistics.median(walls),
            "cpu_ms": 1e3 * statistics.median(cpus), "child_ms": 1e3 * statistics.median(children)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 512])
    add_write_flag(parser)
    args = parser.parse_args(argv)
    before = os.getloadavg()[:2]
    results = [measure(n, args.rounds, in_thread) for n in args.sizes
               for in_thread in (False, True)]
    after = os.getloadavg()[:2]
    lines = [f"`python benchmarks/thread_step.py --rounds {args.rounds} --sizes "
             f"{' '.join(map(str, args.sizes))}` on {datetime.date.today()}, {machine()}. "
             f"Load average (1, 5 min) before: {before[0]:.2f}, {before[1]:.2f}; after: "
             f"{after[0]:.2f}, {after[1]:.2f}.", "",
             "Median `env.step` over the timed rounds, paper defaults, canned completions "
             "(`benchmarks/env_step.py`), in the main thread (signal timer) and from a worker "
             "thread (scoring in the killable child process, "
             "`sapo_env.scoring.process_scoring`).", "",
             "| n | called from | wall ms | CPU ms, this process | CPU ms, scoring child | "
             "wall, thread / main |", "| ---: | --- | ---: | ---: | ---: | ---: |"]
    main_wall = {r["n"]: r["wall_ms"] for r in results if not r["thread"]}
    for r in results:
        lines.append(f"| {r['n']} | {'worker thread' if r['thread'] else 'main thread'} | "
                     f"{r['wall_ms']:.0f} | {r['cpu_ms']:.0f} | {r['child_ms']:.0f} | "
                     f"{r['wall_ms'] / main_wall[r['n']]:.2f}x |")
    publish("\n".join([SECTION, "", *lines]) + "\n", args.write)


if __name__ == "__main__":
    sys.exit(main())
