"""The ``sapo-env`` command line.

    sapo-env demo [--rounds N] [--seed S] [--render]   a small swarm of scripted nodes
    sapo-env info                                       the paper-default configuration and
                                                        the two question protocols
    sapo-env reproduce [--quick] [--seeds S] [--jobs J] the paper's table and figures
    sapo-env bench-ratio [--quick] [--sb3-model PATH]   adaptive I:J policies vs fixed ratios
    sapo-env attack [--quick] [--attacks A ...]         hostile nodes vs defenses (simulated)
    sapo-env format-propagation [--quick] [--seeds S]   does the <answer> format spread among
                                                        SmolLM2 LoRA nodes? (CPU, hours)
    sapo-env warm-start [--tasks T ...] [--target A]    train a tiny model on reasoning-gym
                                                        tasks, cached (CPU, minutes)
    sapo-env --version

Each subcommand is a function taking the parsed arguments; add one by registering it in
``build_parser`` (a sweep: its ``SweepCommand``, ``sapo_experiments.sweep_cli``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import sapo_env

# The status a shell reports for a process killed by SIGPIPE (128 + 13), as for `yes` in
# `yes | head -1`: so `set -o pipefail` scripts see the same thing for us as for other tools.
EXIT_BROKEN_PIPE = 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sapo-env", description="SAPO swarms as a PettingZoo environment.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--version", action="version", version=f"sapo-env {sapo_env.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="the quickstart (sapo_experiments/demo.py): scripted "
                                            "nodes, a few rounds, a per-node reward table")
    demo.add_argument("--rounds", type=int, default=5)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--render", action="store_true")
    demo.set_defaults(handler=run_demo)

    info = commands.add_parser("info", help="print the paper-default SwarmConfig")
    info.set_defaults(handler=run_info)

    from sapo_experiments.attack.cli import COMMAND as attack
    from sapo_experiments.bench_ratio.cli import COMMAND as bench_ratio
    from sapo_experiments.format_propagation.cli import COMMAND as format_propagation
    from sapo_experiments.reproduce.cli import COMMAND as reproduce

    for sweep in (reproduce, bench_ratio, attack, format_propagation):
        sweep.register(commands)  # a sapo_experiments.sweep_cli.SweepCommand each

    from sapo_experiments import warm_start_cli

    warm_parser = commands.add_parser(
        "warm-start", help="a tiny model (agents.tiny) trained by supervised next-token loss "
                           "on reasoning-gym tasks until a target accuracy, cached on disk: a "
                           "specialist node for a swarm (sapo_experiments.warm_start_cli)")
    warm_start_cli.add_arguments(warm_parser)
    warm_parser.set_defaults(handler=warm_start_cli.run_from_args)
    for subcommand in commands.choices.values():  # for main's errors: see there
        subcommand.set_defaults(subcommand_parser=subcommand)
    return parser


def run_demo(args: argparse.Namespace) -> None:
    from sapo_experiments import demo

    demo.main(["--rounds", str(args.rounds), "--seed", str(args.seed),
               *(["--render"] if args.render else [])])


def run_info(args: argparse.Namespace) -> None:
    from sapo_env.config import SwarmConfig

    defaults = SwarmConfig()
    for name, value in defaults.summary().items():
        print(f"{name:26s} {value!r}")
    J = defaults.initial_num_external("node_0")
    print(f"""
Protocols (questions_per_round):
  None (default, the paper's): a node with J external groups in force answers
      I = train_budget - J questions itself, so J trades its own generation against the pool's
      supply (at n=8 the pool holds 7 x I groups a round). J = train_budget answers nothing.
  an int B (fixed): every node answers B questions whatever its J and trains on I of them.
J (num_external): the action sets a node's J for its next round; round 0's comes from
  num_external (None: train_budget // 2 = {J}, the paper's best configuration
  {defaults.train_budget - J}/{J}).""")


def main(argv: Sequence[str] | None = None) -> None:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # argparse would answer with the top-level usage; the subcommand's says more
        args.subcommand_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        try:
            args.handler(args)
        except (ValueError, ImportError) as error:
            # Bad input and missing extras are one line (--verbose shows the traceback).
            if args.verbose:
                raise
            hint = (" (a dependency of this command is missing: `make test` installs them "
                    "all, or pip install 'sapo-env[lm,plot,meta,ray]')"
                    if isinstance(error, ImportError) else "")
            print(f"sapo-env {args.command}: error: {error}{hint}", file=sys.stderr)
            sys.exit(2)
        # Flush here so that a reader which closed early (`sapo-env info | head -1`) is
        # noticed inside this try, not in the interpreter's final flush.
        sys.stdout.flush()
    except BrokenPipeError:
        # https://docs.python.org/3/library/signal.html#note-on-sigpipe: point stdout at
        # devnull, or the flush at exit raises again, and leave quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)


if __name__ == "__main__":
    main()
