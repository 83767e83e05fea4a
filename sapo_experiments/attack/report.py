"""The attack experiment's statistics, tables, verdict and figure.

Per cell (attack, fraction of adversaries, defense), over seeds: the honest nodes' cumulative
reward (sum over rounds of their mean reward) with its 95% CI, and the same as a share of the
clean swarm's (the same nodes, no adversary, no defense, the same seed: a paired ratio); the
share of the honest nodes' completions that carry the poisoner's injected line over the last
tenth of the rounds (attack success); the groups verification rejected per round; the share
of the honest nodes' external groups that came from adversaries (or names that are no honest
node's); the completions whose scoring ran out of time or budget per round; and the slowest
round's wall time (no attack may stall a run); and the remote nodes' actions the runner
refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.deprecation import renamed
from sapo_env.extras import require
from sapo_experiments.attack.config import (
    ABSENT,
    ALL_ATTACKS,
    CLEAN,
    DEFENSES,
    REMOTE_ATTACKS,
    AttackConfig,
)
from sapo_experiments.reproduce.report import format_value, mean_ci

GOAL = 0.9  #: honest nodes keep this share of their clean cumulative reward


@dataclass
class ConditionResult:
    """One condition of the sweep (an attack by a fraction of the nodes against a defense),
    over seeds: one cell of the table."""

    attack: str
    fraction: float
    defense: str
    seeds: int
    honest_cumulative: float  #: sum over rounds of the honest nodes' mean reward
    honest_cumulative_ci: float
    vs_clean: float  #: honest_cumulative / the clean swarm's for the same nodes, paired
    vs_clean_ci: float
    injected: float  #: honest completions carrying the injected line, last tenth of the rounds
    rejected_per_round: float  #: groups verification rejected per round, swarm-wide
    hostile_share: float = float("nan")
    """Share of the honest nodes' external training groups from a source that is no honest
    node, over rounds and seeds (true groups of the adversaries included)."""
    stalled_per_round: float = float("nan")
    """Completions per round, swarm-wide, whose scoring hit the time limit or the budget."""
    slowest_round: float = float("nan")  #: the longest round's wall time over seeds, seconds
    refused_per_run: float = float("nan")
    """Remote nodes' actions the runner refused in a run (each cost its node the round)."""


def _honest_cumulative(run: Mapping[str, Any], nodes: Sequence[str]) -> float:
    """Sum over rounds of the mean reward of ``nodes`` in ``run``."""
    columns = [run["meta"]["nodes"].index(a) for a in nodes]
    return float(run["rewards"][:, columns].mean(axis=1).sum())


def honest_nodes(run: Mapping[str, Any]) -> list[str]:
    return [a for a, h in zip(run["meta"]["nodes"], run["honest"]) if h]


