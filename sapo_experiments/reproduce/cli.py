"""``sapo-env reproduce`` on the command line (``python -m sapo_experiments.reproduce --help``)."""

from __future__ import annotations

import argparse
import json

from sapo_experiments import learners, sweep_cli
from sapo_experiments.field_docs import field_help
from sapo_experiments.reproduce.config import (
    CONDITIONS,
    FULL,
    QUICK,
    TINY_FULL,
    TINY_QUICK,
    ReproduceConfig,
)
from sapo_experiments.reproduce.plan import plan_text
from sapo_experiments.reproduce.report import seeds_text
from sapo_experiments.reproduce.sweep import ReproduceResult, reproduce

TINY_OPTIONS = {
    "learning_rate": "--tiny-lr", "specialties": "--tiny-specialties",
    "common_base": "--tiny-common-base", "target_accuracy": "--tiny-target-accuracy",
    "partial_specialists": "--tiny-partial-specialists", "strong_nodes": "--tiny-strong-nodes",
    "strong_target_accuracy": "--tiny-strong-target-accuracy",
    "strong_warm_start_steps": "--tiny-strong-warm-start-steps",
    "hidden_sizes": "--tiny-hidden-sizes", "off_policy_correction": "--tiny-off-policy",
    "ftis_statistic": "--tiny-ftis-statistic", "rescue_gate": "--tiny-rescue-gate",
    "max_grad_norm": "--tiny-max-grad-norm", "dtype": "--tiny-dtype",
}
"""The ``TinyLearners`` field each ``--tiny-*`` option sets (``--tiny-copied-prompts`` turns
``share_prompts`` off), so that its help, the field's docstring, names options, not fields."""


OPTIONS = {"learner": "--learner", "tiny": "--tiny-*", "model": "--model",
           "experiments": "--experiments", "swarm": "--swarm"}
"""The ``ReproduceConfig`` fields whose options have names of their own."""


def _help(name: str, **kwargs) -> str:
    """The help of the option for ``ReproduceConfig`` field ``name`` (``field_help``)."""
    return field_help(ReproduceConfig, name, OPTIONS, **kwargs)


def _tiny_help(name: str, **kwargs) -> str:
    """The help of the ``--tiny-*`` option for ``TinyLearners`` field ``name``."""
    kwargs.setdefault("lead", "tiny learner: ")
    return field_help(learners.TinyLearners, name, TINY_OPTIONS, **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The reproduce options (shared by ``sapo-env reproduce`` and ``python -m``); their help
    is the config fields' docstrings."""
    d = ReproduceConfig()
    parser.add_argument("--quick", action="store_true", help=_help("quick", tail=(
        f" Simulated learners: {QUICK['rounds']} rounds, {QUICK['seeds']} seeds; tiny "
        f"learners: {', '.join(TINY_QUICK['experiments'])}, {TINY_QUICK['rounds']} rounds, "
        f"{TINY_QUICK['seeds']} "
        "seeds (make demo).")))
    parser.add_argument("--protocol", choices=["paper", "fixed"], default=d.protocol,
                        help=_help("protocol", default=d.protocol))
    parser.add_argument("--learner", default=d.learner,
                        metavar="sim|tiny|grpo|MODULE:FACTORY",
                        help=_help("learner", tail=" A factory is given as MODULE:FACTORY, e.g. "
                                                   "mypkg.nodes:make_nodes.", default=d.learner))
    add_tiny_arguments(parser, d.tiny)
    parser.add_argument("--model", default=None, help=_help("model"))
    parser.add_argument("--experiments", nargs="+", default=None, metavar="LABEL",
                        help=_help("experiments", tail=" Labels: " + ", ".join(
                            repr(e.label) for e in CONDITIONS) + "."))
    parser.add_argument("--seeds", type=int, default=None, help=_help("seeds", tail=(
        f" Presets: {FULL['seeds']}; quick {QUICK['seeds']}; tiny quick "
        f"{TINY_QUICK['seeds']}.")))
    sweep_cli.add_size_options(
        parser, nodes=d.n_agents,
        rounds_help=f"rounds per run (default {FULL['rounds']}; quick {QUICK['rounds']}; tiny "
                    f"{TINY_FULL['rounds']}; tiny quick {TINY_QUICK['rounds']})")
    parser.add_argument("--held-out-every", type=int, default=None, help=_help("held_out_every"))
    parser.add_argument("--held-out-questions", type=int, default=None,
                        help=_help("held_out_questions"))
    sweep_cli.add_process_options(
        parser, gpus=True,
        out_help="output folder (default out/reproduce, quick out/reproduce-quick; tiny "
                 "out/reproduce-tiny, tiny quick out/reproduce-tiny-quick)")
    parser.add_argument("--swarm", action="append", default=[], metavar="FIELD=VALUE",
                        help=_help("swarm", tail=" Each --swarm FIELD=VALUE sets one field, "
                                   "VALUE as JSON, e.g. --swarm answer_format='\"lenient\"'."))
    parser.add_argument("--no-resume", action="store_true",
                        help="rerun every run even if a finished one (or a checkpoint of an "
                             "unfinished one) is in OUT/runs")
    parser.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every,
                        metavar="ROUNDS",
                        help=_help("checkpoint_every", default=d.checkpoint_every))
    sweep_cli.add_switches(parser, resume_help=None, tensorboard=True,
                           plots_help="write no PNG figures")
    return parser


