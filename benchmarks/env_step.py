"""Benchmark: the env's step, against reasoning-gym's own work for the same round, n = 8 to 4,096.

Run by hand (not a test):  python benchmarks/env_step.py [--rounds 20] [--sizes 8 64 512 4096]
[--write]

Per swarm size, with canned completions of ~300 characters (half carrying the right answer) under
the paper's protocol at 4/4 (each node answers 4 questions), default settings (the protections
against untrusted text on), in one process, alternating round by round (and which goes first):
- ``env.step`` followed by one full read of every observation and info it returned (every
  key, string, number and array element: an observation that defers work pays for it here;
  the pool, whose groups every node's view shares, is read whole in two views, see
  ``read_observations``), and the same read of a plain copy of the same data, so that the
  env's cost (step + read - plain read) counts what its observations defer and not the
  reader's own work;
- reasoning-gym alone, its own scorers, generating the same questions and extracting and
  scoring the same completions: the floor any env must pay.

Times are the CPU time of this process (``time.process_time``), with wall time beside it: on a
shared machine other processes would otherwise decide the numbers. The garbage collector keeps
Python's defaults and no collection is forced before a timed section; the time of every pass
(``gc.callbacks``) is charged to the env, also a pass that reasoning-gym's allocations set off
(it goes over the env's long-lived state as much as over anything). At n = 8 the step also
runs without the protections (no time limit, reasoning-gym's own scorers), right after, to
show what they cost.

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
from collections.abc import Sequence

import numpy as np
from benchmarks_md import add_write_flag, machine, publish
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


def read_everything(value) -> int:
    """Reads every key, string, number and array element of plain data; returns a count."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(read_everything(k) + read_everything(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(map(read_everything, value))
    if isinstance(value, np.ndarray):
        return int(value.size) + bool(np.isnan(value.sum()))
    if isinstance(value, (int, float)) or value is None:
        return 1
    if isinstance(value, Sequence):  # a view of the pool
        return sum(map(read_everything, value))
    return 1


def read_observations(observations: dict) -> int:
    """Reads every observation whole, except the pool: every node's view of it shares its
    groups, so it is read whole in two nodes' views (which together hold every pooled group)
    and by its length in the others (reading n views of an n-node pool whole would make the
    reader, not the env, grow as n squared)."""
    count = 0
    for i, observation in enumerate(observations.values()):
        count += read_everything({k: v for k, v in observation.items() if k != "pool"})
        pool = observation["pool"]
        count += read_everything(pool) if i < 2 else len(pool)
    return count


def plain(value, memo: dict):
    """A plain copy (dicts, tuples, array copies) of what the env returned, each shared object
    copied once: what the same read costs on data that defers nothing."""
    key = id(value)
    if key not in memo:
        if isinstance(value, dict):
            memo[key] = {k: plain(v, memo) for k, v in value.items()}
        elif isinstance(value, (list, tuple, Sequence)) and not isinstance(value, str):
            memo[key] = tuple(plain(v, memo) for v in value)
        elif isinstance(value, np.ndarray):
            memo[key] = value.copy()
        else:
            memo[key] = value
    return memo[key]


def plain_observations(observations: dict) -> dict:
    """``observations`` as plain data, as far as :func:`read_observations` reads them."""
    memo: dict = {}
    return {a: {k: plain(v, memo) if k != "pool" or i < 2 else v for k, v in o.items()}
            for i, (a, o) in enumerate(observations.items())}


class Collections:
    """CPU seconds spent in the garbage collector's passes so far (``gc.callbacks``), and in
    its full passes (the oldest generation: every tracked object of the process)."""

    def __init__(self) -> None:
        self.seconds, self.full_seconds, self._start = 0.0, 0.0, 0.0
        self.full_count = 0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start
            if info["generation"] == 2:
                self.full_seconds += time.process_time() - self._start
                self.full_count += 1


COLLECTIONS = Collections()


def clock() -> tuple[float, ...]:
    return (time.process_time(), time.perf_counter(), COLLECTIONS.seconds,
            COLLECTIONS.full_seconds, COLLECTIONS.full_count)


def since(start: tuple[float, ...]) -> tuple[float, ...]:
    """CPU, wall, garbage-collection and full-pass seconds, and full passes, since ``start``."""
    return tuple(now - then for now, then in zip(clock(), start))


def reasoning_gym_alone(observations: dict, actions: dict) -> tuple[float, ...]:
    """CPU, wall, collection and full-pass seconds (and full passes) reasoning-gym, with its
    own scorers, takes to generate these questions and score these completions (our own canned
    text: safe to score with them)."""
    safe_scorers.restore()
    try:
        start = clock()
        for agent, observation in observations.items():
            for question, completions in zip(observation["questions"],
                                             actions[agent]["completions"]):
                dataset = dataset_for(question["ref"])
                entry = tasks.generate(dataset, question["ref"]["index"])
                for completion in completions:
                    dataset.score_answer(extract_answer(completion), entry)
        return since(start)
    finally:
        safe_scorers.apply()


