"""``sapo-env attack`` on the command line."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from sapo_experiments import ray_runs
from sapo_experiments.attack.config import ATTACKS, FULL, QUICK, AttackConfig
from sapo_experiments.attack.sweep import AttackResult, attack
from sapo_experiments.console import print_result


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    d = AttackConfig()
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test of a few seconds: {QUICK['rounds']} rounds, "
                             f"{QUICK['seeds']} seeds, 30%% adversaries, no ablation")
    parser.add_argument("--attacks", nargs="+", default=None, choices=ATTACKS,
                        help="attacks to run (default: all)")
    parser.add_argument("--fractions", nargs="+", type=float, default=None, metavar="F",
                        help="fractions of adversarial nodes (default: "
                             + " ".join(map(str, FULL["fractions"])) + ")")
    parser.add_argument("--no-ablation", action="store_true",
                        help="skip the single-defense runs")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per cell (default {FULL['seeds']})")
    parser.add_argument("--base-seed", type=int, default=d.base_seed, help="root seed")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds per run (default {FULL['rounds']})")
    parser.add_argument("--nodes", type=int, default=d.n_agents, help="nodes per swarm")
    parser.add_argument("--jobs", type=int, default=None,
                        help="parallel processes (default: one per CPU core; not with "
                             "--ray-address)")
    ray_runs.add_arguments(parser)
    parser.add_argument("--out", default=None,
                        help="output folder (default out/attack, quick out/attack-quick)")
    parser.add_argument("--no-resume", action="store_true",
                        help="rerun every run even if a finished one is in OUT/runs")
    parser.add_argument("--no-plots", action="store_true", help="write no figure")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def config_from_args(args: argparse.Namespace) -> AttackConfig:
    given = {"base_seed": args.base_seed, "n_agents": args.nodes, "jobs": args.jobs,
             "quick": args.quick, "resume": not args.no_resume, "plots": not args.no_plots,
             "progress": not args.no_progress, "ray": ray_runs.options_from_args(args)}
    optional = {"attacks": tuple(args.attacks) if args.attacks else None,
                "fractions": tuple(args.fractions) if args.fractions else None,
                "ablation": False if args.no_ablation else None,
                "seeds": args.seeds, "rounds": args.rounds, "out": args.out}
    return AttackConfig(**given, **{k: v for k, v in optional.items() if v is not None})


def run_from_args(args: argparse.Namespace) -> AttackResult:
    try:
        config = config_from_args(args)
    except ValueError as error:
        raise SystemExit(f"sapo-env attack: {error}") from None
    result = attack(config)
    print_result(result, config.out)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = add_arguments(argparse.ArgumentParser(
        prog="sapo-env attack",
        description="Hostile nodes against simulated learners, with and without defenses."))
    logging.basicConfig(level=logging.WARNING)
    run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    main()
