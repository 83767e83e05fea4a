"""The benchmark's statistics, tables and figure.

Per scenario, over its policy nodes (those following the policy):

- the **headroom**: the oracle's cumulative reward (sum over rounds of the policy nodes' mean
  reward) minus the best fixed ratio's, both chosen on the training seeds and measured here on
  the held-out seeds, paired by seed, with its 95% CI. It is *decided* when that interval lies
  above 0 as printed (:func:`lies_above_zero`: a lower end that rounds to 0 touches it, and
  the interval is printed with the decimals that show its side, :func:`ci_digits`): then
  adaptation has something to win that luck does not explain.
- per policy: cumulative reward with its 95% CI over seeds; its paired difference to the best
  fixed ratio; the **captured fraction** of the headroom, mean(policy - best fixed) /
  mean(oracle - best fixed), with a 95% CI by the delta method over the paired seeds (only where
  the headroom is decided; printed "n/r", not resolvable, where that CI is wider than ± 100%:
  the seeds cannot tell such a policy from one that captures none or all of it); the final
  moving reward, completions generated per node-round, reward per 1,000 generated completions
  and the mean J; and for the whole swarm its cumulative reward and that of its worst node among
  those that answered any question.

Without a tuning entry for the settings (``BenchConfig.tuned``) there is no oracle, and the
best fixed ratio is the fixed policy with the highest cumulative reward on the held-out seeds
themselves (the table says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.extras import require
from sapo_env.runtime.metrics import moving_average
from sapo_experiments.bench_ratio.config import BENCH_LEARNER, BenchConfig
from sapo_experiments.bench_ratio.policies import schedule_phases, spec_of
from sapo_experiments.bench_ratio.scenarios import SCENARIOS
from sapo_experiments.intervals import ci_digits, lies_above_zero
from sapo_experiments.learners import describe
from sapo_experiments.reproduce.report import (
    format_value,
    mean_ci,
    smoothing_window,
    t_quantile_975,
)

CAPTURE_GOAL = 0.5  #: the verdict names the policies that capture at least this, beyond their CI
RESOLVABLE = 1.0  #: a captured fraction whose 95% CI half-width exceeds this is printed "n/r"


@dataclass
class Headroom:
    """What an adaptive schedule could win in one scenario."""

    scenario: str
    seeds: int
    best_fixed: str  #: the fixed ratio every policy is compared with
    best_fixed_on: str  #: "training seeds", or "held-out seeds" without a tuning entry
    best_fixed_cumulative: float
    oracle: str | None  #: the schedule the oracle search chose on the training seeds
    oracle_cumulative: float | None
    headroom: float | None  #: oracle minus best fixed, paired by held-out seed
    headroom_ci: float | None
    decided: bool  #: the headroom's 95% CI lies above 0
    seeds_to_decide: int | None  #: seeds its CI would need to exclude 0, if undecided
    difference_ci: float | None
    """The median 95% CI half-width of a policy's paired difference to the best fixed ratio:
    how small a difference this many seeds can tell from 0."""


@dataclass
class Row:
    """One line of a scenario's table: a policy."""

    scenario: str
    policy: str
    kind: str  #: "fixed", "schedule" (the oracle's kind), "adaptive" (built-in) or "yours"
    seeds: int
    cumulative: float  #: the policy nodes: sum over rounds of their mean reward
    cumulative_ci: float
    vs_best_fixed: float | None  #: cumulative minus the best fixed ratio's, paired by seed
    vs_best_fixed_ci: float | None
    captured: float | None  #: the fraction of the headroom it captures (decided headroom only)
    captured_ci: float | None
    final_reward: float  #: their moving reward over the last window
    generated: float  #: completions a policy node generated per round
    reward_per_1k: float  #: cumulative reward per 1,000 completions a policy node generated
    mean_j: float  #: mean J in force at the policy nodes
    swarm_cumulative: float  #: every node: sum over rounds of the swarm-mean reward
    #: the lowest own cumulative reward (sum over rounds) of a node that answered any question
    worst_node: float


