"""Benchmark: a swarm of simulated learners, env included, against its target.

Run by hand (not a test):  python benchmarks/sim_swarm.py [--rounds 2000] [--write]

Target: 8 nodes x 2000 rounds at the paper defaults in <= 60 s on one core, env included.
Measures one 4/4 run of ``agents.sim.simulated`` learners in the real env and reports the wall time,
and the share of it spent in the learners' ``act`` and ``learn`` (timed around each call).

``--write`` replaces the "## Simulated swarm" section of BENCHMARKS.md with the results.
"""

from __future__ import annotations

import argparse
import datetime
import time

from benchmarks_md import add_write_flag, machine, publish

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import SimulatedLearner, simulated_swarm

SECTION = "## Simulated swarm"


class Timed:
    """Wraps a learner and adds up the time its act and learn take."""

    def __init__(self, learner: SimulatedLearner, clock: dict[str, float]):
        self.learner, self.clock = learner, clock

    def act(self, observation):
        start = time.perf_counter()
        try:
            return self.learner.act(observation)
        finally:
            self.clock["act"] += time.perf_counter() - start

    def learn(self, batch):
        start = time.perf_counter()
        try:
            return self.learner.learn(batch)
        finally:
            self.clock["learn"] += time.perf_counter() - start


def measure(rounds: int, n: int = 8, num_external: int = 4) -> dict[str, float]:
    clock = {"act": 0.0, "learn": 0.0}
    env = sapo_env.parallel_env(n=n, max_rounds=rounds, num_external=num_external)
    learners = simulated_swarm(env.possible_agents, seed=0, num_external=num_external)
    agents = {a: Timed(learner, clock) for a, learner in learners.items()}
    start = time.perf_counter()
    history = sapo_env.runtime.run(env, agents, seed=0, progress=False)
    wall = time.perf_counter() - start
    node_rounds = rounds * n
    return {"rounds": rounds, "n": n, "wall_s": wall, "act_ms": 1e3 * clock["act"] / node_rounds,
            "learn_ms": 1e3 * clock["learn"] / node_rounds,
            "round_ms": 1e3 * wall / rounds, "cumulative": history.cumulative_reward}


def report(r: dict[str, float]) -> str:
    scaled = r["wall_s"] * 2000 / r["rounds"]
    sim_share = (r["act_ms"] + r["learn_ms"]) * r["n"] / r["round_ms"]
    return "\n".join([
        SECTION, "",
        f"Measured {datetime.date.today()} on {machine()} (shared with other work): "
        f"8 simulated learners, 4/4, paper defaults, {r['rounds']} rounds.", "",
        "| measure | value | goal |",
        "| --- | ---: | ---: |",
        f"| wall time for 2000 rounds, env included | {scaled:.0f} s | <= 60 s |",
        f"| one round (8 nodes), env included | {r['round_ms']:.1f} ms | |",
        f"| learner act, per node-round | {r['act_ms']:.2f} ms | |",
        f"| learner learn, per node-round | {r['learn_ms']:.2f} ms | |",
        f"| share of the run spent in the learners | {100 * sim_share:.0f}% | |",
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2000, help="rounds of the timed run")
    add_write_flag(parser)
    args = parser.parse_args(argv)
    section = report(measure(args.rounds))
    publish(section, args.write)


if __name__ == "__main__":
    main()