def add_tiny_arguments(parser: argparse.ArgumentParser, tiny: learners.TinyLearners) -> None:
    """The ``--tiny-*`` options of the tiny learner (``TinyLearners``; defaults from ``tiny``),
    each helped by its field's docstring."""
    parser.add_argument("--tiny-lr", type=float, default=tiny.learning_rate,
                        help=_tiny_help("learning_rate", default=tiny.learning_rate))
    parser.add_argument("--tiny-specialties", nargs="+", default=list(tiny.specialties),
                        metavar="TASK", help=_tiny_help("specialties", default=tiny.specialties))
    parser.add_argument("--tiny-common-base", action=argparse.BooleanOptionalAction,
                        default=tiny.common_base,
                        help=_tiny_help("common_base", default=tiny.common_base))
    parser.add_argument("--tiny-target-accuracy", type=float, default=tiny.target_accuracy,
                        help=_tiny_help("target_accuracy", default=tiny.target_accuracy))
    parser.add_argument("--tiny-partial-specialists", nargs="+", default=[],
                        choices=learners.OPERATORS, metavar="OP",
                        help=_tiny_help("partial_specialists"))
    parser.add_argument("--tiny-strong-nodes", type=int, default=tiny.strong_nodes,
                        metavar="N", help=_tiny_help("strong_nodes", default=tiny.strong_nodes))
    parser.add_argument("--tiny-strong-target-accuracy", type=float, default=None,
                        metavar="ACCURACY", help=_tiny_help("strong_target_accuracy"))
    parser.add_argument("--tiny-strong-warm-start-steps", type=int, default=None,
                        metavar="STEPS", help=_tiny_help("strong_warm_start_steps", tail=(
                            f" Here warm_start_steps is {tiny.warm_start_steps}.")))
    parser.add_argument("--tiny-hidden-sizes", type=int, nargs="+",
                        default=list(tiny.hidden_sizes), metavar="WIDTH",
                        help=_tiny_help("hidden_sizes", default=tiny.hidden_sizes))
    parser.add_argument("--tiny-off-policy", choices=("none", "tis", "ftis"),
                        default=tiny.off_policy_correction,
                        help=_tiny_help("off_policy_correction",
                                        default=tiny.off_policy_correction))
    parser.add_argument("--tiny-ftis-statistic", choices=("sum", "mean"),
                        default=tiny.ftis_statistic,
                        help=_tiny_help("ftis_statistic", default=tiny.ftis_statistic))
    parser.add_argument("--tiny-rescue-gate", choices=("none", "graft"),
                        default=tiny.rescue_gate,
                        help=_tiny_help("rescue_gate", default=tiny.rescue_gate))
    parser.add_argument("--tiny-copied-prompts", action="store_true",
                        help=_tiny_help("share_prompts", lead=(
                            "tiny learner: turns off what follows (share_prompts): ")))
    parser.add_argument("--tiny-max-grad-norm", type=float, default=tiny.max_grad_norm,
                        help=_tiny_help("max_grad_norm", tail=" Here 0 means None.",
                                        default=tiny.max_grad_norm))
    parser.add_argument("--tiny-dtype", choices=("auto", "float32", "bfloat16", "fast"),
                        default=tiny.dtype, help=_tiny_help("dtype", default=tiny.dtype))