def summarise(config: AttackConfig,
              runs: Mapping[tuple[str, float, str], Sequence[Mapping[str, Any]]]
              ) -> list[ConditionResult]:
    clean = runs[(CLEAN, 0.0, "none")]
    tail = max(1, config.rounds // 10)
    cells = []
    for (attack, fraction, defense), rs in runs.items():
        honest = [honest_nodes(r) for r in rs]
        cumulative = [_honest_cumulative(r, h) for r, h in zip(rs, honest)]
        ratio = [c / b if b else np.nan for c, b in zip(cumulative, (
            _honest_cumulative(base, h) for base, h in zip(clean, honest)))]
        mean, ci = mean_ci(cumulative)
        ratio_mean, ratio_ci = mean_ci(ratio)
        cells.append(ConditionResult(
            attack=attack, fraction=fraction, defense=defense, seeds=len(rs),
            honest_cumulative=mean, honest_cumulative_ci=ci, vs_clean=ratio_mean,
            vs_clean_ci=ratio_ci,
            injected=float(np.mean([r["injected"][-tail:].mean() for r in rs])),
            rejected_per_round=float(np.mean([r["rejected"].mean() for r in rs])),
            **_watched(rs)))
    return cells


def _watched(rs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The per-round measures runs written before they were recorded lack (then NaN)."""
    if not all("hostile_share" in r for r in rs):
        return {}
    return {"hostile_share": float(np.mean([np.nanmean(r["hostile_share"]) for r in rs])),
            "stalled_per_round": float(np.mean([r["scoring_stalled"].mean() for r in rs])),
            "slowest_round": float(max(r["round_seconds"].max() for r in rs)),
            **({"refused_per_run": float(np.mean([r["refused"].sum() for r in rs]))}
               if all("refused" in r for r in rs) else {})}


def _pct(cell: ConditionResult | None) -> str:
    if cell is None:
        return "–"
    return format_value(100 * cell.vs_clean, 100 * cell.vs_clean_ci, 0) + "%"


def format_markdown(cells: Sequence[ConditionResult], config: AttackConfig) -> str:
    at = {(c.attack, c.fraction, c.defense): c for c in cells}
    clean = at[(CLEAN, 0.0, "none")]
    attacks = [a for a in ALL_ATTACKS if a in config.attacks]
    lines = [
        f"Hostile nodes: {config.n_agents} simulated nodes, {config.rounds} rounds, the "
        f"paper's protocol (honest nodes at 4/4), mean ± 95% CI over {config.seeds} seeds. "
        "Adversaries are the last nodes; each cell is the honest nodes' cumulative reward (sum "
        "over rounds of their mean reward) as a share of the same nodes' in the clean swarm "
        "(no adversary, no defense), paired by seed. The clean swarm's honest nodes earn "
        f"{format_value(clean.honest_cumulative, clean.honest_cumulative_ci)}; with every "
        f"defense on, {_pct(at.get((CLEAN, 0.0, 'all')))} of it.",
        "", "| attack | " + " | ".join(f"{round(100 * f)}%: none | {round(100 * f)}%: all"
                                       for f in config.fractions) + " |",
        "| --- |" + " ---: | ---: |" * len(config.fractions),
    ]
    for a in attacks:
        lines.append(f"| {a} | " + " | ".join(
            f"{_pct(at.get((a, f, 'none')))} | {_pct(at.get((a, f, 'all')))}"
            for f in config.fractions) + " |")
    ablated = [d for d in DEFENSES if any(c.defense == d and c.fraction ==
                                          config.ablation_fraction for c in cells)]
    if len(ablated) > 2:
        f = config.ablation_fraction
        lines += ["", f"Each defense alone at {round(100 * f)}% adversaries (run against the "
                  "attacks it is meant to stop; – not run):", "",
                  "| attack | " + " | ".join(ablated) + " |",
                  "| --- |" + " ---: |" * len(ablated)]
        lines += [f"| {a} | " + " | ".join(_pct(at.get((a, f, d))) for d in ablated) + " |"
                  for a in attacks]
    poison = sorted((c for c in cells if c.attack == "poison"),
                    key=lambda c: (c.fraction, list(DEFENSES).index(c.defense)))
    if poison:
        lines += ["", "Poison: share of the honest nodes' completions carrying the injected "
                  "line over the last tenth of the rounds (attack success):", "",
                  "| adversaries | defense | attack success | honest reward vs clean |",
                  "| ---: | --- | ---: | ---: |"]
        lines += [f"| {round(100 * c.fraction)}% | {c.defense} | {100 * c.injected:.0f}% | "
                  f"{_pct(c)} |" for c in poison]
    f = config.ablation_fraction
    watched = [a for a in attacks if (a, f, "none") in at and (a, f, "all") in at]
    if watched:
        lines += ["", f"At {round(100 * f)}% adversaries: the share of the honest nodes' "
                  "external training groups from the adversaries (true ones included), "
                  "completions per round whose scoring hit its time limit or budget, and the "
                  "slowest round (wall time, any seed, on a shared machine):", "",
                  "| attack | adversaries' share: none | all | scoring stalled: none | all | "
                  "slowest round: none | all |", "| --- |" + " ---: |" * 6]
        lines += [f"| {a} | " + " | ".join(
            f"{100 * at[(a, f, d)].hostile_share:.0f}%" for d in ("none", "all")) + " | "
            + " | ".join(f"{at[(a, f, d)].stalled_per_round:.1f}" for d in ("none", "all"))
            + " | " + " | ".join(f"{at[(a, f, d)].slowest_round:.1f} s" for d in ("none", "all"))
            + " |" for a in watched]
    remote = [(a, d) for a in attacks if a in REMOTE_ATTACKS for d in ("none", "all")
              if (a, f, d) in at]
    if remote:
        lines += ["", f"At {round(100 * f)}% adversaries, the remote nodes' actions the runner "
                  "refused a run (each cost its sender the round; a node refused 3 rounds in a "
                  "row is removed): " + ", ".join(
                      f"{a}, {d}: {at[(a, f, d)].refused_per_run:.1f}" for a, d in remote)
                  + "."]
    absent = at.get((ABSENT, config.ablation_fraction, "none"))
    if absent is not None:
        lines += ["", f"The honest nodes alone (the {round(100 * absent.fraction)}% adversaries' "
                  f"places left empty): {_pct(absent)} of the clean swarm's reward: what a "
                  "defense that shuts the adversaries out can give back at most, since their "
                  "groups are gone with them."]
    lines += ["", verdict(cells, config)]
    return "\n".join(lines) + "\n"


def verdict(cells: Sequence[ConditionResult], config: AttackConfig) -> str:
    """Do the honest nodes keep ``GOAL`` of their clean cumulative reward at
    ``ablation_fraction`` adversaries with every defense on, against every attack?"""
    if config.quick:
        return (f"**This is the quick run ({config.rounds} rounds x {config.seeds} seeds): a "
                "smoke test of the pipeline, too short to conclude anything.** `sapo-env "
                "attack` runs the full experiment; its results are in records/attack/.")
    f = config.ablation_fraction
    judged = [c for c in cells if c.fraction == f and c.defense == "all"]
    if not judged:
        return f"No run at {round(100 * f)}% adversaries with every defense on: no verdict."
    met = [c for c in judged if c.vs_clean >= GOAL]
    missed = [c for c in judged if c.vs_clean < GOAL]

    def listed(group: list[ConditionResult]) -> str:
        return ", ".join(f"{c.attack} ({100 * c.vs_clean:.0f} ± {100 * c.vs_clean_ci:.0f}%)"
                         for c in group)

    text = [f"**Goal: honest nodes keep >= {100 * GOAL:.0f}% of their clean cumulative reward "
            f"at {round(100 * f)}% adversaries with every defense on.**"]
    if met:
        text.append(f"Met (on the mean) against {listed(met)}.")
    if missed:
        text.append(f"Not met against {listed(missed)}.")
    if config.seeds < 2:
        text.append("One seed: no confidence interval.")
    return " ".join(text)


def plot_attacks(config: AttackConfig, cells: Sequence[ConditionResult], path: Path
                 ) -> Path:
    """Honest reward (share of clean) against the fraction of adversaries, without and with
    every defense; and the poisoner's attack success."""
    require("matplotlib", "the attack figure (--no-plots skips it)").use("Agg")
    import matplotlib.pyplot as plt

    at = {(c.attack, c.fraction, c.defense): c for c in cells}
    fractions = [0.0, *config.fractions]
    attacks = [a for a in ALL_ATTACKS if a in config.attacks]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    axes[1].sharey(axes[0])
    for ax, defense in zip(axes[:2], ("none", "all")):
        for a in attacks:
            points = [(0.0, at[(CLEAN, 0.0, defense)])] + [
                (f, at[(a, f, defense)]) for f in config.fractions if (a, f, defense) in at]
            x = [100 * f for f, _ in points]
            ax.errorbar(x, [100 * c.vs_clean for _, c in points],
                        yerr=[np.nan_to_num(100 * c.vs_clean_ci) for _, c in points],
                        marker="o", capsize=3, label=a)
        ax.axhline(100 * GOAL, color="grey", linestyle="--", linewidth=1)
        absent = at.get((ABSENT, config.ablation_fraction, "none"))
        if absent is not None and defense == "all":
            ax.plot(100 * absent.fraction, 100 * absent.vs_clean, "k*", markersize=11,
                    label="honest nodes alone")
        ax.set_title("no defense" if defense == "none" else "every defense on", fontsize=9)
        ax.set_xlabel("adversarial nodes (%)")
        ax.set_xticks([100 * f for f in fractions])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("honest cumulative reward (% of clean)")
    axes[1].legend(fontsize=7)
    for defense, marker, size in (("none", "o", 6), ("logprob", "s", 10), ("all", "^", 6)):
        points = [(f, at[("poison", f, defense)]) for f in config.fractions
                  if ("poison", f, defense) in at]
        if points:
            axes[2].plot([100 * f for f, _ in points], [100 * c.injected for _, c in points],
                         marker=marker, markersize=size, label=defense)
    axes[2].set_title("poison: honest completions carrying the injected line", fontsize=9)
    axes[2].set_xlabel("adversarial nodes (%)")
    axes[2].set_ylabel("attack success (%, last tenth of the rounds)")
    axes[2].set_ylim(-5, 105)
    if axes[2].lines:
        axes[2].legend(fontsize=7)
    axes[2].grid(alpha=0.3)
    fig.suptitle(f"{config.n_agents} simulated nodes, {config.rounds} rounds, {config.seeds} "
                 "seeds; mean ± 95% CI (attacks whose adversaries add nothing to the pool "
                 "overlap)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


__getattr__ = renamed(__name__, {"Cell": "ConditionResult"})