def kind_of(label: str) -> str:
    if label.startswith("schedule-"):
        return "schedule"
    if ":" in label:
        return "yours"
    return "adaptive" if spec_of(label).adaptive else "fixed"


def per_seed(rs: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Per-seed statistics of one policy in one scenario."""
    out: dict[str, list[float]] = {k: [] for k in (
        "cumulative", "generated", "per_1k", "mean_j", "swarm", "worst")}
    for r in rs:
        mine = r["uses_policy"]
        rewards = r["rewards"]
        cumulative = float(np.nanmean(rewards[:, mine], axis=1).sum())
        generated = float(r["generated"][:, mine].sum(axis=0).mean())  # per policy node
        out["cumulative"].append(cumulative)
        out["generated"].append(generated / len(rewards))
        out["per_1k"].append(1000 * cumulative / generated if generated else np.nan)
        out["mean_j"].append(float(r["num_external"][:, mine].mean()))
        with np.errstate(all="ignore"):  # rounds before a joiner joins are NaN for it
            out["swarm"].append(float(np.nan_to_num(np.nanmean(rewards, axis=1)).sum()))
        # a node that never answered (a free rider at J = train_budget) earns 0 by definition:
        # the worst node is the worst of those that answered something
        answered = r["generated"].sum(axis=0) > 0
        out["worst"].append(float(np.nansum(rewards[:, answered], axis=0).min()))
    return {k: np.asarray(v) for k, v in out.items()}


def ratio_ci(numerator: np.ndarray, denominator: np.ndarray) -> tuple[float, float]:
    """mean(numerator) / mean(denominator) and its 95% CI half-width by the delta method, over
    paired samples (numerator[k] and denominator[k] from the same seed)."""
    n = len(numerator)
    ratio = float(numerator.mean() / denominator.mean())
    if n < 2:
        return ratio, float("nan")
    cov = np.cov(numerator, denominator)  # ddof 1
    var = (cov[0, 0] - 2 * ratio * cov[0, 1] + ratio**2 * cov[1, 1]) / (
        n * denominator.mean() ** 2)
    return ratio, float(t_quantile_975(n - 1) * np.sqrt(max(var, 0.0)))


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


def summarise(config: BenchConfig, runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]]
              ) -> tuple[list[Headroom], list[Row]]:
    window = smoothing_window(config.rounds)
    stats = {key: per_seed(rs) for key, rs in runs.items()}
    headrooms, rows = [], []
    for scenario in config.scenarios:
        policies = config.policies_of(scenario)
        best, on = config.best_fixed(scenario), "training seeds"
        if best is None:
            fixed = [p for p in policies if kind_of(p) == "fixed"]
            best = max(fixed, key=lambda p: stats[(scenario, p)]["cumulative"].mean(),
                       default=None)
            on = "held-out seeds"
        if best is None:  # no fixed ratio to compare with
            best_stats, on = None, "none"
        else:
            best_stats = stats[(scenario, best)]["cumulative"]
        oracle = config.oracle(scenario)
        gain = gain_ci = None
        if oracle is not None and best_stats is not None:
            gain, gain_ci = mean_ci(stats[(scenario, oracle)]["cumulative"] - best_stats)
        decided = lies_above_zero(gain, gain_ci)
        scenario_rows = []
        for policy in policies:
            s, rs = stats[(scenario, policy)], runs[(scenario, policy)]
            diff = diff_ci = captured = captured_ci = None
            if best_stats is not None and policy != best:
                diff, diff_ci = mean_ci(s["cumulative"] - best_stats)
                if decided and policy != oracle:
                    captured, captured_ci = ratio_ci(
                        s["cumulative"] - best_stats,
                        stats[(scenario, oracle)]["cumulative"] - best_stats)
            final = np.mean([np.nanmean(r["rewards"][-window:, r["uses_policy"]]) for r in rs])
            cumulative, ci = mean_ci(s["cumulative"])
            scenario_rows.append(Row(
                scenario=scenario, policy=policy, kind=kind_of(policy), seeds=len(rs),
                cumulative=cumulative, cumulative_ci=ci, vs_best_fixed=diff,
                vs_best_fixed_ci=diff_ci, captured=captured, captured_ci=captured_ci,
                final_reward=float(final), generated=float(s["generated"].mean()),
                reward_per_1k=float(np.nanmean(s["per_1k"])), mean_j=float(s["mean_j"].mean()),
                swarm_cumulative=float(s["swarm"].mean()), worst_node=float(s["worst"].mean())))
        cis = [r.vs_best_fixed_ci for r in scenario_rows
               if r.vs_best_fixed_ci is not None and np.isfinite(r.vs_best_fixed_ci)]
        headrooms.append(Headroom(
            scenario=scenario, seeds=config.seeds, best_fixed=best or "–", best_fixed_on=on,
            best_fixed_cumulative=float(best_stats.mean()) if best_stats is not None
            else float("nan"),
            oracle=oracle, oracle_cumulative=None if oracle is None else float(
                stats[(scenario, oracle)]["cumulative"].mean()),
            headroom=gain, headroom_ci=gain_ci, decided=decided,
            seeds_to_decide=None if decided or gain is None or gain <= 0
            else seeds_to_decide(gain, gain_ci, config.seeds),
            difference_ci=float(np.median(cis)) if cis else None))
        rows += scenario_rows
    return headrooms, rows


def signed(mean: float, ci: float | None) -> str:
    """A difference and its 95% CI: "+3.0 ± 0.5", with the decimals :func:`ci_digits` needs
    to show the interval's side of 0 ("+0.94 ± 0.90")."""
    d = ci_digits(mean, ci)
    return f"{mean:+.{d}f}" + ("" if ci is None or not np.isfinite(ci) else f" ± {ci:.{d}f}")


def captured_text(r: Row) -> str:
    """A row's captured fraction as its table prints it: "34 ± 24%", "–" where there is none
    (undecided headroom), "n/r" where its CI is too wide to say anything (``RESOLVABLE``)."""
    if r.captured is None:
        return "–"
    if r.captured_ci is not None and r.captured_ci > RESOLVABLE:
        return "n/r"
    return format_value(100 * r.captured, 100 * r.captured_ci, 0) + "%"


def _phases_text(label: str) -> str:
    return "J = " + ", ".join(map(str, schedule_phases(label))) + " in equal phases"


def headroom_text(h: Headroom) -> str:
    """One paragraph: the scenario's best fixed ratio, its oracle and what the seeds resolve."""
    if h.best_fixed_on == "none":
        return "No fixed ratio was played here, so nothing is compared."
    best = f"Best fixed ratio: {h.best_fixed} (chosen on the {h.best_fixed_on}"
    if h.oracle is None:
        return best + "; no tuning entry for these settings, so no oracle: run `sapo-env " \
            "bench-ratio --tune` with them)."
    text = (f"{best}). Oracle: {h.oracle} ({_phases_text(h.oracle)}, the best schedule the "
            f"search found on the training seeds). **Headroom: "
            f"{signed(h.headroom, h.headroom_ci)}** over {h.seeds} held-out seeds, "
            + ("its 95% CI lies above 0 (uncorrected; the tests, where printed, are "
                "Holm-corrected)." if h.decided else
               "its 95% CI reaches 0 or below" + (
                   f"; it would take {h.seeds_to_decide} seeds at this mean and spread."
                   if h.seeds_to_decide else "."))
            )
    if h.difference_ci is not None and h.headroom and h.decided:
        text += (f" A policy's difference to the best fixed ratio is known to ± "
                 f"{h.difference_ci:.2f} (median 95% CI), {h.difference_ci / h.headroom:.0%} "
                 "of the headroom.")
    return text


def format_markdown(headrooms: Sequence[Headroom], rows: Sequence[Row],
                    config: BenchConfig) -> str:
    nodes = {"simulated_learners": "calibrated simulated nodes",
             "TinyLearners": "tiny transformer nodes"}.get(
        getattr(config.learner, "__name__", type(config.learner).__name__),
        f"nodes of {describe(config.learner)}")
    if config.learner == BENCH_LEARNER:
        nodes = "simulated nodes past the Aha (`BENCH_LEARNER`)"
    lines = [
        f"Ratio policies, {config.n_agents} {nodes}, {config.rounds} rounds, the paper's "
        f"protocol; mean ± 95% CI over {config.seeds} held-out seeds, every policy of a "
        "scenario on the same seeds. Cumulative: the policy nodes, sum over rounds of their "
        "mean reward; vs best fixed: paired difference to the best fixed ratio; captured: the "
        "fraction of the headroom (oracle minus best fixed) the policy wins, where the "
        "headroom's CI lies above 0; generated: completions a policy node generated per round; per "
        "1k: cumulative reward per 1,000 of them; J: the mean J in force; swarm and worst "
        "node: cumulative reward of the whole swarm and of its lowest node among those that "
        "answered any question.",
    ]
    by = {h.scenario: h for h in headrooms}
    for scenario in dict.fromkeys(r.scenario for r in rows):
        h = by[scenario]
        lines += ["", f"**{scenario}**: {SCENARIOS[scenario].what}.", "", headroom_text(h), "",
                  "| policy | cumulative | vs best fixed | captured | final | generated | "
                  "per 1k | J | swarm | worst node |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in (r for r in rows if r.scenario == scenario):
            name = r.policy + (" (best fixed)" if r.policy == h.best_fixed else "") + (
                " (oracle)" if r.policy == h.oracle else "")
            cells = [format_value(r.cumulative, r.cumulative_ci),
                     format_value(r.vs_best_fixed, r.vs_best_fixed_ci,
                                  ci_digits(r.vs_best_fixed or 0.0, r.vs_best_fixed_ci)),
                     captured_text(r),
                     format_value(r.final_reward, None, 3), format_value(r.generated, None, 1),
                     format_value(r.reward_per_1k, None, 2), format_value(r.mean_j, None, 2),
                     format_value(r.swarm_cumulative), format_value(r.worst_node)]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if any(captured_text(r) == "n/r" for r in rows if r.scenario == scenario):
            lines += ["", f"n/r: not resolvable, the captured fraction's 95% CI is wider than "
                      f"± {RESOLVABLE:.0%} of the headroom, so these seeds cannot tell the policy "
                      "from one that captures none or all of it; read its difference to the "
                      "best fixed ratio (vs best fixed) instead."]
    lines += ["", verdict(headrooms, rows, config)]
    return "\n".join(lines) + "\n"


def verdict(headrooms: Sequence[Headroom], rows: Sequence[Row], config: BenchConfig) -> str:
    """Where is there headroom, and which adaptive policy captures how much of it?"""
    if config.quick and config.track == "real":
        return (f"**This is the real track's quick run ({config.rounds} rounds x {config.seeds} "
                "seeds): it ranks the policies on three scores below, exploratory.** `sapo-env "
                "bench-ratio --track real` runs the full track (records/bench-ratio-real/).")
    if config.quick:
        return (f"**This is the quick run ({config.rounds} rounds x {config.seeds} seeds): a "
                "smoke test of the pipeline, too short to conclude anything.** `sapo-env "
                "bench-ratio` runs the full benchmark; its results are in records/bench-ratio/.")
    if config.seeds < 2:
        return "**One seed: no confidence interval, so no conclusion.** Run with `--seeds 10`."
    text = []
    with_room = [h for h in headrooms if h.decided]
    without = [h.scenario for h in headrooms if h.oracle is not None and not h.decided]
    if with_room:
        text.append("Headroom beyond its CI in " + ", ".join(
            f"{h.scenario} ({signed(h.headroom, h.headroom_ci)})" for h in with_room)
            + ".")
    if without:
        text.append("No headroom beyond its CI in " + ", ".join(without) + ": there the oracle "
                    "does not beat the best fixed ratio beyond luck, so no policy can be "
                    "ranked on adaptation.")
    adaptive = [r for r in rows if r.kind in ("adaptive", "yours")]
    goal = [r for r in adaptive if r.captured is not None
            and r.captured - r.captured_ci >= CAPTURE_GOAL]
    if with_room:
        text.append((f"Capturing at least {CAPTURE_GOAL:.0%} of the headroom beyond the CI: "
                     + ", ".join(f"{r.policy} in {r.scenario} ({100 * r.captured:.0f} ± "
                                 f"{100 * r.captured_ci:.0f}%)" for r in goal) + ".")
                    if goal else f"**No adaptive policy captures {CAPTURE_GOAL:.0%} of the "
                    "headroom beyond its CI** in any scenario.")
    beats = [r for r in adaptive if lies_above_zero(r.vs_best_fixed, r.vs_best_fixed_ci)]
    if beats:
        text.append("Beating the best fixed ratio beyond the CI: " + ", ".join(
            f"{r.policy} in {r.scenario} ({signed(r.vs_best_fixed, r.vs_best_fixed_ci)})"
            for r in beats) + ".")
    needs = [f"{r.policy} in {r.scenario} {n}" for r in adaptive
             if r.vs_best_fixed_ci is not None and r not in beats
             and not lies_above_zero(-r.vs_best_fixed, r.vs_best_fixed_ci)
             and (n := seeds_to_decide(r.vs_best_fixed, r.vs_best_fixed_ci, r.seeds))]
    if needs:
        text.append("Seeds each undecided difference to the best fixed ratio would need for "
                    "its 95% CI to exclude 0, if the mean and spread stayed as here: "
                    + ", ".join(needs) + f" (here {config.seeds}).")
    return " ".join(text)


def plot_num_external(config: BenchConfig,
                      runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
                      path: Path) -> Path:
    """Save :func:`num_external_figure` to ``path``."""
    fig = num_external_figure(config, runs)
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def num_external_figure(config: BenchConfig,
                        runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]]) -> Any:
    """J over time per adaptive policy against the oracle's schedule, one panel per scenario:
    the mean over the policy nodes and the seeds (adaptive policies also smoothed over the
    table's window), as the title says; grey bars, in the legend, mark the rounds where the
    scenario changes. A matplotlib figure."""
    require("matplotlib", "the ratio benchmark's figure (--no-plots skips it)").use("Agg")
    import matplotlib.pyplot as plt

    window = smoothing_window(config.rounds)
    count = len(config.scenarios)
    columns = min(count, 4)
    fig, axes = plt.subplots((count + columns - 1) // columns, columns,
                             figsize=(4.2 * columns, 3.2 * ((count + columns - 1) // columns)),
                             sharey=True, squeeze=False)
    legend: dict[str, Any] = {}
    for ax, scenario in zip(axes.flat, config.scenarios):
        oracle, best = config.oracle(scenario), config.best_fixed(scenario)
        for policy in config.policies_of(scenario):
            if kind_of(policy) not in ("adaptive", "yours") and policy not in (oracle, best):
                continue
            curves = [r["num_external"][:, r["uses_policy"]].mean(axis=1)
                      for r in runs[(scenario, policy)]]
            curve = np.mean(curves, axis=0)
            if policy == oracle:
                ax.plot(curve, "k--", lw=1.5, label="oracle")
            elif policy == best:
                ax.plot(curve, "k:", lw=1.2, label="best fixed")
            else:
                ax.plot(moving_average(curve, window), lw=1, label=policy)
        for r in SCENARIOS[scenario].changes(config.rounds):
            ax.axvline(r, color="grey", alpha=0.4, lw=3, label="the scenario changes")
        title = f"{scenario}" + (f": oracle {oracle}, best fixed {best}" if oracle else "")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("J in force")
    seeds = max((len(r) for r in runs.values()), default=0)
    fig.suptitle(f"J in force, mean over the policy nodes and {seeds} seeds; adaptive policies "
                 f"smoothed over {window} rounds", fontsize=9)
    fig.legend(list(legend.values()), list(legend), loc="lower center",
               ncol=min(len(legend), 5), fontsize=7)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig
