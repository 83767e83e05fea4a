"""The sweep's figures: per-node trajectories, the swarm's moving average with its min/max band
over nodes (after the paper's Figures 1 and 2), and held-out pass@1 beside training reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.runtime.metrics import moving_average
from sapo_experiments.reproduce.config import ReproduceConfig
from sapo_experiments.reproduce.report import smoothing_window


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("the figures need matplotlib: pip install 'sapo-env[plot]'") from error
    matplotlib.use("Agg")  # files only, no display: works on servers and in CI
    import matplotlib.pyplot as plt

    return plt


def plot_figures(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Figure 1 (per-node trajectories, seed 0), Figure 2 (moving average with the min/max band
    over nodes, averaged over seeds) and the held-out curve."""
    plt = _pyplot()
    window = smoothing_window(config.rounds)
    files = []
    labels = list(runs)
    # per configuration, the swarm reward's moving average, mean over seeds (two figures)
    swarm_curve = {label: np.mean([moving_average(np.nanmean(r["rewards"], axis=1), window)
                                   for r in runs[label]], axis=0) for label in labels}

    cols = min(3, len(labels))
    rows_n = -(-len(labels) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), sharey=True,
                             squeeze=False)
    for ax, label in zip(axes.flat, labels):
        rewards = runs[label][0]["rewards"]
        for k, curve in enumerate(moving_average(rewards, window).T):
            ax.plot(curve, lw=0.9, alpha=0.85, label=f"node_{k}")
        ax.set_title(label)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(labels):]:
        ax.axis("off")
    axes[0, 0].set_ylabel(f"reward (moving average, {window} rounds)")
    fig.suptitle("Per-node reward, seed 0 (after the paper's Figure 1)")
    fig.tight_layout()
    files.append(_save(fig, config.out / "figure1_trajectories.png", plt))

    fig, ax = plt.subplots(figsize=(8, 5))
    for label in labels:
        smoothed = [moving_average(r["rewards"], window) for r in runs[label]]
        mean = swarm_curve[label]
        low = np.mean([s.min(axis=1) for s in smoothed], axis=0)
        high = np.mean([s.max(axis=1) for s in smoothed], axis=0)
        (line,) = ax.plot(mean, lw=1.6, label=label)
        ax.fill_between(np.arange(len(mean)), low, high, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(f"swarm reward (moving average, {window} rounds)")
    ax.set_title("Swarm reward, moving average (after the paper's Figure 2)\n"
                 f"band: min/max over nodes; mean of {config.seeds} seeds", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    files.append(_save(fig, config.out / "figure2_moving_average.png", plt))

    fig, ax = plt.subplots(figsize=(8, 5))
    for label in labels:
        with_eval = [r for r in runs[label] if len(r["held_out_rounds"])]
        if not with_eval:
            continue
        x = with_eval[0]["held_out_rounds"]
        y = np.mean([r["held_out_scores"].mean(axis=1) for r in with_eval], axis=0)
        (line,) = ax.plot(x, y, marker="o", ms=3, lw=1.6, label=f"{label} held-out")
        ax.plot(swarm_curve[label], lw=0.8, ls="--", color=line.get_color(), alpha=0.7)
    ax.set_xlabel("round")
    ax.set_ylabel("pass@1 (held-out, solid) / training reward (dashed)")
    ax.set_title("Held-out pass@1 next to training reward\n(mean over nodes and seeds)",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(_save(fig, config.out / "held_out.png", plt))
    return files


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
