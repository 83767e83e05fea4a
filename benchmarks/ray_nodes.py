"""Benchmark: nodes in Ray actors (``agents.wrappers.remote``) against the same nodes in process.

Run by hand (not a test):  python benchmarks/ray_nodes.py [--rounds 6] [--write]

Two measures of running nodes as Ray actors, on a local ``ray.init(num_cpus=2)``:

- **Speed-up of 2 workers over 1, tiny-LM nodes**: 2 GRPO nodes on a small Llama built from a
  config (tests/tiny_lm.py at hidden size 256, 96 new tokens, one torch thread each), run in
  process (one core, node after node) and as 2 Ray actors of one CPU each (goal >= 1.6x).
- **Ray's per-round overhead, 8 simulated learners** (4/4, paper defaults): the round time in
  Ray actors against in process (goal <= 20% more), with one actor per node and with 4 nodes
  per actor.
- **Scoring spread over 2 workers at n = 512** (``RayScoring(workers=2)``): the env step's
  wall-clock time on canned completions (``benchmarks/env_step.py``'s) against in process
  (goal >= 1.6x).

Rounds are wall-clock time after one warm-up round (actors started, models built). The results
are identical in both forms (tests/test_remote.py); this measures only time. ``--write``
replaces the "## Ray nodes" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from functools import partial
from pathlib import Path

from benchmarks_md import add_write_flag, machine, publish
from env_step import canned_actions

import sapo_env
import sapo_env.runtime
from sapo_env.extras import require

TESTS = Path(__file__).resolve().parents[1] / "tests"
SECTION = "## Ray nodes"


def lm_node(seed: int):
    """A GRPO node on a 2-layer Llama of hidden size 256 (built where it is called)."""
    sys.path.insert(0, str(TESTS))
    import torch
    from tiny_lm import char_tokenizer, tiny_llama

    from agents import GRPOAgent, GRPOConfig

    torch.set_num_threads(1)
    tok = char_tokenizer()
    config = GRPOConfig(max_new_tokens=96, learning_rate=1e-3, device="cpu")
    return GRPOAgent(tiny_llama(tok, seed=0, hidden=256), tok, config, num_external=1, seed=seed)


def sim_node(child):
    from agents.sim.simulated import SimulatedLearner, SimulatedLearnerConfig

    return SimulatedLearner(SimulatedLearnerConfig(num_external=4), child)


def timed_rounds(env, nodes: dict, rounds: int) -> float:
    """Seconds per round over ``rounds`` rounds, after one warm-up round."""
    observations, _ = env.reset(seed=0)
    observations = sapo_env.runtime.play_round(env, nodes, observations).observations
    start = time.perf_counter()
    for _ in range(rounds):
        observations = sapo_env.runtime.play_round(env, nodes, observations).observations
    return (time.perf_counter() - start) / rounds


def lm_env():
    return sapo_env.parallel_env(n=2, completions_per_question=4, train_budget=2,
                                 num_external=1, tasks=["basic_arithmetic"], max_rounds=1000)


class TimedScoring:
    """A ``Scoring`` that counts the wall-clock seconds spent in ``inner.score``."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def score(self, *args):
        start = time.perf_counter()
        try:
            return self.inner.score(*args)
        finally:
            self.seconds += time.perf_counter() - start


def timed_steps(scoring, steps: int, n: int = 512) -> tuple[float, float]:
    """Wall-clock seconds per env step of ``n`` nodes on canned completions, after one, and of
    its scoring alone."""
    from sapo_env.scoring.round_scoring import LocalScoring

    timed = TimedScoring(scoring or LocalScoring())
    env = sapo_env.parallel_env(n=n, max_rounds=steps + 2, num_external=4, scoring=timed)
    observations, _ = env.reset(seed=0)
    observations = env.step(canned_actions(observations))[0]
    seconds, timed.seconds = 0.0, 0.0
    for _ in range(steps):
        actions = canned_actions(observations)  # not timed: the nodes' work
        start = time.perf_counter()
        observations = env.step(actions)[0]
        seconds += time.perf_counter() - start
    return seconds / steps, timed.seconds / steps