def timed_step(env, actions: dict, protections: bool) -> tuple[dict, tuple]:
    """CPU and wall seconds of one ``env.step`` and of one full read of what it returned, and
    the CPU seconds of the same read of a plain copy of it; and what the step returned."""
    if not protections:
        safe_scorers.restore()
    try:
        start = clock()
        out = env.step(actions)
        step = since(start)
        read_observations(out[0]), read_everything(out[4])
        cpu, wall, collections, full, full_count = since(start)
        copies = plain_observations(out[0]), plain(out[4], {})
        gc.disable()  # the reader's own work, without the passes its allocations would set off
        try:
            plain_start = time.process_time()
            read_observations(copies[0]), read_everything(copies[1])
            plain_read = time.process_time() - plain_start
        finally:
            gc.enable()
        return {"step": step[0], "cpu": cpu, "wall": wall, "gc": collections, "full": full,
                "full_count": full_count,
                "plain_read": plain_read}, out
    finally:
        safe_scorers.apply()


def measure(n: int, rounds: int, seed: int = 0, protections: bool = True) -> dict:
    # without protections: no time limit, no answer size limit, reasoning-gym's own scorers
    unprotected = {} if protections else {"score_time_limit": None,
                                          "max_answer_chars": 16384}
    load = os.getloadavg()[0]
    env = sapo_env.parallel_env(n=n, max_rounds=rounds + 2, **unprotected)
    tasks.cached_entry.cache_clear()  # else a later run with the same seed skips generation
    observations, _ = env.reset(seed=seed)
    # warm caches (datasets, regexes) outside the timed rounds
    _, (observations, *_) = timed_step(env, canned_actions(observations), protections)
    steps, floors = [], []
    for i in range(rounds):
        actions = canned_actions(observations)
        if i % 2:
            floors.append(reasoning_gym_alone(observations, actions))
        times, (next_observations, *_) = timed_step(env, actions, protections)
        steps.append(times)
        if not i % 2:
            floors.append(reasoning_gym_alone(observations, actions))
        observations = next_observations
    completions = sum(len(o["questions"]) * o["completions_per_question"]
                      for o in observations.values())
    env.close()
    median = statistics.median
    # The env's cost: its step, what reading its observations costs beyond plain data, and
    # every collection pass, also those that reasoning-gym's allocations set off (a pass goes
    # over the env's long-lived state: a run without reasoning-gym alone would pay it too).
    own = [s["cpu"] - s["plain_read"] + f[2] for s, f in zip(steps, floors)]
    floor = [f[0] - f[2] for f in floors]
    rg = sum(floor)
    ratios = [o / f for o, f in zip(own, floor)]
    return {"n": n, "protections": protections, "rounds": rounds, "completions": completions,
            "step_ms": median(s["step"] for s in steps) * 1e3,
            "read_ms": median(s["cpu"] - s["step"] for s in steps) * 1e3,
            "plain_read_ms": median(s["plain_read"] for s in steps) * 1e3,
            "env_ms": median(own) * 1e3, "rg_ms": median(floor) * 1e3,
            "gc_env_ms": median(s["gc"] for s in steps) * 1e3,
            "gc_rg_ms": median(f[2] for f in floors) * 1e3,
            "wall_ms": median(s["wall"] for s in steps) * 1e3,
            "rg_wall_ms": median(f[1] for f in floors) * 1e3,
            "ratio": sum(own) / rg, "ratio_min": min(ratios), "ratio_max": max(ratios),
            "raw_ratio": sum(s["cpu"] + f[2] for s, f in zip(steps, floors)) / rg,
            # full passes go over every object of the process, most of them the imported
            # modules', at a rate set by what survives each round: the ratio without them
            "full_ms": sum(s["full"] + f[3] for s, f in zip(steps, floors)) * 1e3,
            "full_count": sum(s["full_count"] + f[4] for s, f in zip(steps, floors)),
            "ratio_no_full": sum(o - s["full"] - f[3] for o, s, f in zip(own, steps, floors))
            / rg,
            "load": (load, os.getloadavg()[0])}


