"""The experiment's table (markdown) and figure: tag use, strict reward and lenient accuracy of
the LM nodes over rounds, per condition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_experiments.format_propagation.config import BY_NAME, FormatConfig
from sapo_experiments.reproduce.report import format_value, mean_ci

LAST = 10  #: rounds at the end over which the table averages
FIRST = 5  #: rounds at the start
TARGET = 0.8  #: the tag-use level a node should settle above for the tag to count as learned


def lm_curve(run: dict[str, Any], metric: str) -> np.ndarray:
    """(rounds,) mean over the LM nodes of one run (the demonstrator excluded)."""
    return np.nanmean(run[metric][:, : run["meta"]["lm_nodes"]], axis=1)


def first_round_at(curve: np.ndarray, level: float = TARGET) -> int | None:
    """The first round at which a curve reaches ``level``, or None."""
    hits = np.flatnonzero(curve >= level)
    return int(hits[0]) if hits.size else None


@dataclass
class Row:
    """One line of the table: LM nodes only, mean and 95% CI over seeds."""

    condition: str
    seeds: int
    tag_first: tuple[float, float]
    tag_last: tuple[float, float]
    reward_last: tuple[float, float]
    reward_last_seeds: list[float]  #: per seed: the LM nodes' strict reward, last rounds
    lenient_last: tuple[float, float]
    rounds_to_target: list[int | None]  #: per seed: first round with tag use >= 80%
    informative_external: float  #: external groups with gradient per node and round
    seconds_per_round: float


def per_seed(rs: Sequence[dict[str, Any]], metric: str, part: slice) -> list[float]:
    """Per seed, the LM nodes' mean of ``metric`` over rounds ``part``."""
    return [float(np.mean(lm_curve(r, metric)[part])) for r in rs]


def over_seeds(rs: Sequence[dict[str, Any]], metric: str, part: slice) -> tuple[float, float]:
    """Mean and 95% CI over seeds of :func:`per_seed`."""
    return mean_ci(per_seed(rs, metric, part))


def summarise(runs: dict[str, list[dict[str, Any]]]) -> list[Row]:
    rows = []
    for label, rs in runs.items():
        rows.append(Row(
            condition=label, seeds=len(rs), tag_first=over_seeds(rs, "tag_use", slice(0, FIRST)),
            tag_last=over_seeds(rs, "tag_use", slice(-LAST, None)),
            reward_last=over_seeds(rs, "reward", slice(-LAST, None)),
            reward_last_seeds=per_seed(rs, "reward", slice(-LAST, None)),
            lenient_last=over_seeds(rs, "lenient_accuracy", slice(-LAST, None)),
            rounds_to_target=[first_round_at(lm_curve(r, "tag_use")) for r in rs],
            informative_external=float(np.mean([lm_curve(r, "informative_external").mean()
                                                for r in rs])),
            seconds_per_round=float(np.mean([r["round_seconds"].mean() for r in rs])),
        ))
    return rows


