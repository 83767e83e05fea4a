"""What a run of ``sapo-env bench-ratio --track real`` costs on this machine: a few rounds of
seed 0 of each policy given, in this process on one torch thread, then extrapolated.

Each policy plays ``--rounds`` rounds twice from seed 0's base (trained first if not cached):
without held-out evaluation (the rounds' cost), and with the track's evaluation of
``--held-out-questions`` before round 0 and after the last round (two evaluations: their cost
is the difference). A full run is ``REAL_FULL['rounds']`` rounds and five evaluations (before
round 0 and every 50 rounds) after building its nodes (``setup_cpu``: loading the base, the
batched swarm). CPU seconds are this process's (``time.process_time``), beside
the wall seconds and the load average, which a busy machine inflates. ::

    python records/bench-ratio-real/measure_cost.py --rounds 10 --policies fixed-0 fixed-4 fixed-6
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from sapo_experiments.bench_ratio.config import BenchConfig, RunSpec
from sapo_experiments.bench_ratio.sweep import compute
from sapo_experiments.bench_ratio.tracks import REAL_FULL


def measure(policy: str, rounds: int, questions: int, out: str) -> dict[str, float]:
    config = BenchConfig(track="real", rounds=rounds, seeds=1, held_out_questions=questions,
                         tuned=None, out=out, progress=False, plots=False)
    config.prepare(1)
    started, cpu = time.perf_counter(), time.process_time()
    run = compute(RunSpec(policy, "all", 0, config))
    total = time.process_time() - cpu
    return {"cpu": run.meta["cpu_seconds"], "wall": run.meta["seconds"],
            "setup_cpu": total - run.meta["cpu_seconds"],
            "setup_wall": time.perf_counter() - started - run.meta["seconds"],
            "act_learn_cpu": float(np.nansum(run.arrays["act_cpu_seconds"])
                                   + np.nansum(run.arrays["learn_cpu_seconds"]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--policies", nargs="+", default=["fixed-0", "fixed-4", "fixed-6"])
    parser.add_argument("--held-out-questions", type=int,
                        default=REAL_FULL["held_out_questions"])
    args = parser.parse_args()
    full_rounds = REAL_FULL["rounds"]
    evaluations = 1 + full_rounds // REAL_FULL["held_out_every"]
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for policy in args.policies:
            plain = measure(policy, args.rounds, 0, folder)
            evaluated = measure(policy, args.rounds, args.held_out_questions, folder)
            per_round = plain["cpu"] / args.rounds
            per_evaluation = max(evaluated["cpu"] - plain["cpu"], 0.0) / 2
            out[policy] = {
                "cpu_per_round": round(per_round, 3),
                "wall_per_round": round(plain["wall"] / args.rounds, 3),
                "act_learn_cpu_per_round": round(plain["act_learn_cpu"] / args.rounds, 3),
                "cpu_per_evaluation": round(per_evaluation, 2),
                "setup_cpu": round(plain["setup_cpu"], 2),
                "full_run_cpu": round(plain["setup_cpu"] + per_round * full_rounds
                                      + per_evaluation * evaluations, 1)}
    print(json.dumps({"rounds_measured": args.rounds, "load_average": os.getloadavg(),
                      "cpus": os.cpu_count(), "policies": out}, indent=1))


if __name__ == "__main__":
    main()
