"""``sapo-env reproduce`` on the command line (``python -m sapo_experiments.reproduce --help``)."""

from __future__ import annotations

import argparse
import json

from sapo_experiments import learners, sweep_cli
from sapo_experiments.reproduce.config import (
    EXPERIMENTS,
    FULL,
    QUICK,
    TINY_FULL,
    TINY_QUICK,
    ReproduceConfig,
)
from sapo_experiments.reproduce.plan import plan_text
from sapo_experiments.reproduce.report import seeds_text
from sapo_experiments.reproduce.sweep import ReproduceResult, reproduce


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The reproduce options (shared by ``sapo-env reproduce`` and ``python -m``)."""
    d = ReproduceConfig()
    parser.add_argument("--quick", action="store_true",
                        help=f"a quick run: simulated learners, a smoke test (79 s wall, "
                             f"56 s CPU at load 4 on 2 cores; "
                             f"{QUICK['rounds']} rounds, {QUICK['seeds']} seeds); tiny "
                             f"learners, 8/0 against 4/4 ({TINY_QUICK['rounds']} rounds, "
                             f"{TINY_QUICK['seeds']} seeds: make demo)")
    parser.add_argument("--protocol", choices=["paper", "fixed"], default=d.protocol,
                        help="paper: a node with J external groups answers 8 - J questions "
                             "(default); fixed: every node answers 8 whatever its J (the "
                             "protocol before sapo-env 0.2)")
    parser.add_argument("--learner", default=d.learner,
                        metavar="sim|tiny|grpo|MODULE:FACTORY",
                        help="simulated learners (default, CPU, a surrogate), tiny transformer "
                             "specialists trained by GRPO (CPU, real learners), GRPO language "
                             "models (GPU), or an agent factory of your own, e.g. "
                             "mypkg.nodes:make_nodes (see sapo_experiments.learners)")
    add_tiny_arguments(parser, d.tiny)
    parser.add_argument("--model", default=None,
                        help="model of the GRPO learner (hub id, path or 'smollm2-135m')")
    parser.add_argument("--experiments", nargs="+", default=None, metavar="LABEL",
                        help="subset to run, by label or slug (default all; tiny quick 8/0 4/4): "
                             + ", ".join(repr(e.label) for e in EXPERIMENTS))
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per configuration (default {FULL['seeds']}; quick "
                             f"{QUICK['seeds']}; tiny quick {TINY_QUICK['seeds']})")
    sweep_cli.add_size_options(
        parser, nodes=d.n_agents,
        rounds_help=f"rounds per run (default {FULL['rounds']}; quick {QUICK['rounds']}; tiny "
                    f"{TINY_FULL['rounds']}; tiny quick {TINY_QUICK['rounds']})")
    parser.add_argument("--held-out-every", type=int, default=None,
                        help=f"rounds between held-out evaluations (default "
                             f"{FULL['held_out_every']}; tiny {TINY_FULL['held_out_every']})")
    parser.add_argument("--held-out-questions", type=int, default=None,
                        help=f"held-out questions (default {FULL['held_out_questions']}; tiny "
                             f"{TINY_FULL['held_out_questions']})")
    sweep_cli.add_process_options(
        parser, gpus=True,
        out_help="output folder (default out/reproduce, quick out/reproduce-quick; tiny "
                 "out/reproduce-tiny, tiny quick out/reproduce-tiny-quick)")
    parser.add_argument("--swarm", action="append", default=[], metavar="FIELD=VALUE",
                        help="a SwarmConfig field for every configuration, VALUE as JSON "
                             "(repeatable), e.g. --swarm answer_format='\"lenient\"'")
    parser.add_argument("--no-resume", action="store_true",
                        help="rerun every run even if a finished one (or a checkpoint of an "
                             "unfinished one) is in OUT/runs")
    parser.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every,
                        metavar="ROUNDS",
                        help="rounds between a run's checkpoints, from which an interrupted "
                             f"sweep resumes mid-run (default {d.checkpoint_every}; 0: none)")
    sweep_cli.add_switches(parser, resume_help=None, tensorboard=True,
                           plots_help="write no PNG figures")
    return parser


def add_tiny_arguments(parser: argparse.ArgumentParser, tiny: learners.TinyLearners) -> None:
    """The ``--tiny-*`` options of the tiny learner (``TinyLearners``; defaults from ``tiny``)."""
    parser.add_argument("--tiny-lr", type=float, default=tiny.learning_rate,
                        help=f"tiny learner: GRPO learning rate (default {tiny.learning_rate})")
    parser.add_argument("--tiny-specialties", nargs="+", default=list(tiny.specialties),
                        metavar="TASK", help="tiny learner: each node's warm-start task, dealt "
                        "round-robin (default: " + " ".join(tiny.specialties) + ")")
    parser.add_argument("--tiny-common-base", action=argparse.BooleanOptionalAction,
                        default=tiny.common_base,
                        help="tiny learner: start every node from one warm start on every "
                             "specialty, a different one per seed (the paper's one base "
                             "model), instead of specialists (default "
                             f"{'on' if tiny.common_base else 'off'})")
    parser.add_argument("--tiny-target-accuracy", type=float, default=tiny.target_accuracy,
                        help="tiny learner: the warm start stops at this held-out accuracy "
                             f"(default {tiny.target_accuracy}); low, with a common base, "
                             "gives the sparse-signal regime")
    parser.add_argument("--tiny-partial-specialists", nargs="+", default=[],
                        choices=learners.OPERATORS, metavar="OP",
                        help="tiny learner: partial specialists on one task, e.g. + -: node i "
                             "warm-started on basic_arithmetic (two one-digit terms) with the "
                             "i %% k-th operator alone, to --tiny-target-accuracy on that part, "
                             "a base per part and seed; the swarm is asked basic_arithmetic "
                             "with all of them (--tiny-specialties does not apply)")
    parser.add_argument("--tiny-strong-nodes", type=int, default=tiny.strong_nodes,
                        metavar="N",
                        help="tiny learner, with --tiny-common-base: nodes 0..N-1 start from "
                             "the seed's base trained on to --tiny-strong-target-accuracy (the "
                             "same training run, stopped later), the others from it at "
                             f"--tiny-target-accuracy (default {tiny.strong_nodes}: none)")
    parser.add_argument("--tiny-strong-target-accuracy", type=float, default=None,
                        metavar="ACCURACY",
                        help="tiny learner: the strong nodes' warm-start target, above "
                             "--tiny-target-accuracy (needed with --tiny-strong-nodes)")
    parser.add_argument("--tiny-strong-warm-start-steps", type=int, default=None,
                        metavar="STEPS",
                        help="tiny learner: most warm-start steps of the strong nodes' base "
                             "(default: the weak base's, 600)")
    parser.add_argument("--tiny-hidden-sizes", type=int, nargs="+",
                        default=list(tiny.hidden_sizes), metavar="WIDTH",
                        help="tiny learner: model widths, dealt round-robin over the nodes "
                             "(default " + " ".join(map(str, tiny.hidden_sizes)) + "); "
                             "two or more mix capacities in one swarm and need "
                             "--tiny-common-base (each width has its own base)")
    parser.add_argument("--tiny-off-policy", choices=("none", "tis", "ftis"),
                        default=tiny.off_policy_correction,
                        help="tiny learner: correction of external groups against their "
                             "sender's log-probs (every node then sends them): none (ratio 1, "
                             "the paper's; default), tis (truncated importance sampling), "
                             "ftis (TIS and F-TIS's filter); see agents.off_policy")
    parser.add_argument("--tiny-ftis-statistic", choices=("sum", "mean"),
                        default=tiny.ftis_statistic,
                        help="tiny learner, with --tiny-off-policy ftis: the filter's "
                             "divergence summed over the completion (50 nats; default) or its "
                             "per-token mean (0.5 nats, length-normalised)")
    parser.add_argument("--tiny-rescue-gate", choices=("none", "graft"),
                        default=tiny.rescue_gate,
                        help="tiny learner: weight of the completions of rescue groups (the "
                             "'8/0 rescue' experiment): none (full weight; default) or graft "
                             "(GRAFT's compatibility gate against the sender's log-probs)")
    parser.add_argument("--tiny-copied-prompts", action="store_true",
                        help="tiny learner: copy each prompt's keys and values to its "
                             "completions instead of sharing them (slower; repeats bit for bit "
                             "the runs in records/tiny-reproduce/ made before prompt sharing)")
    parser.add_argument("--tiny-max-grad-norm", type=float, default=tiny.max_grad_norm,
                        help="tiny learner: gradient-norm clipping, 0 for none (default "
                             f"{tiny.max_grad_norm})")
    parser.add_argument("--tiny-dtype", choices=("auto", "float32", "bfloat16", "fast"),
                        default=tiny.dtype,
                        help="tiny learner: compute dtype; bfloat16 autocasts the matrix "
                             "products (weights stay float32); fast: bfloat16 where the CPU "
                             "or GPU computes it natively, else float32 (default "
                             f"{tiny.dtype}: float32 on a CPU)")


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
