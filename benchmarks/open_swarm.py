"""Benchmark: a simulated open swarm on one machine, 1,024 nodes with churn, time and memory.

Run by hand (not a test):  python benchmarks/open_swarm.py [--nodes 1024] [--rounds 300]
[--write]

The paper's open demo ran thousands of nodes that came and went. Here ``--nodes`` simulated
learners (``agents.sim.simulated``, 4/4, paper defaults) play ``sapo_env.runtime.play_round`` in one
process, under churn drawn from the seed:

- every node sits a round out with probability ``--offline``
  (``agents.wrappers.churning.ChurningAgent``);
- a ``--leave`` share of the nodes leaves for good at a round drawn uniformly in the run;
- a ``--join`` share of them joins late (``SwarmConfig.join_rounds``) at such a round.

Per round: process CPU time and wall time, split into the env's step and the nodes' act and
learn (``RoundRecord.act_cpu_seconds`` / ``learn_cpu_seconds``), and the live nodes; resident
memory (VmRSS, /proc) every ``--every`` rounds. The garbage collector keeps Python's defaults.

``--write`` replaces the "## Open swarm" section of BENCHMARKS.md with the results (keeping its
``###`` subsection of the Ray form).

``--ray [--nodes-per-actor K] [--ray-cpus C]``: the same swarm with its nodes in Ray actors,
``K`` to an actor, on a local Ray of ``C`` CPUs (``benchmarks/open_swarm_ray.py``); ``--write``
then replaces only that subsection.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from benchmarks_md import add_write_flag, machine, publish

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import simulated_swarm
from agents.wrappers.churning import ChurningAgent

SECTION = "## Open swarm"


def rss_mb(pid: int | str = "self") -> float:
    """Process ``pid``'s resident set size in MB, this process's by default (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"VmRSS not found in /proc/{pid}/status (this benchmark needs Linux)")


def churn_schedule(n: int, rounds: int, leave: float, join: float, seed: int = 0
                   ) -> tuple[dict[str, int], dict[str, int]]:
    """Who leaves and who joins, and when: disjoint nodes, rounds drawn in ``[1, rounds)``."""
    rng = np.random.default_rng(seed)
    names = np.array([f"node_{i}" for i in range(n)])
    chosen = rng.permutation(n)
    leaving = names[chosen[: int(leave * n)]]
    joining = names[chosen[int(leave * n): int(leave * n) + int(join * n)]]
    when = rng.integers(1, max(2, rounds), size=len(leaving) + len(joining))
    return ({str(a): int(r) for a, r in zip(leaving, when)},
            {str(a): int(r) for a, r in zip(joining, when[len(leaving):])})


def measure(n: int, rounds: int, offline: float, leave: float, join: float, every: int,
            on_round: Callable[[sapo_env.runtime.RoundRecord], None] | None = None) -> dict:
    """The open swarm in one process: per round (CPU, wall, the nodes' act and learn CPU, live,
    played), and (round, RSS) every ``every`` rounds; ``on_round`` sees each round's record."""
    leaves, joins = churn_schedule(n, rounds, leave, join)
    env = sapo_env.parallel_env(n=n, max_rounds=rounds, num_external=4, join_rounds=joins)
    learners = simulated_swarm(env.possible_agents, seed=0, num_external=4)
    seeds = np.random.SeedSequence(1).spawn(n)
    agents = {a: ChurningAgent(learners[a], offline, leaves.get(a), seed)
              for a, seed in zip(env.possible_agents, seeds)}
    calls = sapo_env.runtime.AgentCalls(agents)
    load = os.getloadavg()[0]
    start = time.process_time(), time.perf_counter()
    observations, _ = env.reset(seed=0)
    reset = time.process_time() - start[0], time.perf_counter() - start[1]
    rows, memory = [], [(0, rss_mb())]
    for t in range(1, rounds + 1):
        live = len(env.agents)
        cpu, wall = time.process_time(), time.perf_counter()
        record = sapo_env.runtime.play_round(env, calls, observations)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        observations = record.observations
        agents_cpu = sum(record.act_cpu_seconds.values()) + sum(
            record.learn_cpu_seconds.values())
        rows.append((cpu, wall, agents_cpu, live, len(record.rewards)))
        if on_round is not None:
            on_round(record)
        if t % every == 0 or t == rounds:
            memory.append((t, rss_mb()))
            print(f"round {t}: {1e3 * cpu:.0f} ms CPU, {live} live, {memory[-1][1]:.0f} MB",
                  flush=True)
    return {"n": n, "rounds": rounds, "offline": offline, "leaves": len(leaves),
            "joins": len(joins), "rows": rows, "memory": memory, "reset": reset,
            "load": (load, os.getloadavg()[0])}


