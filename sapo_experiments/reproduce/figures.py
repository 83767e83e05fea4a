"""The sweep's figures: per-node trajectories, the swarm's moving average with its min/max band
over nodes (after the paper's Figures 1 and 2), and held-out pass@1 beside training reward.

What each shows, and what it does not pretend to:

- ``figure1_trajectories.png`` (:func:`trajectory_figure`): each node's moving reward in one
  seed, named in the title, one panel per configuration; the legend names every node with its
  kind (``node_0 (warm-started on basic_arithmetic)``), and nodes of one kind share a colour
  family.
- ``figure2_moving_average.png`` (:func:`moving_average_figure`): the swarm's moving reward,
  mean over seeds, with the min/max band over nodes.
- ``reward_by_generation.png`` (:func:`generation_figure`): the swarm's moving reward, mean over
  seeds, against rounds and against the completions a node has generated so far (mean over
  nodes and seeds), so that arms that generate at different rates (8/0 against 4/4) are read
  at equal generation too; a third panel against the completion tokens generated so far where
  every run recorded them (``generated_tokens``: run files of the GRPO learners since it was
  recorded).
- ``held_out.png`` (:func:`held_out_figure`): two panels with their own axes, never one axis
  for two quantities. Left, held-out pass@1 at each evaluation as points, mean over nodes and
  seeds, with error bars of the 95% CI across seeds where there are two or more; joined by a
  line only where there are at least ``LINE_FROM`` evaluations. Its axis starts at 0 and ends
  at the first of ``PASS_AXIS_TOPS`` that holds every point and error bar (the label says
  which). Right, the training reward's moving average, its axis from 0 too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.runtime.metrics import moving_average
from sapo_experiments.reproduce.config import ReproduceConfig
from sapo_experiments.reproduce.plan import node_kinds
from sapo_experiments.reproduce.report import mean_ci, smoothing_window

LINE_FROM = 5
"""Evaluations from which the held-out points are joined by a line (fewer: points alone)."""
PASS_AXIS_TOPS = (0.25, 0.5, 1.0)
"""The held-out axis ends at the first of these that holds the data (it starts at 0)."""
MOST_TICKS = 11
"""The most held-out rounds labelled on the axis (a 2000-round run evaluates 21 times)."""
_KIND_COLOURS = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("the figures need matplotlib: pip install 'sapo-env[plot]'") from error
    matplotlib.use("Agg")  # files only, no display: works on servers and in CI
    import matplotlib.pyplot as plt

    return plt


def plot_figures(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Write the figures (see the module docstring) to ``config.out``."""
    plt = _pyplot()
    figures = [(trajectory_figure(config, runs), "figure1_trajectories.png"),
               (moving_average_figure(config, runs), "figure2_moving_average.png"),
               (generation_figure(config, runs), "reward_by_generation.png")]
    held = held_out_figure(config, runs)
    if held is not None:
        figures.append((held, "held_out.png"))
    files = []
    for fig, name in figures:
        fig.savefig(config.out / name, dpi=110)
        plt.close(fig)
        files.append(config.out / name)
    return files


