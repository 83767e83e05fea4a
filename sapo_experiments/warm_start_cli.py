"""``sapo-env warm-start``: train a tiny model on reasoning-gym tasks, or find it in the cache.

    sapo-env warm-start --tasks spell_backward --eval-tasks spell_backward basic_arithmetic

A task is a name (the difficulty of ``agents.tiny.config.SPECIALIST_TASKS`` where it has one,
else reasoning-gym's defaults) or ``NAME=JSON`` with its reasoning-gym config. Prints the
per-task accuracy reached, the steps and seconds it took and the folder the model is cached
in (load it with ``agents.load_tiny``). Options not given keep ``WarmStartConfig``'s defaults;
see :mod:`agents.tiny.warm_start`.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from agents.tiny.config import SPECIALIST_TASKS, WarmStartConfig
from sapo_env.config import TaskSpec


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    d = WarmStartConfig()
    add = parser.add_argument
    add("--tasks", nargs="+", default=None, metavar="TASK",
        help="training tasks, NAME or NAME=JSON (default: "
             + " ".join(s.name for s in d.tasks) + "); one task trains a specialist")
    add("--eval-tasks", nargs="+", default=None, metavar="TASK",
        help="tasks whose accuracy is measured (default: the training tasks)")
    add("--target", type=float, default=d.target_accuracy,
        help=f"stop when every training task reaches this accuracy (default {d.target_accuracy}"
             "; 0: train --max-steps)")
    add("--max-steps", type=int, default=d.max_steps, help="most optimizer steps")
    add("--batch-size", type=int, default=d.batch_size, help="questions per step")
    add("--lr", type=float, default=d.learning_rate, help="Adam learning rate")
    add("--eval-every", type=int, default=d.eval_every, help="steps between evaluations")
    add("--eval-size", type=int, default=d.eval_size, help="questions per evaluation task")
    add("--max-new-tokens", type=int, default=d.max_new_tokens,
        help="most tokens sampled per evaluation completion (the node's)")
    add("--seed", type=int, default=d.seed, help="root seed")
    add("--out", default=None,
        help="cache folder (default: $SAPO_ENV_CACHE or ~/.cache/sapo-env, /tiny-warm-start)")
    add("--threads", type=int, default=1,
        help="torch CPU threads (default 1: fastest for a model this small)")
    return parser


def task_spec(text: str) -> TaskSpec:
    """``NAME`` (the specialist difficulty where there is one) or ``NAME=JSON``."""
    name, has_config, config = text.partition("=")
    if not has_config:
        return SPECIALIST_TASKS.get(name) or TaskSpec(name)
    try:
        parsed = json.loads(config)
    except json.JSONDecodeError as error:
        raise ValueError(f"task {name!r}: config must be a JSON object, got {config!r} "
                         f"({error})") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"task {name!r}: config must be a JSON object, got {config!r}")
    return TaskSpec(name, 1.0, parsed)


def config_from_args(args: argparse.Namespace) -> WarmStartConfig:
    optional = {
        "tasks": tuple(task_spec(t) for t in args.tasks) if args.tasks else None,
        "eval_tasks": tuple(task_spec(t) for t in args.eval_tasks) if args.eval_tasks else None,
    }
    return WarmStartConfig(
        target_accuracy=args.target or None, max_steps=args.max_steps,
        batch_size=args.batch_size, learning_rate=args.lr, eval_every=args.eval_every,
        eval_size=args.eval_size, max_new_tokens=args.max_new_tokens, seed=args.seed,
        **{k: v for k, v in optional.items() if v is not None})


def run_from_args(args: argparse.Namespace) -> Path:
    try:
        config = config_from_args(args)
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
    except ValueError as error:
        raise SystemExit(f"sapo-env warm-start: {error}") from None
    import torch

    from agents.tiny.warm_start import REPORT_FILE, cache_path, read_report, warm_start

    torch.set_num_threads(args.threads)
    cached = (cache_path(config, args.out) / REPORT_FILE).is_file()
    path = warm_start(config, args.out, progress=0)  # a bar over its steps, if it trains
    report = read_report(path)
    targets = config.targets()
    print(f"{'task':24s} {'accuracy':>8s} {'target':>7s}")
    for task, accuracy in report["accuracy"].items():
        target = f"{targets[task]:.2f}" if task in targets else "-"
        print(f"{task:24s} {accuracy:8.3f} {target:>7s}")
    print(f"{report['steps']} steps in {report['seconds']:.0f} s "
          f"({report['cpu_seconds']:.0f} s CPU, {report['torch_threads']} threads); target "
          f"{'reached' if report['reached'] else 'not reached'}"
          + (" (found in the cache)" if cached else ""))
    print(f"Model, tokenizer and warm_start.json in {path}")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = add_arguments(argparse.ArgumentParser(
        prog="sapo-env warm-start",
        description="Train a tiny model on reasoning-gym tasks (or find it in the cache)."))
    logging.basicConfig(level=logging.WARNING)
    run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    main()