def report(r: dict, command: str) -> str:
    cpu = [row[0] for row in r["rows"]]
    wall = [row[1] for row in r["rows"]]
    agents = [row[2] for row in r["rows"]]
    played = [row[4] for row in r["rows"]]
    live = [row[3] for row in r["rows"]]
    median = statistics.median
    quarter = max(1, len(cpu) // 4)
    early, late = median(cpu[:quarter]), median(cpu[-quarter:])
    after_warmup = [m for t, m in r["memory"] if t >= min(50, r["rounds"])]
    lines = [
        SECTION, "",
        f"`{command}` on {datetime.date.today()}, {machine()}, load average "
        f"{r['load'][0]:.1f} at the start and {r['load'][1]:.1f} at the end (2 cores: above 2, "
        "other work shared them). One process: simulated learners (`agents.sim.simulated`), 4/4, "
        f"paper defaults; every node offline with probability {r['offline']} a round, "
        f"{r['leaves']} leaving and {r['joins']} joining late at rounds drawn uniformly in the "
        "run (`benchmarks/open_swarm.py`). Process CPU time (wall beside it); the env's share is "
        "the round less the nodes' act and learn; resident memory (VmRSS).", "",
        "| measure | value |", "| --- | ---: |",
        f"| nodes (possible) / live at the start / live at the end | {r['n']} / {live[0]} / "
        f"{live[-1]} |",
        f"| nodes that played a round (median) | {median(played):.0f} |",
        f"| reset (the first questions) | {r['reset'][0]:.1f} s CPU, {r['reset'][1]:.1f} s wall |",
        f"| a round, median (CPU / wall) | {1e3 * median(cpu):.0f} ms / "
        f"{1e3 * median(wall):.0f} ms |",
        f"| of which the env (CPU) | {1e3 * median(c - a for c, a in zip(cpu, agents)):.0f} ms |",
        f"| of which the nodes' act and learn (CPU) | {1e3 * median(agents):.0f} ms |",
        f"| a round per node that played (CPU) | "
        f"{1e6 * median(c / max(1, p) for c, p in zip(cpu, played)):.0f} us |",
        f"| first / last quarter of the rounds, median CPU | {1e3 * early:.0f} / "
        f"{1e3 * late:.0f} ms |",
        f"| {r['rounds']} rounds, CPU / wall | {sum(cpu) / 60:.1f} / {sum(wall) / 60:.1f} min |",
        f"| resident memory after reset / at the end | {r['memory'][0][1]:.0f} / "
        f"{r['memory'][-1][1]:.0f} MB |",
        f"| resident memory from round 50 on, min / max | {min(after_warmup):.0f} / "
        f"{max(after_warmup):.0f} MB |",
        "",
        "| round | " + " | ".join(str(t) for t, _ in r["memory"]) + " |",
        "|---" * (len(r["memory"]) + 1) + "|",
        "| RSS (MB) | " + " | ".join(f"{m:.0f}" for _, m in r["memory"]) + " |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--offline", type=float, default=0.05, help="offline, each round")
    parser.add_argument("--leave", type=float, default=0.1, help="share of nodes that leave")
    parser.add_argument("--join", type=float, default=0.1, help="share that joins late")
    parser.add_argument("--every", type=int, default=50, help="rounds between memory reads")
    parser.add_argument("--ray", action="store_true",
                        help="the nodes in Ray actors (benchmarks/open_swarm_ray.py)")
    parser.add_argument("--nodes-per-actor", type=int, default=None,
                        help="with --ray: nodes packed in one actor (default: one actor a CPU)")
    parser.add_argument("--ray-cpus", type=int, default=None,
                        help="with --ray: CPUs of the local Ray (default: the machine's cores)")
    add_write_flag(parser, also=" (--ray: its own subsection of the section)")
    args = parser.parse_args(argv)
    command = "python benchmarks/open_swarm.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    if args.ray:
        from open_swarm_ray import measure_ray, report_ray

        result = measure_ray(args.nodes, args.rounds, args.offline, args.leave, args.join,
                             args.every, args.nodes_per_actor, args.ray_cpus)
        publish(report_ray(result, command.strip()), args.write, within=SECTION)
        return
    result = measure(args.nodes, args.rounds, args.offline, args.leave, args.join, args.every)
    section = report(result, command.strip())
    publish(section, args.write, keep_subsections=True)


if __name__ == "__main__":
    main()