def tiny_from_args(args: argparse.Namespace) -> learners.TinyLearners:
    """The tiny learner the ``--tiny-*`` options (``add_tiny_arguments``) describe."""
    return learners.TinyLearners(
        specialties=tuple(args.tiny_specialties), learning_rate=args.tiny_lr,
        max_grad_norm=args.tiny_max_grad_norm or None, dtype=args.tiny_dtype,
        common_base=args.tiny_common_base, target_accuracy=args.tiny_target_accuracy,
        hidden_sizes=tuple(args.tiny_hidden_sizes),
        partial_specialists=tuple(args.tiny_partial_specialists),
        strong_nodes=args.tiny_strong_nodes,
        strong_target_accuracy=args.tiny_strong_target_accuracy,
        strong_warm_start_steps=args.tiny_strong_warm_start_steps,
        off_policy_correction=args.tiny_off_policy, ftis_statistic=args.tiny_ftis_statistic,
        rescue_gate=args.tiny_rescue_gate,
        share_prompts=not args.tiny_copied_prompts)


def config_from_args(args: argparse.Namespace) -> ReproduceConfig:
    learner = (args.learner if args.learner in ("sim", "tiny", "grpo")
               else learners.load(args.learner))
    tiny = tiny_from_args(args)
    swarm = {}
    for item in args.swarm:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--swarm expects FIELD=VALUE, got {item!r}")
        try:
            swarm[name] = json.loads(value)
        except json.JSONDecodeError:
            swarm[name] = value  # a bare word: a string
    # (the config checks every configuration's SwarmConfig too)
    return ReproduceConfig(
        **sweep_cli.sweep_fields(args), learner=learner, tiny=tiny, model=args.model,
        protocol=args.protocol, n_agents=args.nodes, checkpoint_every=args.checkpoint_every,
        **sweep_cli.logger_fields(args), swarm=swarm,
        experiments=tuple(args.experiments) if args.experiments else None,
        held_out_every=args.held_out_every, held_out_questions=args.held_out_questions)


def reproduce_said_first(config: ReproduceConfig) -> ReproduceResult:
    """``reproduce``, after printing what it trains and for how long (``plan_text``); the
    table printed after it is headed as this run's (a reader may have others beside it)."""
    print(plan_text(config), flush=True)
    result = reproduce(config)
    print(f"\n== This run's results ({config.rounds} rounds x {seeds_text(config)}, "
          f"{config.out}/results.md) ==\n")
    return result


HELP = ("the paper's configurations and two controls over several seeds: a table, figures "
        "and TensorBoard runs (sapo_experiments.reproduce)")
DESCRIPTION = ("Run the SAPO paper's configurations (8/0, 6/2, 4/4, 2/6) under its protocol "
               "and two controls (8/0 oversampled + filtered, 4/4 self-replay) over several "
               "seeds; write a table, figures and TensorBoard runs.")
COMMAND = sweep_cli.SweepCommand(
    "reproduce", HELP, DESCRIPTION, add_arguments, config_from_args, reproduce_said_first)
# the names tests and ``python -m sapo_experiments.reproduce`` call
build_parser, run_from_args, main = COMMAND.build_parser, COMMAND.run_from_args, COMMAND.main


if __name__ == "__main__":
    main()
