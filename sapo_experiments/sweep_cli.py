"""The command line every sweep shares (``sapo-env reproduce``, ``bench-ratio``, ``attack`` and
``format-propagation``): the options every sweep has, their reading into its config, and
``SweepCommand``, which runs the sweep and prints what it wrote.

A harness's ``cli`` module declares its options (``add_arguments``: its own, and the shared ones
through the helpers here where its ``--help`` lists them), reads them into its config
(``config_from_args``: ``sweep_fields(args)`` and its own) and makes its ``SweepCommand``;
``sapo_experiments.cli`` registers the commands, and ``python -m`` runs ``COMMAND.main``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sapo_env.extras import missing_extra
from sapo_experiments import ray_runs
from sapo_experiments.field_docs import field_help
from sapo_experiments.sweep import SweepConfig, SweepResult

JOBS_HELP = "parallel processes (default: one per CPU core; not with --ray-address)"
RESUME_HELP = "rerun every run even if a finished one is in OUT/runs"
LOGGERS = ("tensorboard", "wandb", "none")
"""What ``--logger`` takes: TensorBoard runs in ``OUT/tensorboard`` (the default), W&B runs
(``sapo_env.runtime.wandb_logger``: files in ``OUT/wandb``, sent wherever W&B's own settings
say, e.g. nowhere with ``WANDB_MODE=offline``), or none."""

logger = logging.getLogger(__name__)


def add_size_options(parser: argparse.ArgumentParser, rounds_help: str, nodes: int) -> None:
    """``--base-seed``, ``--rounds`` (``rounds_help`` says its presets) and ``--nodes``
    (default ``nodes``)."""
    parser.add_argument("--base-seed", type=int, default=0,
                        help=field_help(SweepConfig, "base_seed"))
    parser.add_argument("--rounds", type=int, default=None, help=rounds_help)
    parser.add_argument("--nodes", type=int, default=nodes, help="nodes per swarm")


def add_process_options(parser: argparse.ArgumentParser, out_help: str,
                        gpus: bool = False) -> None:
    """``--jobs``, the Ray options (``ray_runs.add_arguments``: ``--gpus-per-run`` with
    ``gpus``) and ``--out`` (``out_help`` says its presets)."""
    parser.add_argument("--jobs", type=int, default=None, help=JOBS_HELP)
    ray_runs.add_arguments(parser, gpus=gpus)
    parser.add_argument("--out", default=None, help=out_help)


def add_switches(parser: argparse.ArgumentParser, plots_help: str,
                 resume_help: str | None = RESUME_HELP, tensorboard: bool = False,
                 progress_help: str = "hide the progress bar") -> None:
    """``--no-resume`` (with ``resume_help``; None: the harness declares it, as reproduce does
    beside its checkpoints), ``--logger`` and ``--no-tensorboard`` (with ``tensorboard``: a
    harness that logs its runs; ``logger_fields`` reads them), ``--no-plots`` and
    ``--no-progress``."""
    if resume_help is not None:
        parser.add_argument("--no-resume", action="store_true", help=resume_help)
    if tensorboard:
        parser.add_argument("--logger", nargs="+", choices=LOGGERS, default=["tensorboard"],
                            help="where each run logs its metrics: tensorboard (OUT/tensorboard, "
                                 "the default), wandb (Weights & Biases, files in OUT/wandb; "
                                 "needs sapo-env[wandb]; WANDB_MODE=offline sends nothing), "
                                 "both (--logger tensorboard wandb) or none")
        parser.add_argument("--no-tensorboard", action="store_true",
                            help="write no TensorBoard runs (whatever --logger says)")
    parser.add_argument("--no-plots", action="store_true", help=plots_help)
    parser.add_argument("--no-progress", action="store_true", help=progress_help)


def sweep_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ``SweepConfig`` fields from the options every sweep command has: ``--quick``,
    ``--seeds``, ``--base-seed``, ``--rounds``, ``--jobs``, the Ray options, ``--out``,
    ``--no-resume``, ``--no-plots`` and ``--no-progress`` (one not given stays None, for the
    presets)."""
    return {"quick": args.quick, "seeds": args.seeds, "base_seed": args.base_seed,
            "rounds": args.rounds, "jobs": args.jobs, "ray": ray_runs.options_from_args(args),
            "out": args.out, "resume": not args.no_resume, "plots": not args.no_plots,
            "progress": not args.no_progress}


