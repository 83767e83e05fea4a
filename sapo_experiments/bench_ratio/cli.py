"""``sapo-env bench-ratio`` on the command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from sapo_experiments import learners, ray_runs
from sapo_experiments.bench_ratio.config import (
    BENCH_LEARNER,
    DEFAULT_SCENARIOS,
    FULL,
    QUICK,
    TUNED_FILE,
    BenchConfig,
)
from sapo_experiments.bench_ratio.policies import DEFAULT_POLICIES, POLICIES
from sapo_experiments.bench_ratio.scenarios import SCENARIOS
from sapo_experiments.bench_ratio.sweep import BenchResult, bench
from sapo_experiments.bench_ratio.tuning import tune
from sapo_experiments.console import print_result


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test: {QUICK['rounds']} rounds, {QUICK['seeds']} seeds")
    parser.add_argument("--policies", nargs="+", default=None, metavar="LABEL",
                        help="policies to evaluate (default: " + " ".join(DEFAULT_POLICIES)
                             + "); built in: " + " ".join(POLICIES) + "; all: every built-in "
                             "one; fixed-J for any J in [0, 8]; schedule-J1,J2,... (equal "
                             "phases); each scenario's best fixed ratio and oracle are added")
    parser.add_argument("--policy", action="append", default=[], metavar="MODULE:NAME",
                        help="your own policy, added to the others (repeatable): a class or "
                             "function at the top level of an importable module (one in the "
                             "current folder works), called as NAME(node, seed), returning a "
                             "sapo_env.runtime.RatioPolicy")
    parser.add_argument("--scenarios", nargs="+", default=None, choices=list(SCENARIOS),
                        metavar="NAME", help="scenarios to play (default: "
                        + " ".join(DEFAULT_SCENARIOS) + "; see docs/ratio-policies.md)")
    parser.add_argument("--learner", default="sim", metavar="sim|tiny|MODULE:FACTORY",
                        help="who plays the nodes: simulated learners past the Aha (default), "
                             "tiny transformer specialists trained by GRPO (real learners, "
                             "slower: see docs/tiny-reproduce), or an agent factory's import "
                             "path (sapo_experiments.learners:simulated_learners: the calibrated "
                             "simulated learner)")
    parser.add_argument("--sb3-model", default=None, metavar="PATH",
                        help="a trained stable-baselines3 model (examples/train_meta_agent.py "
                             "saves one): adds the 'ppo' policy")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"held-out seeds per policy and scenario (default {FULL['seeds']})")
    parser.add_argument("--tune-seeds", type=int, default=None,
                        help=f"training seeds of --tune (default {FULL['tune_seeds']})")
    parser.add_argument("--base-seed", type=int, default=0, help="root seed")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds per run (default {FULL['rounds']})")
    parser.add_argument("--nodes", type=int, default=8, help="nodes per swarm")
    parser.add_argument("--tune", action="store_true",
                        help="instead of the benchmark: on the training seeds, find each "
                             "scenario's best fixed ratio and oracle schedule and tune the "
                             "built-in policies, and write them into the tuning file (all 8 "
                             "scenarios: about 46 minutes here)")
    parser.add_argument("--tuned", default=str(TUNED_FILE), metavar="PATH",
                        help="the tuning file (default: the committed one); 'none': no "
                             "tuning (defaults, no oracle)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="parallel processes (default: one per CPU core; not with "
                             "--ray-address)")
    ray_runs.add_arguments(parser)
    parser.add_argument("--out", default=None,
                        help="output folder (default out/bench-ratio, quick "
                             "out/bench-ratio-quick)")
    parser.add_argument("--no-resume", action="store_true",
                        help="rerun every run even if a finished one is in OUT/runs")
    parser.add_argument("--no-plots", action="store_true", help="write no figure")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    given = {"sb3_model": args.sb3_model, "base_seed": args.base_seed, "n_agents": args.nodes,
             "jobs": args.jobs, "quick": args.quick, "resume": not args.no_resume,
             "plots": not args.no_plots, "progress": not args.no_progress,
             "ray": ray_runs.options_from_args(args),
             "tuned": None if args.tuned == "none" else args.tuned,
             "learner": {"sim": BENCH_LEARNER, "tiny": learners.TinyLearners()}.get(
                 args.learner) or learners.load(args.learner)}
    if args.policy and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: my_policy.py here imports
    policies = tuple(args.policies or ()) + tuple(args.policy)
    if args.policy and not args.policies:
        policies = DEFAULT_POLICIES + policies
    optional = {"policies": policies or None,
                "scenarios": tuple(args.scenarios) if args.scenarios else None,
                "seeds": args.seeds, "tune_seeds": args.tune_seeds, "rounds": args.rounds,
                "out": args.out}
    return BenchConfig(**given, **{k: v for k, v in optional.items() if v is not None})


def run_from_args(args: argparse.Namespace) -> BenchResult | None:
    try:
        config = config_from_args(args)
    except ValueError as error:
        raise SystemExit(f"sapo-env bench-ratio: {error}") from None
    if args.tune:
        entry = tune(config)
        print(json.dumps({s: {k: v for k, v in e.items() if k != "search"}
                          for s, e in entry["scenarios"].items()}, indent=1))
        print(json.dumps({p: e["kwargs"] for p, e in entry["policies"].items()}))
        print(f"Wrote the tuning entry to {config.tuned} ({entry['wall_seconds']:.0f} s wall, "
              f"{entry['run_cpu_seconds']:.0f} s of runs' CPU)")
        return None
    result = bench(config)
    print_result(result, config.out)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = add_arguments(argparse.ArgumentParser(
        prog="sapo-env bench-ratio",
        description="Evaluate I:J ratio policies in scenarios with headroom, on held-out "
                    "seeds, against the best fixed ratio and an oracle schedule."))
    logging.basicConfig(level=logging.WARNING)
    run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    main()
