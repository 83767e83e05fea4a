"""``sapo-env format-propagation`` on the command line
(``python -m sapo_experiments.format_propagation --help``)."""

from __future__ import annotations

import argparse

from sapo_experiments import ray_runs, sweep_cli
from sapo_experiments.field_docs import field_help
from sapo_experiments.format_propagation.config import (
    CONDITIONS,
    FULL,
    QUICK,
    FormatConfig,
    TinyNodes,
)
from sapo_experiments.format_propagation.sweep import format_propagation

OPTIONS = {"jobs": "--jobs", "cpus_per_run": "--cpus-per-run", "rounds": "--rounds",
           "conditions": "--conditions"}
"""The ``FormatConfig`` fields (and Ray's ``cpus_per_run``) whose options have other names."""


def _help(name: str, **kwargs) -> str:
    """The help of the option for ``FormatConfig`` field ``name``: the field's docstring."""
    return field_help(FormatConfig, name, OPTIONS, **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    d = FormatConfig()
    add = parser.add_argument
    add("--quick", action="store_true",
        help=f"a smoke test: {QUICK['rounds']} rounds, {QUICK['seeds']} seed")
    add("--conditions", nargs="+", default=None, metavar="NAME",
        help="subset to run, by slug or label: " + ", ".join(c.slug for c in CONDITIONS))
    add("--seeds", type=int, default=None,
        help=f"seeds per condition (default {FULL['seeds']}; quick {QUICK['seeds']})")
    add("--rounds", type=int, default=None,
        help=f"rounds per run (default {FULL['rounds']}; quick {QUICK['rounds']})")
    add("--base-seed", type=int, default=d.base_seed, help=_help("base_seed"))
    add("--out", default=None, help=f"output folder (default {FULL['out']}, quick "
                                    f"{QUICK['out']})")
    add("--learner", choices=["smollm2", "tiny"], default="smollm2",
        help="smollm2: SmolLM2 LoRA nodes and a scripted demonstrator (default); tiny: tiny "
             "transformer nodes that never tag and a tiny demonstrator that tags some answers "
             "(CPU; 3 seeds x 60 rounds, 4 LM nodes: 2.1 min wall, 4 min of CPU with 2 "
             "jobs on an idle 2-core machine)")
    add("--tiny-task", default=TinyNodes().task,
        help=field_help(TinyNodes, "task", lead="tiny learner: ", default=TinyNodes().task))
    add("--model", default=d.model, help=_help("model", default=d.model))
    add("--lm-nodes", type=int, default=d.lm_nodes, help=_help("lm_nodes", default=d.lm_nodes))
    add("--num-external", type=int, default=None, help=_help("num_external"))
    add("--lr", type=float, default=d.learning_rate, help="Adam learning rate of each adapter")
    add("--max-new-tokens", type=int, default=None, help=_help("max_new_tokens"))
    add("--demo-accuracy", type=float, default=d.demo_accuracy,
        help=_help("demo_accuracy", default=d.demo_accuracy))
    add("--demo-tag-probability", type=float, default=d.demo_tag_probability,
        help=_help("demo_tag_probability", tail=" With tiny nodes: of its warm start's targets.",
                   default=d.demo_tag_probability))
    add("--leave-round", type=int, default=None, help=_help("leave_round"))
    add("--jobs", type=int, default=None,
        help="runs at once, in processes (default: one per CPU core; 1 on a GPU; not with "
             "--ray-address)")
    add("--threads", type=int, default=None, help=_help("threads"))
    add("--device", default=d.device, help=_help("device", default=d.device))
    ray_runs.add_arguments(parser, gpus=True)
    sweep_cli.add_switches(parser, resume_help="rerun runs already finished in OUT/runs",
                           tensorboard=True, plots_help="write no PNG figure",
                           progress_help="hide the progress bars")
    return parser


def config_from_args(args: argparse.Namespace) -> FormatConfig:
    return FormatConfig(
        **sweep_cli.sweep_fields(args), model=args.model, lm_nodes=args.lm_nodes,
        learning_rate=args.lr,
        tiny=TinyNodes(task=args.tiny_task) if args.learner == "tiny" else None,
        demo_accuracy=args.demo_accuracy, demo_tag_probability=args.demo_tag_probability,
        threads=args.threads, device=args.device, **sweep_cli.logger_fields(args),
        num_external=args.num_external, leave_round=args.leave_round,
        max_new_tokens=args.max_new_tokens,
        **({"conditions": tuple(args.conditions)} if args.conditions else {}))


HELP = ("SmolLM2 LoRA nodes isolated, sharing, with a scripted demonstrator and after it "
        "leaves: does the <answer> format spread? (sapo_experiments.format_propagation)")
DESCRIPTION = ("Does the <answer> format spread through a swarm of SmolLM2 LoRA nodes (or "
               "tiny transformers)? Isolated, sharing, with a demonstrator, and the "
               "demonstrator leaving.")
COMMAND = sweep_cli.SweepCommand(
    "format-propagation", HELP, DESCRIPTION, add_arguments, config_from_args, format_propagation)
# the names tests and ``python -m sapo_experiments.format_propagation`` call
build_parser, run_from_args, main = COMMAND.build_parser, COMMAND.run_from_args, COMMAND.main


if __name__ == "__main__":
    main()