def logger_fields(args: argparse.Namespace) -> dict[str, bool]:
    """The config's ``tensorboard`` and ``wandb`` from ``--logger`` and ``--no-tensorboard``; a
    ``ValueError`` for ``none`` beside another logger. A logger asked for (TensorBoard is the
    default) whose package is not installed: one warning here, naming the extra, and no run
    tries it (its field False), so nothing repeats it run after run."""
    chosen = set(args.logger)
    if "none" in chosen and len(chosen) > 1:
        raise ValueError(f"--logger none cannot go with {sorted(chosen - {'none'})}: give "
                         "none alone, or the loggers to use")
    fields = {"tensorboard": "tensorboard" in chosen and not args.no_tensorboard,
              "wandb": "wandb" in chosen}
    for name in fields:  # the logger and its package have one name
        if fields[name] and importlib.util.find_spec(name) is None:
            logger.warning("%s; the runs log to no %s (--logger none asks for no logger)",
                           missing_extra(name, f"--logger {name}"), name)
            fields[name] = False
    return fields


def print_result(result: SweepResult) -> None:
    """The command's console output: the table (or what the sweep prints in its place), the
    files written, where TensorBoard reads and where W&B wrote."""
    print(result.printed_markdown or result.table_markdown)
    print(f"Wrote {len(result.files)} files to {result.config.out} in {result.seconds:.0f} s:")
    for path in result.files:
        print(f"  {path}")
    if result.tensorboard is not None and result.tensorboard.is_dir():  # only what was written
        print(f"TensorBoard: tensorboard --logdir {result.tensorboard}")
    if result.wandb is not None and result.wandb.is_dir():
        print(f"W&B: the runs' files are in {result.wandb} (offline runs: wandb sync "
              f"{result.wandb}/offline-run-*)")


@dataclass(frozen=True)
class SweepCommand:
    """One sweep on the command line: ``sapo-env NAME`` and its ``python -m``."""

    name: str  #: the subcommand, e.g. ``"attack"``
    help: str  #: its line in ``sapo-env --help``
    description: str  #: the description of its own parser (``python -m``)
    add_arguments: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
    """Declares its options on a parser and returns the parser."""
    config_from_args: Callable[[argparse.Namespace], SweepConfig]
    """Its config from the parsed options (a ValueError for a bad one)."""
    sweep: Callable[[Any], SweepResult]
    """Runs the sweep of a config, e.g. ``sapo_experiments.attack.attack``."""

    def build_parser(self) -> argparse.ArgumentParser:
        return self.add_arguments(argparse.ArgumentParser(prog=f"sapo-env {self.name}",
                                                          description=self.description))

    def register(self, commands: Any) -> None:
        """Add the command to ``sapo-env``'s subcommands (``add_subparsers``' result)."""
        parser = commands.add_parser(self.name, help=self.help)
        self.add_arguments(parser)
        parser.set_defaults(handler=self.run_from_args)

    def config(self, args: argparse.Namespace) -> SweepConfig:
        """The config of ``args``; a bad value exits with one line that names it."""
        try:
            return self.config_from_args(args)
        except ValueError as error:
            raise SystemExit(f"sapo-env {self.name}: {error}") from None

    def run_from_args(self, args: argparse.Namespace) -> SweepResult | None:
        """Run the sweep ``args`` ask for and print its table and files."""
        result = self.sweep(self.config(args))
        print_result(result)
        return result

    def main(self, argv: Sequence[str] | None = None) -> None:
        args = self.build_parser().parse_args(argv)
        logging.basicConfig(level=logging.WARNING)
        self.run_from_args(args)
