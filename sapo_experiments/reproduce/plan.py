"""What a reproduce sweep is about to train, and for how long: ``sapo-env reproduce`` prints it
before it starts (``make demo`` would otherwise sit minutes in silence while it warm-starts).

The time is an estimate from measured costs (``NODE_ROUND_CPU``, ``WARM_START_STEP_CPU``): the
CPU time is those costs times the work, the wall time that CPU time spread over the processes
the runs use, as if their cores were free; a busy machine takes longer.

Example::

    from sapo_experiments.reproduce import ReproduceConfig
    from sapo_experiments.reproduce.plan import plan_text
    print(plan_text(ReproduceConfig(learner="tiny", quick=True)))
"""

from __future__ import annotations

import textwrap
from typing import Any

from sapo_experiments.reproduce.config import BY_LABEL, ReproduceConfig
from sapo_experiments.run_files import is_finished, made_by_other_code
from sapo_experiments.sweep import seeds_of

NODE_ROUND_CPU: dict[tuple[str, str], tuple[float, str]] = {
    ("tiny", "bfloat16"): (0.09, 'make demo\'s CPU time over its node-rounds (BENCHMARKS.md, '
                                 '"Figures the code cites")'),
    ("tiny", "float32"): (0.41, 'a float32 demo\'s CPU time over its node-rounds '
                                '(BENCHMARKS.md, "Figures the code cites")'),
    ("sim", ""): (0.006, "the quick sweep's CPU time over its node-rounds (BENCHMARKS.md, "
                         '"Figures the code cites")'),
}
"""CPU seconds of one node's round (acting, learning, the env's share), by learner and compute
dtype, with where the figure comes from."""
WARM_START_STEP_CPU = (0.36, "the dearer of the two default specialists' warm starts "
                             '(BENCHMARKS.md, "Figures the code cites")')
"""CPU seconds of one supervised warm-start step (evaluations included), the dearer of the two
default specialists', with its source: times ``warm_start_steps``, a bound on a warm start."""


def node_kinds(config: ReproduceConfig) -> list[str] | None:
    """What each node starts as, in words (``"warm-started on basic_arithmetic"``), for the
    tiny learner; None for learners whose nodes all start alike."""
    if config.learner != "tiny":
        return None
    tiny = config.tiny
    kinds = tiny.node_kinds(config.n_agents)
    if tiny.partial_specialists:
        return [f"warm-started on basic_arithmetic with {k}" for k in kinds]
    if tiny.strong_nodes:
        targets = {"strong": tiny.strong_target_accuracy, "weak": tiny.target_accuracy}
        return [f"from the common base at target {targets[k]:g} ({k})" for k in kinds]
    if len(tiny.hidden_sizes) > 1:
        return [f"common base, {k}" for k in kinds]
    if tiny.common_base:
        return ["common base (every specialty)"] * config.n_agents
    return [f"warm-started on {k}" for k in kinds]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def minutes(seconds: float) -> str:
    """``"4.3 min"``, or ``"40 s"`` under two minutes."""
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def plan_text(config: ReproduceConfig) -> str:
    """What the sweep of ``config`` trains, which of its runs are left to do, and about how
    long they and any warm starts not cached yet will take (lines of text)."""
    todo = [s for s in config.specs() if not (config.resume and is_finished(s.path, s.key()))]
    runs = len(config.specs())
    jobs = min(config.processes(), max(len(todo), 1))
    lines = [f"What this sweep trains (sapo-env reproduce, into {config.out}/):",
             "- " + _nodes(config)]
    shown = [f"{e}, {BY_LABEL[e].note}" if BY_LABEL[e].note else e for e in config.experiments]
    dtype = _dtype(config.tiny) if config.learner == "tiny" else ""
    lines.append(
        f"- {len(shown)} configuration{'s' * (len(shown) != 1)} (I/J: a node trains on I "
        "groups of its own and J from the others' shared rollouts): " + "; ".join(shown)
        + f". {config.rounds} rounds x {config.seeds} seed{'s' * (config.seeds != 1)} = "
        f"{_count(runs, 'run')}" + (f", matrix products in {dtype}" if dtype else "") + ".")
    if config.learner == "tiny" and todo:  # (without runs to do, nothing is warm-started)
        lines.append("- " + _warm_starts(config, jobs))
    if not todo:
        lines.append(f"- Every run is finished in {config.out}/runs: reused, nothing to train.")
        return _wrapped(lines)
    cost = NODE_ROUND_CPU.get((config.learner, dtype)) if isinstance(config.learner, str) else None
    reused = f" ({runs - len(todo)} finished ones reused)" if len(todo) < runs else ""
    other = sum(config.resume and made_by_other_code(s.path, s.key()) for s in todo)
    if other:
        reused += (f" ({other} made again: their files in {config.out}/runs were made by "
                   "other code of sapo_env or agents)")
    if cost is None:
        lines.append(f"- {_count(len(todo), 'run')} to do{reused}, {jobs} at a time (no "
                     "measured time for this learner).")
    else:
        cpu = cost[0] * len(todo) * config.rounds * config.n_agents
        lines.append(f"- {_count(len(todo), 'run')} to do{reused}, {jobs} at a time: about "
                     f"{minutes(cpu / jobs)} wall, {minutes(cpu)} of CPU with {jobs} free "
                     f"core{'s' * (jobs != 1)}, longer on a busy machine (from "
                     f"{cost[0]:g} s of CPU a node-round: {cost[1]}).")
    return _wrapped(lines)


