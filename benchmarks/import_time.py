"""Benchmark: how long ``import sapo_env`` and the first env take, each in a fresh process.

Run by hand (not a test):  python benchmarks/import_time.py [--runs 7] [--write]

Each statement runs in a new Python process (nothing cached in memory; the files are in the
page cache after the first run, which is not counted). Reported: the median wall time of the
process and its CPU time (user + system, from ``resource.getrusage`` of the children), minus
the same for a process that runs nothing (the interpreter's own start-up), so the numbers are
the statement's own cost. ``import sapo_env`` does not import reasoning-gym; the first
``parallel_env`` does (``sapo_env.scoring.rg_fixes.load_reasoning_gym``).

``--write`` replaces the "## Import time" section of BENCHMARKS.md with the results.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import subprocess
import sys
import time

from benchmarks_md import add_write_flag, machine, publish

STATEMENTS = {
    "import sapo_env": "import sapo_env",
    "import sapo_env.runtime": "import sapo_env.runtime",
    "import agents": "import agents",
    "import sapo_env; sapo_env.parallel_env(n=8)": "import sapo_env; sapo_env.parallel_env(n=8)",
    "import reasoning_gym (for scale)": "import reasoning_gym",
}


def run_once(code: str) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh process running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def median_cost(code: str, runs: int) -> tuple[float, float]:
    run_once(code)  # warm the page cache
    walls, cpus = zip(*(run_once(code) for _ in range(runs)))
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per statement")
    add_write_flag(parser)
    args = parser.parse_args()

    load_start = os.getloadavg()[0]
    empty_wall, empty_cpu = median_cost("pass", args.runs)
    rows = []
    for label, code in STATEMENTS.items():
        wall, cpu = median_cost(code, args.runs)
        rows.append((label, wall - empty_wall, cpu - empty_cpu))
        print(f"{label:48s} wall {wall - empty_wall:6.3f} s  CPU {cpu - empty_cpu:6.3f} s")
    load_end = os.getloadavg()[0]

    table = "\n".join(f"| `{label}` | {wall:.2f} | {cpu:.2f} |" for label, wall, cpu in rows)
    section = f"""## Import time

`python benchmarks/import_time.py --runs {args.runs} --write` on {datetime.date.today()}, \
{machine()}, load average {load_start:.1f} at the start and {load_end:.1f} at the end; each \
statement in a fresh process, median of {args.runs}, minus an empty interpreter's start-up \
({empty_wall:.2f} s wall, {empty_cpu:.2f} s CPU).

| statement | wall (s) | CPU (s) |
|---|---|---|
{table}

`import sapo_env` loads neither reasoning-gym nor sympy, matplotlib or torch
(`tests/test_config.py` checks it); the first env (its `SwarmConfig` checks the tasks) loads
reasoning-gym, which is most of that row.
"""
    publish(section, args.write)


if __name__ == "__main__":
    main()
