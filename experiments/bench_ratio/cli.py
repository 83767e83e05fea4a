"""``sapo-env bench-ratio`` on the command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from experiments import learners, ray_runs
from experiments.bench_ratio.config import (
    DEFAULT_POLICIES,
    FULL,
    POLICIES,
    QUICK,
    SETTINGS,
    BenchConfig,
)
from experiments.bench_ratio.sweep import BenchResult, bench
from experiments.console import print_result


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    d = BenchConfig()
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test of under a minute: {QUICK['rounds']} rounds, "
                             f"{QUICK['seeds']} seeds")
    parser.add_argument("--policies", nargs="+", default=None, metavar="LABEL",
                        help="policies to evaluate (default: " + " ".join(DEFAULT_POLICIES)
                             + "); built in: " + " ".join(POLICIES) + "; all: every built-in "
                             "one; fixed-J for any J in [0, 8]")
    parser.add_argument("--policy", action="append", default=[], metavar="MODULE:NAME",
                        help="your own policy, added to the others (repeatable): a class or "
                             "function at the top level of an importable module (one in the "
                             "current folder works), called as NAME(node, seed), returning a "
                             "sapo_env.RatioPolicy")
    parser.add_argument("--learner", default="sim", metavar="sim|tiny|MODULE:FACTORY",
                        help="who plays the nodes: simulated learners (default), tiny "
                             "transformer specialists trained by GRPO (real learners, slower: "
                             "see docs/tiny-reproduce), or an agent factory's import path")
    parser.add_argument("--settings", nargs="+", default=None, choices=SETTINGS,
                        help="all: every node uses the policy; focal: node_0 among J=4 nodes; "
                             "mixed: half the nodes among J=0,2,6,8 nodes (default: all three)")
    parser.add_argument("--sb3-model", default=None, metavar="PATH",
                        help="a trained stable-baselines3 model (examples/train_meta_agent.py "
                             "saves one): adds the 'ppo' policy")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per policy and setting (default {FULL['seeds']})")
    parser.add_argument("--base-seed", type=int, default=d.base_seed, help="root seed")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds per run (default {FULL['rounds']})")
    parser.add_argument("--nodes", type=int, default=d.n_agents, help="nodes per swarm")
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
             "learner": {"sim": learners.simulated_learners, "tiny": learners.TinyLearners()}.get(
                 args.learner) or learners.load(args.learner)}
    if args.policy and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: my_policy.py here imports
    policies = tuple(args.policies or ()) + tuple(args.policy)
    if args.policy and not args.policies:
        policies = DEFAULT_POLICIES + policies
    optional = {"policies": policies or None,
                "settings": tuple(args.settings) if args.settings else None,
                "seeds": args.seeds, "rounds": args.rounds, "out": args.out}
    return BenchConfig(**given, **{k: v for k, v in optional.items() if v is not None})


def run_from_args(args: argparse.Namespace) -> BenchResult:
    try:
        config = config_from_args(args)
    except ValueError as error:
        raise SystemExit(f"sapo-env bench-ratio: {error}") from None
    result = bench(config)
    print_result(result, config.out)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = add_arguments(argparse.ArgumentParser(
        prog="sapo-env bench-ratio",
        description="Evaluate I:J ratio policies with simulated learners on held-out seeds."))
    logging.basicConfig(level=logging.WARNING)
    run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    main()