def _wrapped(lines: list[str]) -> str:
    """The lines folded at 100 columns, a bullet's continuation indented under its text."""
    return "".join(textwrap.fill(line, 100, subsequent_indent="  ", break_on_hyphens=False,
                                 break_long_words=False) + "\n" for line in lines)


def _dtype(tiny: Any) -> str:
    """The tiny learner's compute dtype on this machine (``"auto"``: ``GRPOConfig``'s)."""
    dtype = tiny.compute_dtype()
    if dtype == "auto":
        import torch

        return "bfloat16" if torch.cuda.is_available() else "float32"
    return dtype


def _nodes(config: ReproduceConfig) -> str:
    kinds = node_kinds(config)
    what = {"sim": "simulated learners (a surrogate, not a language model)",
            "grpo": f"language models ({config.model}) trained by GRPO",
            "tiny": "tiny transformers (width " + "/".join(map(str, config.tiny.hidden_sizes))
                    + ") that learn by GRPO alone, on this machine"}
    text = f"{config.n_agents} nodes: " + what.get(
        config.learner if isinstance(config.learner, str) else "", "agents of your factory")
    if not kinds or len(set(kinds)) == 1:
        return text + (f", every one {kinds[0]}." if kinds else ".")
    groups: dict[str, list[int]] = {}
    for k, kind in enumerate(kinds):
        groups.setdefault(kind, []).append(k)
    return text + "; " + "; ".join(f"node{'s' * (len(nodes) > 1)} "
                                   + ", ".join(map(str, nodes)) + f" {kind}"
                                   for kind, nodes in groups.items()) + "."


def _targets(tiny: Any) -> str:
    """The warm starts' targets in words: ``"0.1 held-out accuracy (0.5 for the strong
    nodes' bases)"``."""
    text = f"{tiny.target_accuracy:g} held-out accuracy"
    if tiny.partial_specialists:
        return text + " on each base's part of basic_arithmetic, a base per part and seed"
    if tiny.strong_nodes:
        return text + f" ({tiny.strong_target_accuracy:g} for the strong nodes' bases)"
    return text


def _warm_starts(config: ReproduceConfig, jobs: int) -> str:
    """The warm starts: found in the cache, or to train first and how long that takes."""
    from agents.tiny.warm_start import REPORT_FILE, cache_path

    tiny = config.tiny
    configs = tiny.warm_start_configs([seeds_of(config.base_seed, k)[1]
                                       for k in range(config.seeds)] if tiny.per_seed() else ())
    missing: list[Any] = [c for c in configs if not (cache_path(c) / REPORT_FILE).is_file()]
    what = (f"{len(configs)} warm start{'s' * (len(configs) != 1)} (supervised training to "
            f"{_targets(tiny)}, at most {tiny.warm_start_steps} steps each, in float32)")
    folder = cache_path(configs[0]).parent
    if not missing:
        return f"{what[0].upper()}{what[1:]}: found in the cache, {folder}."
    cpu = sum(c.max_steps for c in missing) * WARM_START_STEP_CPU[0]
    parallel = min(jobs, len(missing))
    return (f"First, {len(missing)} of {what} to train and cache in {folder} (once for "
            f"every later run): at most {minutes(cpu / parallel)} wall, {minutes(cpu)} of "
            f"CPU, {parallel} at a time (from {WARM_START_STEP_CPU[0]:g} s of CPU a step: "
            f"{WARM_START_STEP_CPU[1]}).")
