"""The benchmark's statistics, table and figure.

Per policy and setting, over the nodes that follow the policy (all of them, ``node_0``, or the
first half): cumulative reward (sum over rounds of their mean reward) with its 95% CI over
seeds, its paired difference to the best fixed ratio of the same setting, the final moving
reward, completions generated per node-round, reward per 1,000 generated completions, and the
mean J they chose; for the whole swarm, its cumulative reward and that of its worst node
among those that answered any question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.bench_ratio.config import (
    FOCAL_COMPANION_J,
    MIXED_COMPANION_J,
    BenchConfig,
    spec_of,
)
from experiments.learners import describe
from experiments.reproduce.report import (
    format_value,
    mean_ci,
    smoothing_window,
    t_quantile_975,
)
from sapo_env.metrics import moving_average


@dataclass
class Row:
    """One line of the table: a policy in a setting."""

    setting: str
    policy: str
    adaptive: bool
    seeds: int
    cumulative: float  #: the policy's nodes: sum over rounds of their mean reward
    cumulative_ci: float
    best_fixed: str | None  #: the fixed ratio with the highest cumulative reward here
    vs_best_fixed: float | None  #: cumulative minus the best fixed ratio's, paired by seed
    vs_best_fixed_ci: float | None
    final_reward: float  #: their moving reward over the last window
    generated: float  #: completions a policy node generated per round
    reward_per_1k: float  #: cumulative reward per 1,000 completions a policy node generated
    per_1k_vs_best_fixed: float | None  #: reward_per_1k minus the best fixed ratio's, paired
    per_1k_vs_best_fixed_ci: float | None
    mean_j: float  #: mean J in force at the policy's nodes
    swarm_cumulative: float  #: every node: sum over rounds of the swarm-mean reward
    #: the lowest own cumulative reward (sum over rounds) of a node that answered any question
    worst_node: float


def _per_seed(rs: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Per-seed statistics of one policy in one setting."""
    out: dict[str, list[float]] = {k: [] for k in (
        "cumulative", "generated", "per_1k", "mean_j", "swarm", "worst")}
    for r in rs:
        mine = r["uses_policy"]
        rewards = r["rewards"]
        cumulative = float(rewards[:, mine].mean(axis=1).sum())
        generated = float(r["generated"][:, mine].sum(axis=0).mean())  # per policy node
        out["cumulative"].append(cumulative)
        out["generated"].append(generated / len(rewards))
        out["per_1k"].append(1000 * cumulative / generated if generated else np.nan)
        out["mean_j"].append(float(r["num_external"][:, mine].mean()))
        out["swarm"].append(float(rewards.mean(axis=1).sum()))
        # a node that never answered (a free rider at J = train_budget) earns 0 by definition:
        # the worst node is the worst of those that answered something
        answered = r["generated"].sum(axis=0) > 0
        out["worst"].append(float(rewards[:, answered].sum(axis=0).min()))
    return {k: np.asarray(v) for k, v in out.items()}


def summarise(config: BenchConfig,
              runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]]) -> list[Row]:
    window = smoothing_window(config.rounds)
    stats = {key: _per_seed(rs) for key, rs in runs.items()}
    rows = []
    for setting in config.settings:
        fixed = [p for p in config.policies if not spec_of(p).adaptive]
        best = max(fixed, key=lambda p: stats[(setting, p)]["cumulative"].mean(), default=None)
        for policy in config.policies:
            s, rs = stats[(setting, policy)], runs[(setting, policy)]
            diff = diff_ci = d1k = d1k_ci = None
            if best is not None and policy != best:
                diff, diff_ci = mean_ci(s["cumulative"] - stats[(setting, best)]["cumulative"])
                d1k, d1k_ci = mean_ci(s["per_1k"] - stats[(setting, best)]["per_1k"])
            final = np.mean([r["rewards"][-window:, r["uses_policy"]].mean() for r in rs])
            cumulative, ci = mean_ci(s["cumulative"])
            rows.append(Row(
                setting=setting, policy=policy, adaptive=spec_of(policy).adaptive,
                seeds=len(rs), cumulative=cumulative, cumulative_ci=ci, best_fixed=best,
                vs_best_fixed=diff, vs_best_fixed_ci=diff_ci, final_reward=float(final),
                generated=float(s["generated"].mean()),
                reward_per_1k=float(np.nanmean(s["per_1k"])),
                per_1k_vs_best_fixed=d1k, per_1k_vs_best_fixed_ci=d1k_ci,
                mean_j=float(s["mean_j"].mean()), swarm_cumulative=float(s["swarm"].mean()),
                worst_node=float(s["worst"].mean())))
    return rows


