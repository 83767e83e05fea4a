"""What a sweep of specialists says beyond the main table: per-seed values, what each kind of
specialist knew of each task before and after training (the knowledge that moved), and what
its GRPO steps looked like.

Used for the tiny learner (``learner="tiny"``), whose node ``i`` specialises in
``config.tiny.specialties[i % k]``; the per-seed table serves any learner.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sapo_experiments.reproduce.config import ReproduceConfig
from sapo_experiments.reproduce.report import cumulative_rewards, format_value, mean_ci


def per_seed_table(runs: dict[str, list[dict[str, Any]]], key: str = "rewards",
                   baseline: str = "8/0") -> str:
    """Cumulative reward (of ``key``, see :func:`cumulative_rewards`) of every run, by
    configuration and seed, and each configuration's paired difference to ``baseline`` per
    seed (the numbers the main table's intervals rest on)."""
    cumulative = cumulative_rewards(runs, key)
    if not cumulative:
        return "(no run recorded it)\n"
    seeds = max(len(v) for v in cumulative.values())
    base = cumulative.get(baseline)
    lines = ["| configuration | " + " | ".join(f"seed {k}" for k in range(seeds))
             + (f" | minus {baseline}, per seed | mean ± 95% CI | higher in |"
                if base else " |"),
             "| --- |" + " ---: |" * seeds + (" --- | ---: | ---: |" if base else "")]
    for label, values in cumulative.items():
        cells = [f"{v:.1f}" for v in values] + ["–"] * (seeds - len(values))
        line = f"| {label} | " + " | ".join(cells)
        if base:
            paired = [v - b for v, b in zip(values, base)]
            line += (" | " + ", ".join(f"{d:+.1f}" for d in paired) + " | "
                     + format_value(*mean_ci(paired)) + " | "
                     + ("–" if label == baseline else
                        f"{sum(d > 0 for d in paired)} of {len(paired)} seeds"))
        lines.append(line + " |")
    return "\n".join(lines) + "\n"


def knowledge_table(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> str:
    """Held-out accuracy of each kind of specialist on each task, before training and at the
    last evaluation, mean ± 95% CI over seeds (each seed's value: the mean over the nodes of
    that kind)."""
    kinds = np.asarray(config.tiny.node_kinds(config.n_agents))
    first = next(r for rs in runs.values() for r in rs)
    tasks = [str(t) for t in first["held_out_tasks"]]
    pairs = [(s, t) for s in dict.fromkeys(kinds) for t in tasks]
    header = " | ".join(f"{s} nodes on {t}" for s, t in pairs)
    lines = [f"| configuration | {header} |", "| --- |" + " ---: |" * len(pairs)]
    for label, rs in runs.items():
        cells = []
        for s, t in pairs:
            nodes = np.flatnonzero(kinds == s)
            start, end = [], []
            for r in rs:
                scores = r["held_out_task_scores"]  # (evaluations, nodes, tasks)
                if not len(scores) or r["held_out_rounds"][0] != -1:
                    continue
                start.append(scores[0, nodes, tasks.index(t)].mean())
                end.append(scores[-1, nodes, tasks.index(t)].mean())
            cells.append(f"{format_value(*mean_ci(start), 2)} → {format_value(*mean_ci(end), 2)}"
                         if start else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def kinds_table(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> str:
    """Cumulative reward of each kind of node (the mean over its nodes of their own reward,
    summed over rounds), mean ± 95% CI over seeds, and its paired difference to the same kind
    at 8/0: who gains from sharing and who pays for it."""
    kinds = np.asarray(config.tiny.node_kinds(config.n_agents))
    names = list(dict.fromkeys(kinds))

    def cumulative(r: dict[str, Any], kind: str) -> float:
        return float(np.nanmean(r["rewards"][:, kinds == kind], axis=1).sum())

    lines = ["| configuration | " + " | ".join(
        f"{k} nodes | minus 8/0" for k in names) + " |",
        "| --- |" + " ---: | ---: |" * len(names)]
    for label, rs in runs.items():
        cells = []
        for k in names:
            values = [cumulative(r, k) for r in rs]
            cells.append(format_value(*mean_ci(values)))
            base = runs.get("8/0")
            cells.append(format_value(*mean_ci([v - cumulative(b, k) for v, b in
                                                zip(values, base)]))
                         if base and label != "8/0" else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def steps_table(runs: dict[str, list[dict[str, Any]]], max_grad_norm: float | None) -> str:
    """What the GRPO steps looked like, per node-round, mean ± 95% CI over seeds: groups that
    carried gradient, the gradient norm before clipping, and how often the norm clip bound."""
    lines = ["| configuration | groups with gradient (of 8) | gradient norm before clipping "
             "| steps where the norm clip bound |", "| --- | ---: | ---: | ---: |"]
    for label, rs in runs.items():
        groups = [float(np.nanmean(r["learn_groups"])) for r in rs]
        norms = [float(np.nanmean(r["learn_grad_norm"])) for r in rs]
        cells = [format_value(*mean_ci(groups), 2), format_value(*mean_ci(norms), 2)]
        if max_grad_norm is None:
            cells.append("– (no clip)")
        else:
            bound = [float(np.nanmean(r["learn_grad_norm"][np.isfinite(r["learn_grad_norm"])]
                                      > max_grad_norm)) for r in rs]
            cells.append(format_value(*mean_ci(bound), 2))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def specialist_markdown(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> str:
    """The sections appended to results.md: per-seed values, and for specialists the
    knowledge table."""
    text = ("\n## Per seed\n\nCumulative reward of each run: the sum over rounds of the "
            "swarm-mean reward of each node's own completions (the env's reward).\n\n"
            + per_seed_table(runs))
    if "8/0 filtered" in runs:
        text += ("\nThe same, paired against 8/0 filtered (8 questions, own zero-advantage "
                 "groups dropped: the baseline with the sharing configurations' filtering at "
                 "the same budget).\n\n" + per_seed_table(runs, baseline="8/0 filtered"))
    text += ("\n## Per seed, reward of the trained batch\n\nThe same sums of each node's "
             "batch reward: the mean reward over every completion it trained on, received "
             "groups included (genrl's trainer logs this one; the paper does not say which "
             "it reports). It rewards filtering and drawing on a pool of informative groups "
             "by construction, so it cannot stand alone: read it beside the table above.\n\n"
             + per_seed_table(runs, "batch_rewards"))
    if "8/0 filtered" in runs:
        text += "\n" + per_seed_table(runs, "batch_rewards", baseline="8/0 filtered")
    if config.learner == "tiny":
        text += (
            "\n## Each kind of node\n\nCumulative reward of each kind of node (mean over "
            "its nodes, summed over rounds; mean ± 95% CI over seeds) and its paired "
            "difference to the same kind at 8/0.\n\n" + kinds_table(config, runs))
        text += (
            "\n## What each kind of node knew\n\nHeld-out pass@1 of each kind of node on "
            "each task before the first round → at the last evaluation ("
            f"{config.held_out_questions} held-out questions; mean ± 95% CI over seeds of the "
            "mean over the nodes of that kind). A specialist's accuracy on the other's task "
            "can rise only from what it reads in the pool, or from what transfers within its "
            "own model.\n\n" + knowledge_table(config, runs))
        text += (
            "\n## The GRPO steps\n\nPer node and round (mean ± 95% CI over seeds): groups "
            "in the training set whose advantages are not all zero, the gradient norm before "
            "clipping, and the share of steps whose norm exceeded the clip "
            f"(max_grad_norm {config.tiny.max_grad_norm}), which then sets the step's "
            "length.\n\n" + steps_table(runs, config.tiny.max_grad_norm))
    return text
