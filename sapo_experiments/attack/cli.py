"""``sapo-env attack`` on the command line."""

from __future__ import annotations

import argparse

from sapo_experiments import sweep_cli
from sapo_experiments.attack.config import ALL_ATTACKS, ATTACKS, FULL, QUICK, AttackConfig
from sapo_experiments.attack.sweep import attack


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test (15 s wall, 28 s CPU with --jobs 2 on 2 idle cores): "
                             f"{QUICK['rounds']} rounds, {QUICK['seeds']} seeds, 30%% "
                             "adversaries, no ablation")
    named_only = [a for a in ALL_ATTACKS if a not in ATTACKS]
    parser.add_argument("--attacks", nargs="+", default=None, choices=list(ALL_ATTACKS),
                        help="attacks to run (default: all"
                             + (f" but {' '.join(named_only)}" if named_only else "") + ")")
    parser.add_argument("--fractions", nargs="+", type=float, default=None, metavar="F",
                        help="fractions of adversarial nodes (default: "
                             + " ".join(map(str, FULL["fractions"])) + ")")
    parser.add_argument("--no-ablation", action="store_true",
                        help="skip the single-defense runs")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per cell (default {FULL['seeds']})")
    sweep_cli.add_size_options(parser, rounds_help=f"rounds per run (default {FULL['rounds']})",
                               nodes=AttackConfig.n_agents)
    sweep_cli.add_process_options(
        parser, out_help=f"output folder (default {FULL['out']}, quick {QUICK['out']})")
    sweep_cli.add_switches(parser, plots_help="write no figure")
    return parser


def config_from_args(args: argparse.Namespace) -> AttackConfig:
    return AttackConfig(
        **sweep_cli.sweep_fields(args), n_agents=args.nodes,
        fractions=tuple(args.fractions) if args.fractions else None,
        ablation=False if args.no_ablation else None,
        **({"attacks": tuple(args.attacks)} if args.attacks else {}))


HELP = (f"hostile nodes ({len(ATTACKS)} attacks: forged, slow, replayed, flooded, sybil, "
        "held-out, absurd-round, malformed, impersonating and framing packets, spam, garbage, "
        "wrong answers, free riders, poison, answers slow to score, remote nodes' junk) against "
        "the defenses, with simulated learners: a table and a figure (sapo_experiments.attack)")
DESCRIPTION = "Hostile nodes against simulated learners, with and without defenses."
COMMAND = sweep_cli.SweepCommand(
    "attack", HELP, DESCRIPTION, add_arguments, config_from_args, attack)
# the names tests and ``python -m sapo_experiments.attack.cli`` call
build_parser, run_from_args, main = COMMAND.build_parser, COMMAND.run_from_args, COMMAND.main


if __name__ == "__main__":
    main()