def format_markdown(rows: Sequence[Row], config: FormatConfig) -> str:
    seeds = f"{config.seeds} seed{'s' if config.seeds != 1 else ''}"
    lines = [
        f"LM nodes only ({describe_nodes(config)}), {config.rounds} rounds, "
        f"B={config.questions} questions of "
        f"L={config.completions} completions of at most {config.max_new_tokens} tokens; mean ± "
        f"95% CI over {seeds}. Tag use: share of completions with a non-empty "
        f"<answer></answer>; strict reward: the env's (tag required); lenient accuracy: "
        f"answers read without requiring the tag. Demonstrator: {describe_demonstrator(config)}; "
        f"it leaves "
        f"(publishes nothing) from round {config.first_absent_round} in the last condition. "
        f"Rounds to {TARGET:.0%}: first round at which the LM nodes' mean tag use reached it, "
        "per seed (– never). Ext. informative: external groups with gradient in a node's "
        "training set per round.",
        "",
        f"| condition | tag use, first {FIRST} | tag use, last {LAST} | strict reward, last "
        f"{LAST} | lenient accuracy, last {LAST} | rounds to {TARGET:.0%} tag use | ext. "
        "informative | s / round |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        reached = ", ".join("–" if k is None else str(k) for k in r.rounds_to_target)
        lines.append(
            f"| {r.condition} | {format_value(*r.tag_first, 2)} | {format_value(*r.tag_last, 2)} "
            f"| {format_value(*r.reward_last, 3)} | {format_value(*r.lenient_last, 3)} "
            f"| {reached} | {format_value(r.informative_external, None, 2)} "
            f"| {format_value(r.seconds_per_round, None, 1)} |")
    lines += ["", verdict(rows, config)]
    return "\n".join(lines) + "\n"


def describe_nodes(config: FormatConfig) -> str:
    if config.tiny is not None:
        return (f"{config.lm_nodes} x {config.model_name()}, warm-started to write bare "
                f"answers, full fine-tuning, lr {config.learning_rate:g}")
    return f"{config.lm_nodes} x {config.model_name()}, a LoRA swarm, lr {config.learning_rate:g}"


def describe_demonstrator(config: FormatConfig) -> str:
    if config.tiny is not None:
        return (f"a tiny node like the others, warm-started to tag "
                f"{config.demo_tag_probability:g} of its answers, trained by GRPO on its own "
                "groups")
    return (f"scripted, accuracy {config.demo_accuracy:g}, tag probability "
            f"{config.demo_tag_probability:g}")


def verdict(rows: Sequence[Row], config: FormatConfig) -> str:
    """What the table shows, checked against what the experiment looks for."""
    if config.quick:
        return (f"**Quick run ({config.rounds} rounds): a smoke test of the pipeline, too short "
                "to conclude anything.**")
    by = {r.condition: r for r in rows}
    checks = []
    demo, iso = by.get("LM + demonstrator"), by.get("isolated")
    if demo is not None:
        ok = all(k is not None and k < 30 for k in demo.rounds_to_target)
        checks.append(f"with the demonstrator, tag use reached {TARGET:.0%} within 30 rounds in "
                      f"every seed: {'yes' if ok else 'no'}")
    if demo is not None and iso is not None:
        # With 2 seeds a t interval is ~13 standard errors wide, so "CIs apart" can hardly
        # hold; every demonstrator seed above every isolated seed is the test that can.
        apart = min(demo.reward_last_seeds) > max(iso.reward_last_seeds)
        cis = demo.reward_last[0] - demo.reward_last[1] > iso.reward_last[0] + iso.reward_last[1]
        seeds = ", ".join(f"{v:.3f}" for v in demo.reward_last_seeds)
        iso_seeds = ", ".join(f"{v:.3f}" for v in iso.reward_last_seeds)
        checks.append(f"strict reward over the last {LAST} rounds clearly above isolated: every "
                      f"seed above every isolated seed: {'yes' if apart else 'no'} ({seeds} vs "
                      f"{iso_seeds}), 95% CIs apart: {'yes' if cis else 'no'}")
    if iso is not None:
        checks.append(f"isolated tag use below 5%: {'yes' if iso.tag_last[0] < 0.05 else 'no'}")
    leaves = by.get("demonstrator leaves")
    if leaves is not None:
        checks.append(f"after the demonstrator left, tag use over the last {LAST} rounds above "
                      f"{TARGET:.0%}: {'yes' if leaves.tag_last[0] > TARGET else 'no'}")
    return "Checked against the table: " + "; ".join(checks) + "." if checks else ""


def plot_figure(config: FormatConfig, runs: dict[str, list[dict[str, Any]]]) -> Path:
    """Tag use, strict reward and lenient accuracy over rounds, a line per condition (mean over
    LM nodes and seeds; thin lines: single seeds)."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("the figure needs matplotlib: pip install 'sapo-env[plot]'") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("tag_use", "tag use"), ("reward", "strict reward"),
              ("lenient_accuracy", "lenient accuracy"))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharex=True)
    for ax, (metric, title) in zip(axes, panels):
        for label, rs in runs.items():
            curves = np.array([lm_curve(r, metric) for r in rs])
            (line,) = ax.plot(curves.mean(axis=0), lw=1.8, label=label)
            for c in curves if len(curves) > 1 else ():
                ax.plot(c, lw=0.6, alpha=0.35, color=line.get_color())
            if BY_NAME[label].leaves:
                ax.axvline(config.first_absent_round - 0.5, color=line.get_color(), ls=":",
                           lw=1)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Format propagation: {describe_nodes(config)} "
                 f"(mean over nodes and {config.seeds} seed(s); dotted: demonstrator leaves)",
                 fontsize=10)
    fig.tight_layout()
    path = Path(config.out) / "format_propagation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
