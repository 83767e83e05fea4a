"""The ``sapo-env`` command line.

    sapo-env demo [--rounds N] [--seed S] [--render]   a small swarm of scripted nodes
    sapo-env info                                       the paper-default configuration
    sapo-env reproduce [--quick] [--seeds S] [--jobs J] the paper's table and figures

Each subcommand is a function taking the parsed arguments; add one by registering it in
``build_parser``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sapo-env", description="SAPO swarms as a PettingZoo environment.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run examples/quickstart.py: scripted nodes, a few "
                                            "rounds, a per-node reward table")
    demo.add_argument("--rounds", type=int, default=5)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--render", action="store_true")
    demo.set_defaults(handler=run_demo)

    info = commands.add_parser("info", help="print the paper-default SwarmConfig")
    info.set_defaults(handler=run_info)

    from sapo_env import reproduce

    reproduce_parser = commands.add_parser(
        "reproduce", help="the paper's configurations and two controls over several seeds: "
                          "a table, figures and TensorBoard runs (sapo_env.reproduce)")
    reproduce.add_arguments(reproduce_parser)
    reproduce_parser.set_defaults(handler=reproduce.run_from_args)
    return parser


def run_demo(args: argparse.Namespace) -> None:
    """Run examples/quickstart.py of the source checkout (examples are scripts, not modules)."""
    script = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"
    if not script.exists():
        raise SystemExit(f"sapo-env demo runs {script}, which is not there: the examples ship "
                         "with the source checkout, not with the wheel")
    argv = ["--rounds", str(args.rounds), "--seed", str(args.seed)]
    sys.argv = [str(script), *argv, *(["--render"] if args.render else [])]
    runpy.run_path(str(script), run_name="__main__")


def run_info(args: argparse.Namespace) -> None:
    from sapo_env.config import SwarmConfig

    defaults = SwarmConfig()
    for f in dataclasses.fields(defaults):
        value = getattr(defaults, f.name)
        if f.name == "tasks":
            value = ", ".join(t.name for t in value)
        print(f"{f.name:26s} {value!r}" if not isinstance(value, str) or "\n" not in value
              else f"{f.name:26s} {value.splitlines()[0]!r} ...")


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    args.handler(args)


if __name__ == "__main__":
    main()