def measure(rounds: int, sim_rounds: int, steps: int) -> dict:
    import numpy as np

    ray = require("ray", "benchmarks/ray_nodes.py")
    from agents.wrappers.remote import remote, remote_swarm
    from sapo_env.scoring.round_scoring import RayScoring

    lm_factories = [partial(lm_node, seed=i) for i in range(2)]
    names = lm_env().possible_agents
    lm_local = timed_rounds(lm_env(), {a: f() for a, f in zip(names, lm_factories)}, rounds)

    sim_env = sapo_env.parallel_env(n=8, max_rounds=10_000, num_external=4)
    children = lambda: np.random.SeedSequence(0).spawn(8)  # noqa: E731 (fresh each time)
    sim_local = timed_rounds(sim_env, {a: sim_node(c) for a, c in
                                       zip(sim_env.possible_agents, children())}, sim_rounds)

    score_local = timed_steps(None, steps)

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                 [str(TESTS), str(TESTS.parent)])}})
    try:
        lm_remote = timed_rounds(lm_env(), {a: remote(f, num_cpus=1)
                                            for a, f in zip(names, lm_factories)}, rounds)
        sim_remote = timed_rounds(sim_env, {a: remote(partial(sim_node, c), num_cpus=0.25)
                                            for a, c in zip(sim_env.possible_agents, children())},
                                  sim_rounds)
        sim_packed = timed_rounds(sim_env, remote_swarm(
            {a: partial(sim_node, c) for a, c in zip(sim_env.possible_agents, children())},
            num_cpus=1, nodes_per_actor=4), sim_rounds)
        score_remote = timed_steps(RayScoring(workers=2), steps)
    finally:
        ray.shutdown()
    return {"rounds": rounds, "sim_rounds": sim_rounds, "lm_local": lm_local,
            "lm_remote": lm_remote, "sim_local": sim_local, "sim_remote": sim_remote,
            "sim_packed": sim_packed,
            "steps": steps, "step_local": score_local[0], "step_remote": score_remote[0],
            "score_local": score_local[1], "score_remote": score_remote[1]}


def report(r: dict) -> str:
    speedup = r["lm_local"] / r["lm_remote"]
    overhead = r["sim_remote"] / r["sim_local"] - 1
    packed = r["sim_packed"] / r["sim_local"] - 1
    step = r["step_local"] / r["step_remote"]
    scoring = r["score_local"] / r["score_remote"]
    return "\n".join([
        SECTION, "",
        f"`python benchmarks/ray_nodes.py --write` on {datetime.date.today()}, {machine()}; "
        f"local `ray.init(num_cpus=2)`, wall-clock seconds per round after a warm-up round.", "",
        "| measure | in process | Ray actors | ratio | goal |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| 2 tiny-LM GRPO nodes ({r['rounds']} rounds; hidden 256, 96 tokens, 1 thread each) "
        f"| {r['lm_local']:.2f} s | {r['lm_remote']:.2f} s | {speedup:.2f}x faster | >= 1.6x: "
        f"{'met' if speedup >= 1.6 else 'missed'} |",
        f"| 8 simulated learners, 4/4 ({r['sim_rounds']} rounds) | {1e3 * r['sim_local']:.1f} ms "
        f"| {1e3 * r['sim_remote']:.1f} ms | {100 * overhead:+.0f}% | <= +20%: "
        f"{'met' if overhead <= 0.2 else 'missed'} |",
        f"| the same, 4 nodes per actor (`nodes_per_actor=4`: 2 actors) "
        f"| {1e3 * r['sim_local']:.1f} ms | {1e3 * r['sim_packed']:.1f} ms "
        f"| {100 * packed:+.0f}% | <= +20%: {'met' if packed <= 0.2 else 'missed'} |",
        f"| env step at n = 512, scoring over 2 workers ({r['steps']} steps) "
        f"| {r['step_local']:.2f} s | {r['step_remote']:.2f} s | {step:.2f}x faster "
        f"| >= 1.6x: {'met' if step >= 1.6 else 'missed'} |",
        f"| its scoring alone | {r['score_local']:.2f} s | {r['score_remote']:.2f} s "
        f"| {scoring:.2f}x faster | |", "",
        f"At n = 512 (4/4: 2,048 questions, 16,384 completions) scoring is "
        f"{r['score_local']:.2f} s of the {r['step_local']:.2f} s step in process; most of the "
        "rest is reasoning-gym generating the next round's questions (bf's compiler alone is "
        "about half of it), which RayScoring does not move. Spread over two workers, the "
        "scoring pays for shipping every question's entry and completions (~6 MB a round) to "
        "the workers and back, on two cores that the driver and Ray's own processes share.", "",
        "A remote call costs about half a millisecond of Ray's own work on these 2 cores, plus "
        "pickling the observation (~50 KB for a node of 8, most of it the pool) or the batch: "
        "with one actor per node, 16 calls a round (8 acts, 8 learns) are a large share of a "
        "simulated round, and a small one of a language model's. Packed 4 to an actor, a round "
        "is 4 calls, and the observations of one actor's nodes share their pool's groups, which "
        "pickle once per call. Give a node an actor of its own when its act and learn take much "
        "longer than a millisecond; pack light nodes.", "",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds of the LM nodes")
    parser.add_argument("--sim-rounds", type=int, default=200,
                        help="timed rounds of the simulated swarm")
    parser.add_argument("--steps", type=int, default=6, help="timed env steps at n = 512")
    add_write_flag(parser)
    args = parser.parse_args(argv)
    section = report(measure(args.rounds, args.sim_rounds, args.steps))
    publish(section, args.write)


if __name__ == "__main__":
    main()