SETTING_TEXT = {
    "all": "every node follows the policy",
    "focal": f"node_0 follows it, the others are fixed at J = {FOCAL_COMPANION_J}",
    "mixed": "the first half follow it, the others are fixed at J = "
             + ", ".join(map(str, MIXED_COMPANION_J)) + " in turn",
}


def format_markdown(rows: Sequence[Row], config: BenchConfig) -> str:
    nodes = {"simulated_learners": "simulated nodes", "TinyLearners": "tiny transformer nodes"
             }.get(getattr(config.learner, "__name__", type(config.learner).__name__),
                   f"nodes of {describe(config.learner)}")
    lines = [
        f"Ratio policies, {config.n_agents} {nodes}, {config.rounds} rounds, the paper's "
        f"protocol; mean ± 95% CI over {config.seeds} held-out seeds. Cumulative: the policy's "
        "nodes, sum over rounds of their mean reward; vs best fixed: paired difference to the "
        "fixed ratio with the highest cumulative reward in the same setting; generated: "
        "completions a policy node generated per round; per 1k: cumulative reward per 1,000 of "
        "them; J: the mean J in force; swarm and worst node: cumulative reward of the whole "
        "swarm and of its lowest node among those that answered any question (a free rider "
        "earns 0 by definition).",
    ]
    for setting in dict.fromkeys(r.setting for r in rows):
        lines += ["", f"**{setting}**: {SETTING_TEXT[setting]}.", "",
                  "| policy | cumulative | vs best fixed | final | generated | per 1k "
                  "| per 1k vs best fixed | J | swarm | worst node |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in (r for r in rows if r.setting == setting):
            best = " (best fixed)" if r.policy == r.best_fixed else ""
            cells = [format_value(r.cumulative, r.cumulative_ci),
                     format_value(r.vs_best_fixed, r.vs_best_fixed_ci),
                     format_value(r.final_reward, None, 3), format_value(r.generated, None, 1),
                     format_value(r.reward_per_1k, None, 2),
                     format_value(r.per_1k_vs_best_fixed, r.per_1k_vs_best_fixed_ci, 2),
                     format_value(r.mean_j, None, 2), format_value(r.swarm_cumulative),
                     format_value(r.worst_node)]
            lines.append(f"| {r.policy}{best} | " + " | ".join(cells) + " |")
    lines += ["", verdict(rows, config)]
    return "\n".join(lines) + "\n"


def verdict(rows: Sequence[Row], config: BenchConfig) -> str:
    """Does an adaptive policy beat the best fixed ratio beyond its CI, on cumulative reward or
    on reward per generated completion at no loss of reward?"""
    if config.quick:
        return (f"**This is the quick run ({config.rounds} rounds x {config.seeds} seeds): a "
                "smoke test of the pipeline, too short to conclude anything.** `sapo-env "
                "bench-ratio` runs the full benchmark; its results are in docs/bench-ratio/.")
    if config.seeds < 2:
        return "**One seed: no confidence interval, so no conclusion.** Run with `--seeds 3`."
    def beats(r: Row) -> bool:
        return r.vs_best_fixed is not None and r.vs_best_fixed > (r.vs_best_fixed_ci or 0.0)

    def more_efficient(r: Row) -> bool:  # more reward per completion, no significant loss
        return (r.per_1k_vs_best_fixed is not None and r.vs_best_fixed is not None
                and r.per_1k_vs_best_fixed > (r.per_1k_vs_best_fixed_ci or 0.0)
                and r.vs_best_fixed >= -(r.vs_best_fixed_ci or 0.0))

    wins, efficient = [], []
    for r in rows:
        if not r.adaptive or r.vs_best_fixed_ci is None:
            continue
        if beats(r):
            wins.append(f"{r.policy} in {r.setting} (+{r.vs_best_fixed:.1f} over "
                        f"{r.best_fixed})")
        elif more_efficient(r):
            # a fixed ratio that does as much means it is not the adaptation that pays
            fixed = [f.policy for f in rows if f.setting == r.setting and not f.adaptive
                     and more_efficient(f)]
            also = f"; so do the fixed {', '.join(fixed)}" if fixed else ""
            efficient.append(f"{r.policy} in {r.setting} (+{r.per_1k_vs_best_fixed:.2f} per "
                             f"1k over {r.best_fixed}{also})")
    text = []
    if wins:
        text.append("Beats the best fixed ratio on cumulative reward beyond its 95% CI: "
                    + "; ".join(wins) + ".")
    if efficient:
        text.append("More reward per generated completion than the best fixed ratio beyond "
                    "its CI, with no significant loss of cumulative reward: "
                    + "; ".join(efficient) + ".")
    if not text:
        text.append("**No adaptive policy beats the best fixed ratio** beyond its 95% CI, on "
                    "cumulative reward or on reward per generated completion at no loss of "
                    "reward.")
    needs = [f"{r.policy} in {r.setting} {n}" for r in rows
             if r.adaptive and r.vs_best_fixed_ci is not None
             and abs(r.vs_best_fixed) <= r.vs_best_fixed_ci  # the interval holds 0
             and (n := seeds_to_decide(r.vs_best_fixed, r.vs_best_fixed_ci, r.seeds))]
    if needs:
        text.append("Seeds each undecided difference to the best fixed ratio would need for its "
                    "95% CI to exclude 0, if the mean and spread stayed as here: "
                    + ", ".join(needs) + f" (here {config.seeds}).")
    return " ".join(text)


def seeds_to_decide(mean: float, ci: float, seeds: int, most: int = 1000) -> int | None:
    """The fewest seeds whose 95% t interval around ``mean`` excludes 0, with the spread
    that a half-width ``ci`` at ``seeds`` seeds implies; None beyond ``most`` (or with no
    difference, or no spread to read)."""
    if seeds < 2 or not np.isfinite(ci) or ci <= 0 or mean == 0:
        return None
    sd = ci * np.sqrt(seeds) / t_quantile_975(seeds - 1)
    for n in range(2, most + 1):
        if t_quantile_975(n - 1) * sd / np.sqrt(n) < abs(mean):
            return n
    return None


def plot_num_external(config: BenchConfig,
                      runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
                      path: Path) -> Path:
    """J over time per adaptive policy, one panel per setting: the mean over the policy's
    nodes and the seeds, smoothed over the table's window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = smoothing_window(config.rounds)
    fig, axes = plt.subplots(1, len(config.settings), figsize=(5 * len(config.settings), 3.6),
                             sharey=True, squeeze=False)
    for ax, setting in zip(axes[0], config.settings):
        for policy in config.policies:
            if not spec_of(policy).adaptive:
                continue
            curves = [r["num_external"][:, r["uses_policy"]].mean(axis=1)
                      for r in runs[(setting, policy)]]
            ax.plot(moving_average(np.mean(curves, axis=0), window), label=policy)
        ax.set_title(f"{setting}: {SETTING_TEXT[setting]}", fontsize=8)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"J in force (moving mean, {window} rounds)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
