"""``sapo-env reproduce`` on the command line (``python -m sapo_experiments.reproduce --help``)."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence

from sapo_experiments import learners, ray_runs
from sapo_experiments.console import print_result
from sapo_experiments.reproduce.config import (
    EXPERIMENTS,
    FULL,
    QUICK,
    TINY_FULL,
    TINY_QUICK,
    ReproduceConfig,
)
from sapo_experiments.reproduce.sweep import ReproduceResult, reproduce


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The reproduce options (shared by ``sapo-env reproduce`` and ``python -m``)."""
    d = ReproduceConfig()
    parser.add_argument("--quick", action="store_true",
                        help=f"a quick run: simulated learners, a smoke test of under a minute "
                             f"({QUICK['rounds']} rounds, {QUICK['seeds']} seeds); tiny "
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
    parser.add_argument("--tiny-lr", type=float, default=d.tiny.learning_rate,
                        help=f"tiny learner: GRPO learning rate (default {d.tiny.learning_rate})")
    parser.add_argument("--tiny-specialties", nargs="+", default=list(d.tiny.specialties),
                        metavar="TASK", help="tiny learner: each node's warm-start task, dealt "
                        "round-robin (default: " + " ".join(d.tiny.specialties) + ")")
    parser.add_argument("--tiny-max-grad-norm", type=float, default=d.tiny.max_grad_norm,
                        help="tiny learner: gradient-norm clipping, 0 for none (default "
                             f"{d.tiny.max_grad_norm})")
    parser.add_argument("--tiny-dtype", choices=("auto", "float32", "bfloat16", "fast"),
                        default=d.tiny.dtype,
                        help="tiny learner: compute dtype; bfloat16 autocasts the matrix "
                             "products (weights stay float32); fast: bfloat16 where the CPU "
                             "or GPU computes it natively, else float32 (default "
                             f"{d.tiny.dtype}: float32 on a CPU)")
    parser.add_argument("--model", default=None,
                        help="model of the GRPO learner (hub id, path or 'smollm2-135m')")
    parser.add_argument("--experiments", nargs="+", default=None, metavar="LABEL",
                        help="subset to run, by label or slug (default all; tiny quick 8/0 4/4): "
                             + ", ".join(repr(e.label) for e in EXPERIMENTS))
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per configuration (default {FULL['seeds']}; quick "
                             f"{QUICK['seeds']}; tiny quick {TINY_QUICK['seeds']})")
    parser.add_argument("--base-seed", type=int, default=d.base_seed, help="root seed")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds per run (default {FULL['rounds']}; quick {QUICK['rounds']}; "
                             f"tiny {TINY_FULL['rounds']}; tiny quick {TINY_QUICK['rounds']})")
    parser.add_argument("--nodes", type=int, default=d.n_agents, help="nodes per swarm")
    parser.add_argument("--held-out-every", type=int, default=None,
                        help=f"rounds between held-out evaluations (default "
                             f"{FULL['held_out_every']}; tiny {TINY_FULL['held_out_every']})")
    parser.add_argument("--held-out-questions", type=int, default=None,
                        help=f"held-out questions (default {FULL['held_out_questions']}; tiny "
                             f"{TINY_FULL['held_out_questions']})")
    parser.add_argument("--jobs", type=int, default=None,
                        help="parallel processes (default: one per CPU core; not with "
                             "--ray-address)")
    ray_runs.add_arguments(parser, gpus=True)
    parser.add_argument("--out", default=None,
                        help="output folder (default out/reproduce, quick out/reproduce-quick; "
                             "tiny out/reproduce-tiny, tiny quick out/reproduce-tiny-quick)")
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
    parser.add_argument("--no-tensorboard", action="store_true", help="write no TensorBoard runs")
    parser.add_argument("--no-plots", action="store_true", help="write no PNG figures")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sapo-env reproduce",
        description="Run the SAPO paper's configurations (8/0, 6/2, 4/4, 2/6) under its "
                    "protocol and two controls (8/0 oversampled + filtered, 4/4 self-replay) "
                    "over several seeds; write a table, figures and TensorBoard runs.")
    return add_arguments(parser)


def config_from_args(args: argparse.Namespace) -> ReproduceConfig:
    given = {
        "learner": (args.learner if args.learner in ("sim", "tiny", "grpo")
                    else learners.load(args.learner)),
        "tiny": learners.TinyLearners(
            specialties=tuple(args.tiny_specialties), learning_rate=args.tiny_lr,
            max_grad_norm=args.tiny_max_grad_norm or None, dtype=args.tiny_dtype),
        "model": args.model, "base_seed": args.base_seed,
        "protocol": args.protocol,
        "n_agents": args.nodes, "jobs": args.jobs, "quick": args.quick,
        "resume": not args.no_resume, "checkpoint_every": args.checkpoint_every,
        "tensorboard": not args.no_tensorboard,
        "plots": not args.no_plots, "progress": not args.no_progress,
        "ray": ray_runs.options_from_args(args),
    }
    optional = {"experiments": tuple(args.experiments) if args.experiments else None,
                "seeds": args.seeds, "rounds": args.rounds, "out": args.out,
                "held_out_every": args.held_out_every,
                "held_out_questions": args.held_out_questions}
    given |= {k: v for k, v in optional.items() if v is not None}
    swarm = {}
    for item in args.swarm:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--swarm expects FIELD=VALUE, got {item!r}")
        try:
            swarm[name] = json.loads(value)
        except json.JSONDecodeError:
            swarm[name] = value  # a bare word: a string
    return ReproduceConfig(**given, swarm=swarm)


def run_from_args(args: argparse.Namespace) -> ReproduceResult:
    try:
        config = config_from_args(args)  # validates every configuration's SwarmConfig too
    except ValueError as error:
        raise SystemExit(f"sapo-env reproduce: {error}") from None
    result = reproduce(config)
    print_result(result, config.out, tensorboard=config.tensorboard)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    run_from_args(args)


if __name__ == "__main__":
    main()
