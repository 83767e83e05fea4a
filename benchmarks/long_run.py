"""Benchmark: resident memory of a long simulated run, against its target.

Run by hand (not a test):  python benchmarks/long_run.py [--rounds 100000] [--write]

Target: over 100,000 rounds of 8 simulated learners (paper defaults, 4/4), the process's
resident memory after warm-up grows by no more than 5%. The loop is
``sapo_env.runtime.play_round``, the round that ``sapo_env.runtime.run`` plays, without
``run``'s ``History``, which keeps every round's infos on purpose (for 100,000 rounds of 8 nodes
that is the run's record, not a leak: see the note written into BENCHMARKS.md). Resident memory
(VmRSS) is read from /proc every ``--every`` rounds; warm-up is the first ``--warmup`` rounds
(caches of questions and datasets fill up there).

``--write`` replaces the "## Long run" section of BENCHMARKS.md and writes the figure to
``benchmarks/long_run_rss.png``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import time
from pathlib import Path

from benchmarks_md import BENCHMARKS_MD, add_write_flag, machine, publish

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import simulated_swarm
from sapo_env.extras import require

SECTION = "## Long run"
FIGURE = Path(__file__).resolve().parent / "long_run_rss.png"
GOAL = 0.05


def rss_mb() -> float:
    """This process's resident set size in MB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status (this benchmark needs Linux)")


def measure(rounds: int, every: int, n: int = 8, num_external: int = 4) -> dict:
    env = sapo_env.parallel_env(n=n, max_rounds=rounds, num_external=num_external)
    agents = simulated_swarm(env.possible_agents, seed=0, num_external=num_external)
    observations, _ = env.reset(seed=0)
    marks, memory, swarm_reward = [0], [rss_mb()], 0.0
    start = time.perf_counter()
    for t in range(1, rounds + 1):
        record = sapo_env.runtime.play_round(env, agents, observations)
        observations = record.observations
        swarm_reward += sum(record.rewards.values()) / len(record.rewards)
        if t % every == 0:
            gc.collect()  # memory held only by garbage not yet collected is not growth
            marks.append(t)
            memory.append(rss_mb())
    return {"rounds": rounds, "n": n, "marks": marks, "rss": memory,
            "wall_s": time.perf_counter() - start, "cumulative": swarm_reward}


def growth(result: dict, warmup: int) -> tuple[float, float, float]:
    """RSS at the end of warm-up, at the end, and the relative growth between them."""
    after = [m for m, r in zip(result["marks"], result["rss"]) if m >= warmup]
    first = result["rss"][result["marks"].index(after[0])]
    last = result["rss"][-1]
    return first, last, (last - first) / first


def plot(result: dict, warmup: int, path: Path) -> None:
    matplotlib = require("matplotlib", "the memory figure of benchmarks/long_run.py")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(result["marks"], result["rss"], lw=1.5)
    ax.axvline(warmup, color="grey", ls="--", lw=1, label="end of warm-up")
    ax.set_xlabel("round")
    ax.set_ylabel("resident memory (MB)")
    ax.set_title(f"{result['n']} simulated learners, 4/4, paper defaults")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(result: dict, warmup: int) -> str:
    first, last, rel = growth(result, warmup)
    verdict = "met" if rel <= GOAL else "missed"
    rounds = result["rounds"]
    rows = [(m, r) for m, r in zip(result["marks"], result["rss"])
            if m in (0, warmup) or m % max(rounds // 10, 1) == 0]
    return "\n".join([
        SECTION, "",
        f"`python benchmarks/long_run.py --rounds {rounds} --write` on "
        f"{datetime.date.today()}, {machine()}: {result['n']} simulated learners, 4/4, paper "
        f"defaults, {rounds} rounds of `sapo_env.runtime.play_round` in "
        f"{result['wall_s'] / 60:.0f} min "
        f"({1e3 * result['wall_s'] / rounds:.1f} ms a round); resident memory read every "
        f"{result['marks'][1]} rounds after a garbage collection.", "",
        f"- Resident memory after warm-up ({warmup} rounds): {first:.0f} MB; after {rounds} "
        f"rounds: {last:.0f} MB; growth **{100 * rel:+.1f}%** (goal <= {100 * GOAL:.0f}%: "
        f"{verdict}).",
        "- `sapo_env.runtime.run` keeps a `History`: per round its reward arrays and every "
        "node's infos and learn metrics, a record that grows with the run by design (a few "
        "KB a round for 8 nodes). For runs this long, drive `play_round` yourself, as this "
        "benchmark does, and keep what you need.",
        "",
        f"![resident memory over a long run]({FIGURE.relative_to(BENCHMARKS_MD.parent)})", "",
        "| round | RSS (MB) |", "| ---: | ---: |",
        *[f"| {m} | {r:.0f} |" for m, r in rows], "",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=1000, help="rounds between RSS readings")
    parser.add_argument("--warmup", type=int, default=None,
                        help="rounds of warm-up (default: a tenth of the run)")
    add_write_flag(parser, " and the figure")
    args = parser.parse_args(argv)
    warmup = args.warmup if args.warmup is not None else args.rounds // 10
    warmup = max(args.every, warmup - warmup % args.every)
    result = measure(args.rounds, args.every)
    section = report(result, warmup)
    if args.write:
        plot(result, warmup, FIGURE)
    publish(section, args.write)


if __name__ == "__main__":
    main()
