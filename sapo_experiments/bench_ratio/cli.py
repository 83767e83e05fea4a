"""``sapo-env bench-ratio`` on the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys

from sapo_experiments import learners, sweep_cli
from sapo_experiments.bench_ratio.config import (
    DEFAULT_SCENARIOS,
    FULL,
    QUICK,
    TUNED_FILE,
    BenchConfig,
)
from sapo_experiments.bench_ratio.policies import DEFAULT_POLICIES, POLICIES
from sapo_experiments.bench_ratio.scenarios import SCENARIOS
from sapo_experiments.bench_ratio.sweep import BenchResult, bench
from sapo_experiments.bench_ratio.tracks import REAL_FULL, REAL_LEARNER, REAL_QUICK, TRACKS
from sapo_experiments.bench_ratio.tuning import tune
from sapo_experiments.reproduce.cli import add_tiny_arguments, tiny_from_args


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--track", choices=list(TRACKS), default="sim",
                        help="the world the policies are ranked in: sim (default), simulated "
                             "learners, the world in which the paper's claim that sharing "
                             "pays holds by construction; real, tiny transformers trained by "
                             "GRPO from one common base at 0.10 accuracy with TIS (the "
                             "--tiny-* defaults), every node following the policy, the fixed "
                             "ratios 8/0 6/2 4/4 2/6, held-out accuracy evaluated: "
                             f"{REAL_FULL['seeds']} seeds x {REAL_FULL['rounds']} rounds, "
                             "about 8 CPU-hours for the whole track, 0.6 for one entry of "
                             "yours beside its committed runs (records/bench-ratio-real/)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test of the wiring, not a benchmark: {QUICK['rounds']} "
                             f"rounds x {QUICK['seeds']} seeds in "
                             + " and ".join(QUICK["scenarios"]) + ", too short to rank any "
                             "policy (its table says so; 16 s wall, 28 s CPU on an idle 2-core "
                             "machine). To rank your own policy in minutes, drop it and give "
                             "--policies fixed-4 --policy MODULE:NAME: yours and fixed-4 against "
                             "each default scenario's best fixed ratio and oracle, "
                             f"{FULL['seeds']} seeds x {FULL['rounds']} rounds (8.4 min of "
                             "CPU; 5.5 min wall on 2 cores at load 2-5). With --track real: "
                             "fixed-0 and fixed-4 (and yours, --policy) on "
                             f"{REAL_QUICK['seeds']} seeds x {REAL_QUICK['rounds']} rounds, "
                             "ranked on the three scores with their CIs (exploratory; about 8 "
                             "CPU-minutes)")
    parser.add_argument("--policies", nargs="+", default=None, metavar="LABEL",
                        help="policies to evaluate (default: " + " ".join(DEFAULT_POLICIES)
                             + "; real track: " + " ".join(TRACKS["real"].default_policies(False))
                             + "; real quick: " + " ".join(TRACKS["real"].default_policies(True))
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
    parser.add_argument("--learner", default=None, metavar="sim|tiny|MODULE:FACTORY",
                        help="who plays the nodes (default: the track's): simulated learners "
                             "past the Aha (the sim track's), tiny transformers trained by GRPO "
                             "as the --tiny-* options say (the real track's; real learners, "
                             "slower: see records/tiny-reproduce), or an agent factory's import "
                             "path (sapo_experiments.learners:simulated_learners: the calibrated "
                             "simulated learner)")
    add_tiny_arguments(parser, REAL_LEARNER)
    parser.add_argument("--sb3-model", default=None, metavar="PATH",
                        help="a trained stable-baselines3 model (examples/train_meta_agent.py "
                             "saves one): adds the 'ppo' policy")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"held-out seeds per policy and scenario (default {FULL['seeds']})")
    parser.add_argument("--tune-seeds", type=int, default=None,
                        help=f"training seeds of --tune (default {FULL['tune_seeds']})")
    sweep_cli.add_size_options(parser, rounds_help=f"rounds per run (default {FULL['rounds']})",
                               nodes=BenchConfig.n_agents)
    parser.add_argument("--tune", action="store_true",
                        help="instead of the benchmark: on the training seeds, find each "
                             "scenario's best fixed ratio and oracle schedule and tune the "
                             "built-in policies, and write them into the tuning file (all 8 "
                             "scenarios: 46 min wall, 101 min of its runs' CPU on an idle 2-core "
                             "machine)")
    parser.add_argument("--tuned", default=str(TUNED_FILE), metavar="PATH",
                        help="the tuning file (default: the committed one); 'none': no "
                             "tuning (defaults, no oracle)")
    sweep_cli.add_process_options(
        parser, out_help=f"output folder (default {FULL['out']}, quick {QUICK['out']})")
    sweep_cli.add_switches(parser, plots_help="write no figure")
    return parser


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    track = TRACKS[args.track]
    name = args.learner or ("tiny" if args.track == "real" else "sim")
    learner = (TRACKS["sim"].learner if name == "sim" else tiny_from_args(args)
               if name == "tiny" else learners.load(name))
    if args.policy and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: my_policy.py here imports
    policies = tuple(args.policies or ()) + tuple(args.policy)
    if args.policy and not args.policies:
        policies = track.default_policies(args.quick) + policies
    return BenchConfig(
        **sweep_cli.sweep_fields(args), track=args.track, sb3_model=args.sb3_model,
        n_agents=args.nodes, learner=learner,
        tuned=None if args.tuned == "none" else args.tuned,
        tune_seeds=args.tune_seeds,
        scenarios=tuple(args.scenarios) if args.scenarios else None,
        **({"policies": policies} if policies else {}))


class BenchCommand(sweep_cli.SweepCommand):
    """``sapo-env bench-ratio``, whose ``--tune`` runs the tuning instead of the benchmark."""

    def run_from_args(self, args: argparse.Namespace) -> BenchResult | None:
        if not args.tune:
            return super().run_from_args(args)
        config = self.config(args)
        entry = tune(config)
        print(json.dumps({s: {k: v for k, v in e.items() if k != "search"}
                          for s, e in entry["scenarios"].items()}, indent=1))
        print(json.dumps({p: e["kwargs"] for p, e in entry["policies"].items()}))
        print(f"Wrote the tuning entry to {config.tuned} ({entry['wall_seconds']:.0f} s wall, "
              f"{entry['run_cpu_seconds']:.0f} s of runs' CPU)")
        return None


HELP = ("adaptive I:J ratio policies against fixed ratios on held-out seeds: a table and a "
        "figure (sapo_experiments.bench_ratio)")
DESCRIPTION = ("Evaluate I:J ratio policies in scenarios with headroom, on held-out seeds, "
               "against the best fixed ratio and an oracle schedule.")
COMMAND = BenchCommand(
    "bench-ratio", HELP, DESCRIPTION, add_arguments, config_from_args, bench)
# the names tests and ``python -m sapo_experiments.bench_ratio.cli`` call
build_parser, run_from_args, main = COMMAND.build_parser, COMMAND.run_from_args, COMMAND.main


if __name__ == "__main__":
    main()