def report(results: list[dict], load: tuple[float, float], command: str) -> str:
    scaling = {r["n"]: r for r in results if r["protections"]}
    bare = {r["n"]: r for r in results if not r["protections"]}
    lines = [
        SECTION,
        "",
        f"`{command}` on {datetime.date.today().isoformat()}, {machine()}, load average "
        f"{load[0]:.1f} at the start and {load[1]:.1f} at the end (above the core count: "
        "other work shared the cores). Process CPU time, medians over the rounds (wall time "
        "beside it); canned completions of ~300 characters, half right; the paper's protocol "
        "at 4/4 (each node answers 4 questions); default settings; the garbage collector at "
        "Python's defaults, no collection forced; the env and reasoning-gym alone (its own "
        "generation and scoring of the same questions and completions) alternate round by "
        "round in one process.",
        "",
        "- **step**: `env.step`; **read**: then one full read of every observation and info "
        "it returned (every key, string, number and array element; the pool, whose groups "
        "every node's view shares, whole in two views and by its length in the others); "
        "**plain read**: the same read of a plain copy of the same data (what reading costs "
        "when nothing is deferred);",
        "- **gc**: CPU time in the garbage collector's passes (`gc.callbacks`) during the step "
        "and read / during reasoning-gym alone (medians); every pass is charged to the env (a "
        "pass goes over the env's long-lived state, whichever allocation sets it off); **full "
        "passes**: the passes over every object of the process (most of them the imported "
        "modules'), how many and their total time over the rounds, and the ratio without "
        "them (a full pass comes when enough objects have outlived two younger passes: where "
        "a round leaves few behind, once in many rounds, so small swarms run more rounds);",
        "- **env** = step + read - plain read + the passes during reasoning-gym alone: the "
        "step and whatever its observations defer to their reading; **reasoning-gym** = its "
        "time less its passes; **env / rg** = total env over total reasoning-gym alone "
        "(range over the rounds); **(step + read) / rg** counts the reader's own work too.",
        "",
        "| n | protections | rounds | completions | step (ms) | read (ms) | plain read (ms) | "
        "gc: env / rg (ms) | env (ms) | reasoning-gym (ms) | env / rg (range) | (step + read) "
        "/ rg | full passes (count, ms: all rounds) | env / rg without them | env wall (ms) | "
        "rg wall (ms) | load |",
        "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['n']} | {'on' if r['protections'] else 'off'} | {r['rounds']} | "
            f"{r['completions']} | {r['step_ms']:.1f} | {r['read_ms']:.1f} | "
            f"{r['plain_read_ms']:.1f} | {r['gc_env_ms']:.1f} / {r['gc_rg_ms']:.1f} | "
            f"{r['env_ms']:.1f} | {r['rg_ms']:.1f} | "
            f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
            f"{r['raw_ratio']:.2f} | {r['full_count']}, {r['full_ms']:.0f} | "
            f"{r['ratio_no_full']:.2f} | "
            f"{r['wall_ms']:.1f} | {r['rg_wall_ms']:.1f} | "
            f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    findings = []
    for n in sorted(scaling):
        goal = 1.3 if n == 8 else 1.2
        met = "met" if scaling[n]["ratio"] <= goal else "missed"
        findings.append(f"n={n}: env {scaling[n]['ratio']:.2f}x reasoning-gym (goal <= "
                        f"{goal}x: {met}).")
    if 8 in scaling and 8 in bare:
        cost = scaling[8]["env_ms"] - bare[8]["env_ms"]
        findings.append(f"The protections change a round at n=8 by {cost:+.1f} ms "
                        f"({bare[8]['ratio']:.2f}x reasoning-gym without them).")
    for small, big, goal in ((64, 512, 9), (512, 4096, 8.5)):
        if small in scaling and big in scaling:
            flat = scaling[big]["env_ms"] / scaling[small]["env_ms"]
            rg_flat = scaling[big]["rg_ms"] / scaling[small]["rg_ms"]
            findings.append(f"t({big})/t({small}) = {flat:.2f} (goal <= {goal}; 8 is exactly "
                            f"linear; reasoning-gym alone: {rg_flat:.2f}).")
    if findings:
        lines += ["", " ".join(findings)]
    return "\n".join(lines) + "\n"


def rounds_for(n: int, rounds: int) -> int:
    """Timed rounds for a swarm of ``n``: ``rounds`` at n = 512, 30x as many at n <= 8 and 5x
    at n <= 64, a sixth at 4,096 (a round takes seconds), at least 3. The collector's full
    passes, charged to the env, come once in many rounds where a round leaves few objects
    behind (BENCHMARKS.md counts them): a ratio holds their average cost only over rounds that
    hold several."""
    if n <= 64:
        return rounds * (30 if n <= 8 else 5)
    return max(3, rounds if n <= 512 else rounds // 6)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 512, 4096])
    add_write_flag(parser)
    args = parser.parse_args(argv)
    results = []
    start_load = os.getloadavg()[0]
    # at n=8 also without the protections, right after, in the same conditions
    runs = [(n, on) for n in args.sizes for on in ((True, False) if n == 8 else (True,))]
    for n, protections in runs:
        with contextlib.redirect_stdout(io.StringIO()):  # bf's generator prints dots
            results.append(measure(n, rounds_for(n, args.rounds), protections=protections))
        print(results[-1], file=sys.stderr)
    command = "python benchmarks/env_step.py " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    section = report(results, (start_load, os.getloadavg()[0]), command.strip())
    publish(section, args.write)


if __name__ == "__main__":
    main()
