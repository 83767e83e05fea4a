"""Benchmark: the env's step alone, against reasoning-gym's own work for the same round.

Run by hand (not a test):  python benchmarks/env_step.py [--rounds 30] [--write]

Measures, with canned completions of ~300 characters (half carrying the right answer):
- the median ``env.step`` time at the paper defaults (n=8, L=8, 4/4 under the paper's protocol:
  each node answers 4 questions, 256 completions a round), with the protections against
  untrusted text on (``sapo_env.scoring.guard``'s per-completion time limit and size limit,
  ``sapo_env.scoring.safe_scorers``), and at n=8 also without them (no time limit, reasoning-gym's
  own
  scorers): what the protections cost;
- in the same run, the time reasoning-gym alone (its own scorers) takes to generate those
  questions and to extract and score those completions (the floor any env must pay);
- the per-node step time at n = 8, 64 and 512 (flat in n means the env scales).

Times are the CPU time of this process (``time.process_time``), not wall time: on a shared
2-core machine other processes would otherwise decide the numbers. A full garbage collection
runs before each timed section, so that neither section pays for the other's garbage.

``--write`` replaces the "## Env step" section of BENCHMARKS.md with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import io
import os
import statistics
import sys
import time

from benchmarks_md import machine, write_section
from reasoning_gym.utils import extract_answer

import sapo_env
from sapo_env import tasks
from sapo_env.scoring import safe_scorers
from sapo_env.tasks import dataset_for, reference_answer, resolve

FILLER = "Let me think about this step by step, checking each part of the question. " * 4
SECTION = "## Env step"


def canned_actions(observations: dict) -> dict:
    """~300-character completions, every other one with the right answer."""
    actions = {}
    for agent, observation in observations.items():
        completions = []
        for question in observation["questions"]:
            answer = reference_answer(resolve(question["ref"]))
            completions.append(tuple(
                FILLER + f"<answer>{answer if i % 2 == 0 else 'no idea'}</answer>"
                for i in range(observation["completions_per_question"])))
        actions[agent] = {"completions": tuple(completions), "num_external": 4}
    return actions


def reasoning_gym_alone(observations: dict, actions: dict) -> float:
    """Seconds reasoning-gym, with its own scorers, takes to generate these questions and score
    these completions (our own canned text: safe to score with them)."""
    safe_scorers.restore()
    try:
        start = time.process_time()
        for agent, observation in observations.items():
            for question, completions in zip(observation["questions"],
                                             actions[agent]["completions"]):
                dataset = dataset_for(question["ref"])
                entry = dataset[question["ref"]["index"]]
                for completion in completions:
                    dataset.score_answer(extract_answer(completion), entry)
        return time.process_time() - start
    finally:
        safe_scorers.apply()


def timed_step(env, actions: dict, protections: bool) -> tuple[float, tuple]:
    """CPU seconds of one ``env.step``, and what it returned."""
    if not protections:
        safe_scorers.restore()
    try:
        start = time.process_time()
        out = env.step(actions)
        return time.process_time() - start, out
    finally:
        safe_scorers.apply()


def measure(n: int, rounds: int, seed: int = 0, protections: bool = True) -> dict:
    # without protections: no time limit, no answer size limit, reasoning-gym's own scorers
    unprotected = {} if protections else {"score_time_limit": None,
                                          "max_answer_chars": 16384}
    env = sapo_env.parallel_env(n=n, max_rounds=rounds + 2, **unprotected)
    tasks._entry.cache_clear()  # else a later run with the same seed skips generation
    observations, _ = env.reset(seed=seed)
    # warm caches (datasets, regexes) outside the timed rounds
    _, (observations, *_) = timed_step(env, canned_actions(observations), protections)
    step_times, floor_times = [], []
    for _ in range(rounds):
        actions = canned_actions(observations)
        # each timed section starts with no garbage left by the other (or by canned_actions),
        # so neither pays for the other's collections; GC stays on inside both
        gc.collect()
        floor_times.append(reasoning_gym_alone(observations, actions))
        gc.collect()
        seconds, (observations, *_) = timed_step(env, actions, protections)
        step_times.append(seconds)
    step, floor = statistics.median(step_times), statistics.median(floor_times)
    completions = sum(len(o["questions"]) * o["completions_per_question"]
                      for o in observations.values())
    return {"n": n, "protections": protections, "completions": completions,
            "step_ms": step * 1e3, "rg_ms": floor * 1e3, "ratio": step / floor,
            "per_node_ms": step * 1e3 / n}


def report(results: list[dict], rounds: int, load: tuple[float, float]) -> str:
    scaling = {r["n"]: r for r in results if r["protections"]}
    bare = {r["n"]: r for r in results if not r["protections"]}
    lines = [
        SECTION,
        "",
        f"`python benchmarks/env_step.py --rounds {rounds} --write` on "
        f"{datetime.date.today().isoformat()}, {machine()}, load average {load[0]:.1f} at the "
        f"start and {load[1]:.1f} at the end; median process CPU time over {rounds} "
        "rounds (a sixth of that at n=512), canned completions of ~300 characters, half right; "
        "the paper's protocol at 4/4 (each node answers 4 questions). Protections: the "
        "per-completion time and answer-size limits and the safe scorers (docs/environment.md, "
        "\"Untrusted text\"); \"off\": no time limit and reasoning-gym's own scorers.",
        "",
        "| n | protections | completions/round | env.step (ms) | reasoning-gym alone (ms) | "
        "step / rg | per node (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['n']} | {'on' if r['protections'] else 'off'} | {r['completions']} "
                     f"| {r['step_ms']:.1f} | {r['rg_ms']:.1f} | {r['ratio']:.2f} | "
                     f"{r['per_node_ms']:.2f} |")
    findings = []
    if 8 in scaling:
        findings.append(f"Paper defaults (n=8): a step with the protections on costs "
                        f"{scaling[8]['ratio']:.2f}x reasoning-gym's own work (goal <= 1.3x).")
    if 8 in scaling and 8 in bare:
        cost = scaling[8]["step_ms"] - bare[8]["step_ms"]
        findings.append(f"The protections change a round at n=8 by {cost:+.1f} ms "
                        f"({cost * 1e3 / scaling[8]['completions']:+.1f} us per completion; "
                        f"{bare[8]['ratio']:.2f}x reasoning-gym without them).")
    if 64 in scaling and 512 in scaling:
        flat = scaling[512]["step_ms"] / scaling[64]["step_ms"]
        rg_flat = scaling[512]["rg_ms"] / scaling[64]["rg_ms"]
        findings.append(f"Scaling: t(512)/t(64) = {flat:.2f} (goal <= 9; 8 would be exactly "
                        f"linear; reasoning-gym alone: {rg_flat:.2f}).")
    if findings:
        lines += ["", " ".join(findings)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args(argv)
    results = []
    start_load = os.getloadavg()[0]
    # at n=8 also without the protections, right after, in the same conditions
    runs = [(n, on) for n in args.sizes for on in ((True, False) if n == 8 else (True,))]
    for n, protections in runs:
        rounds = args.rounds if n <= 64 else max(3, args.rounds // 6)
        with contextlib.redirect_stdout(io.StringIO()):  # bf's generator prints dots
            results.append(measure(n, rounds, protections=protections))
        print(results[-1], file=sys.stderr)
    section = report(results, args.rounds, (start_load, os.getloadavg()[0]))
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