def trajectory_figure(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]],
                      seed_index: int = 0) -> Any:
    """Each node's moving reward in seed ``seed_index``, a panel per configuration, the nodes
    named with their kind in one legend."""
    plt = _pyplot()
    window = smoothing_window(config.rounds)
    labels = list(runs)
    kinds = node_kinds(config)
    names = [f"node_{k}" + (f" ({kinds[k]})" if kinds else "") for k in range(config.n_agents)]
    colours = _node_colours(plt, kinds, config.n_agents)
    cols = min(3, len(labels))
    rows_n = -(-len(labels) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(max(4.2 * cols, 8.4), 3.2 * rows_n + 1.2),
                             sharey=True, squeeze=False)
    for ax, label in zip(axes.flat, labels):
        rewards = runs[label][seed_index]["rewards"]
        for k, curve in enumerate(moving_average(rewards, window).T):
            ax.plot(curve, lw=0.9, alpha=0.9, color=colours[k], label=names[k])
        ax.set_title(label)
        ax.set_xlabel("round")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(labels):]:
        ax.axis("off")
    axes[0, 0].set_ylabel(f"reward (moving average, {window} rounds)")
    seeds = len(runs[labels[0]])
    fig.suptitle(f"Per-node reward in seed {seed_index} (one of {seeds}; after the paper's "
                 "Figure 1)")
    handles = axes[0, 0].get_lines()
    # a column per kind (the legend fills columns first), four columns of nodes otherwise
    order = sorted(range(len(names)), key=lambda k: kinds.index(kinds[k])) if kinds else None
    ncol = len(set(kinds)) if kinds else min(4, len(names))
    if order:
        handles, names = [handles[k] for k in order], [names[k] for k in order]
    fig.legend(handles, names, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows = -(-len(names) // ncol)
    fig.tight_layout(rect=(0, min(0.5, 0.035 * rows + 0.02), 1, 1))
    return fig


def _node_colours(plt: Any, kinds: list[str] | None, n: int) -> list[Any]:
    """One colour per node: a colour family per kind, a shade per node within it."""
    if not kinds:
        cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        return [cycle[k % len(cycle)] for k in range(n)]
    order = list(dict.fromkeys(kinds))
    colours = []
    for k, kind in enumerate(kinds):
        family = plt.get_cmap(_KIND_COLOURS[order.index(kind) % len(_KIND_COLOURS)])
        same = [j for j in range(n) if kinds[j] == kind]
        colours.append(family(0.45 + 0.45 * same.index(k) / max(len(same) - 1, 1)))
    return colours


def moving_average_figure(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]
                          ) -> Any:
    """The swarm's moving reward per configuration (mean over seeds), with the min/max band
    over nodes."""
    plt = _pyplot()
    window = smoothing_window(config.rounds)
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, rs in runs.items():
        smoothed = [moving_average(r["rewards"], window) for r in rs]
        mean = np.mean([np.nanmean(s, axis=1) for s in smoothed], axis=0)
        low = np.mean([s.min(axis=1) for s in smoothed], axis=0)
        high = np.mean([s.max(axis=1) for s in smoothed], axis=0)
        (line,) = ax.plot(mean, lw=1.6, label=label)
        ax.fill_between(np.arange(len(mean)), low, high, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(f"swarm reward (moving average, {window} rounds)")
    ax.set_ylim(bottom=0)
    seeds = len(next(iter(runs.values())))
    ax.set_title("Swarm reward, moving average (after the paper's Figure 2)\n"
                 f"band: min/max over nodes; mean of {seeds} seed{'s' * (seeds != 1)}",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def generated_so_far(rs: list[dict[str, Any]], key: str = "generated") -> np.ndarray | None:
    """(rounds,) what a node has generated by the end of each round (run array ``key``:
    ``"generated"`` completions, ``"generated_tokens"`` tokens), mean over nodes and seeds;
    None where a run lacks the array or has a NaN in it (a learner that does not report it)."""
    if not all(key in r and not np.isnan(np.asarray(r[key], dtype=np.float64)).any()
               for r in rs):
        return None
    return np.mean([np.cumsum(np.asarray(r[key], dtype=np.float64), axis=0).mean(axis=1)
                    for r in rs], axis=0)


def generation_figure(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> Any:
    """The swarm's moving reward per configuration (mean over seeds) against rounds and, each
    where every run recorded it, against the completions and the completion tokens a node
    generated so far (:func:`generated_so_far`)."""
    plt = _pyplot()
    window = smoothing_window(config.rounds)
    axes_of = {"round": None}
    for name, key in (("completions generated per node, cumulative", "generated"),
                      ("completion tokens generated per node, cumulative", "generated_tokens")):
        if all(generated_so_far(rs, key) is not None for rs in runs.values()):
            axes_of[name] = key
    fig, axes = plt.subplots(1, len(axes_of), figsize=(5.2 * len(axes_of), 4.6), sharey=True,
                             squeeze=False)
    for label, rs in runs.items():
        curve = np.mean([moving_average(np.nanmean(r["rewards"], axis=1), window) for r in rs],
                        axis=0)
        for ax, key in zip(axes[0], axes_of.values()):
            x = np.arange(len(curve)) if key is None else generated_so_far(rs, key)
            ax.plot(x, curve, lw=1.4, label=label)
    for ax, name in zip(axes[0], axes_of):
        ax.set_xlabel(name)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(f"swarm reward (moving average, {window} rounds)")
    axes[0, -1].legend(fontsize=8)
    seeds = len(next(iter(runs.values())))
    fig.suptitle("Swarm reward by round and by what a node generated (mean of "
                 f"{seeds} seed{'s' * (seeds != 1)}): arms at equal generation", fontsize=10)
    fig.tight_layout()
    return fig


def held_out_points(rs: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A configuration's held-out evaluations: rounds trained before each (0: before the
    first round), pass@1 (mean over nodes, then over seeds) and the half-width of its 95% CI
    across seeds (NaN with one seed). Seeds without evaluations are left out."""
    with_eval = [r for r in rs if len(r["held_out_rounds"])]
    if not with_eval:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    trained = np.asarray(with_eval[0]["held_out_rounds"]) + 1  # evaluated after round r
    per_seed = np.array([np.nanmean(r["held_out_scores"], axis=1) for r in with_eval])
    stats = np.array([mean_ci(per_seed[:, i]) for i in range(per_seed.shape[1])])
    return trained, stats[:, 0], stats[:, 1]


def labelled_rounds(evaluated: list[int], most: int = MOST_TICKS) -> list[int]:
    """The evaluated rounds that get a tick label: all of them up to ``most``, else every
    k-th back from the last, so that the labels of a long run's evaluations do not run
    together and the run's end is labelled."""
    step = -(-len(evaluated) // most)
    return evaluated[::-1][::step][::-1]


def held_out_figure(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> Any:
    """Held-out pass@1 at each evaluation (points, CI bars across seeds) and, on its own axis,
    the training reward's moving average; None when no run was evaluated."""
    points = {label: held_out_points(rs) for label, rs in runs.items()}
    points = {label: p for label, p in points.items() if len(p[0])}
    if not points:
        return None
    plt = _pyplot()
    window = smoothing_window(config.rounds)
    seeds = max(len(rs) for rs in runs.values())
    fig, (ax, ax_train) = plt.subplots(1, 2, figsize=(11, 4.6))
    dodge = 0.012 * max(config.rounds, 1)  # side by side, so that the bars do not overlap
    upper = 0.0
    for i, (label, (x, y, ci)) in enumerate(points.items()):
        shift = (i - (len(points) - 1) / 2) * dodge
        bars = np.where(np.isfinite(ci), ci, 0.0)
        many = len(x) >= LINE_FROM
        ax.errorbar(x + shift, y, yerr=bars if seeds > 1 else None, fmt="o-" if many else "o",
                    ms=5, lw=1.2, capsize=3, label=label)
        upper = max(upper, float(np.nanmax(y + bars)))
    top = next((t for t in PASS_AXIS_TOPS if upper <= t), 1.0)
    ax.set_ylim(0, top)
    evaluated = sorted({int(v) for _, (x, _, _) in points.items() for v in x})
    ticks = labelled_rounds(evaluated)
    ax.set_xticks(ticks)
    ax.set_xticklabels([("before\ntraining" if v == 0 else str(v)) for v in ticks])
    ax.set_xlim(-0.08 * max(config.rounds, 1), 1.08 * max(config.rounds, 1))
    ax.set_xlabel("rounds trained")
    ax.set_ylabel(f"held-out pass@1 (axis from 0 to {top:g})")
    bars_text = ("bars: 95% CI across seeds" if seeds > 1 else "one seed: no interval")
    ax.set_title(f"Held-out pass@1, mean over nodes and {seeds} seed{'s' * (seeds != 1)}\n"
                 f"({config.held_out_questions} questions; {bars_text})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    for label in runs:
        curve = np.mean([moving_average(np.nanmean(r["rewards"], axis=1), window)
                         for r in runs[label]], axis=0)
        ax_train.plot(np.arange(1, len(curve) + 1), curve, lw=1.4, label=label)
    ax_train.set_ylim(bottom=0)
    ax_train.set_xlabel("rounds trained")
    ax_train.set_ylabel(f"training reward (moving average, {window} rounds)")
    ax_train.set_title(f"Training reward, mean over nodes and {seeds} seed"
                       f"{'s' * (seeds != 1)}\n(each node's own completions)", fontsize=10)
    ax_train.grid(alpha=0.3)
    ax_train.legend(fontsize=8)
    fig.tight_layout()
    return fig
