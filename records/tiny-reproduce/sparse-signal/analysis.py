"""The tables of this folder's README, recomputed from the committed run arrays.

    python records/tiny-reproduce/sparse-signal/analysis.py          # print the tables
    python records/tiny-reproduce/sparse-signal/analysis.py --figure # and write gain_vs_base.png

Each subfolder is one ``sapo-env reproduce`` sweep (its command in the README), whose
``runs/<configuration>_seed<k>.npz`` hold each run's per-round arrays
(``sapo_experiments.run_files.load_run``). Seed k starts from the same base model and draws
the same questions in every folder, so differences are paired by seed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sapo_experiments.reproduce.report import cumulative_rewards, mean_ci
from sapo_experiments.run_files import load_run

HERE = Path(__file__).resolve().parent
LEVELS = {"p05": 0.05, "p10": 0.10, "p20": 0.20}
"""Sweep folder of each warm-start target accuracy (the base's success rate)."""
CORRECTIONS = {"p10-tis": "tis", "p10-ftis": "ftis"}
"""Sweep folders of the off-policy corrections, paired with ``p10-none`` (the same code)."""


def runs_of(folder: str) -> dict[str, list[dict]]:
    """The runs of a folder by configuration label, seeds in order ({} if absent)."""
    by_label: dict[str, dict[int, dict]] = {}
    for path in sorted((HERE / folder / "runs").glob("*.npz")):
        run = load_run(path)
        by_label.setdefault(run["meta"]["experiment"], {})[run["meta"]["seed_index"]] = run
    return {label: [seeds[k] for k in sorted(seeds)] for label, seeds in by_label.items()}


def paired(a: list[float], b: list[float]) -> str:
    """``a - b`` paired by seed: mean ± 95% CI, and in how many seeds a is higher."""
    n = min(len(a), len(b))
    d = np.array(a[:n]) - np.array(b[:n])
    mean, ci = mean_ci(d)
    return f"{mean:+.2f} ± {ci:.2f} ({sum(d > 0)} of {n} higher)"


def ratio(a: list[float], b: list[float]) -> str:
    """``a / b`` paired by seed: mean ± 95% CI."""
    n = min(len(a), len(b))
    mean, ci = mean_ci(np.array(a[:n]) / np.array(b[:n]))
    return f"{mean:.3f} ± {ci:.3f}"


def verdict(a: list[float], b: list[float]) -> str:
    """Whether the paired 95% CI of ``a - b`` excludes 0, and which way."""
    n = min(len(a), len(b))
    mean, ci = mean_ci(np.array(a[:n]) - np.array(b[:n]))
    return "higher" if mean - ci > 0 else "lower" if mean + ci < 0 else "not decided"


def levels_table() -> tuple[str, list[tuple]]:
    """Per base success rate: the base, its signal, and 4/4 against 8/0 (and 8/0 filtered)."""
    lines = ["| warm-start target | seeds | base pass@1 before round 0 | own groups without "
             "gradient at 8/0 | 8/0 | 4/4 minus 8/0 | 4/4 / 8/0 | verdict | 4/4 minus 8/0 "
             "filtered | batch reward, 4/4 / 8/0 |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    points = []
    for folder, level in LEVELS.items():
        runs = runs_of(folder)
        if "8/0" not in runs or "4/4" not in runs:
            continue
        own, batch = cumulative_rewards(runs), cumulative_rewards(runs, "batch_rewards")
        start = mean_ci([float(r["held_out_scores"][0].mean()) for r in runs["8/0"]])
        silent = np.mean([1 - np.nanmean(r["learn_groups"]) / 8 for r in runs["8/0"]])
        filtered = (paired(own["4/4"], own["8/0 filtered"]) if "8/0 filtered" in own
                    else "–")
        lines.append(
            f"| {level:.2f} | {len(own['4/4'])} | {start[0]:.3f} ± {start[1]:.3f} "
            f"| {silent:.2f} | {np.mean(own['8/0']):.1f} | {paired(own['4/4'], own['8/0'])} "
            f"| {ratio(own['4/4'], own['8/0'])} | {verdict(own['4/4'], own['8/0'])} "
            f"| {filtered} | {ratio(batch['4/4'], batch['8/0'])} |")
        n = len(own["4/4"])
        points.append((start, mean_ci(np.array(own["4/4"]) / np.array(own["8/0"][:n])), n))
    return "\n".join(lines) + "\n", points


def corrections_table() -> str:
    """4/4 with each off-policy correction against 4/4 at ratio 1, paired by seed."""
    none = runs_of("p10-none")
    if "4/4" not in none:
        return "(no p10-none runs)\n"
    base = cumulative_rewards(none)["4/4"]
    base_batch = cumulative_rewards(none, "batch_rewards")["4/4"]
    # 8/0 of the same seeds, from the p10 sweep (copied prompts: equal to float rounding)
    isolated = cumulative_rewards(runs_of("p10"))["8/0"]
    lines = ["| 4/4 with | seeds | cumulative reward | minus ratio 1 | verdict | batch reward "
             "minus ratio 1 | minus 8/0 | verdict against 8/0 | mean weight of a corrected "
             "token | tokens at the cap | completions filtered a node-round | external groups "
             "not corrected a node-round |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
             f"| ratio 1 (none) | {len(base)} | {np.mean(base):.2f} | – | – | – "
             f"| {paired(base, isolated)} | {verdict(base, isolated)} | – | – | – | – |"]
    for folder, name in CORRECTIONS.items():
        runs = runs_of(folder)
        if "4/4" not in runs:
            continue
        own = cumulative_rewards(runs)["4/4"]
        batch = cumulative_rewards(runs, "batch_rewards")["4/4"]
        stats = json.loads((HERE / folder / "off_policy.json").read_text())
        lines.append(
            f"| {name} | {len(own)} | {np.mean(own):.2f} | {paired(own, base)} "
            f"| {verdict(own, base)} | {paired(batch, base_batch)} "
            f"| {paired(own, isolated)} | {verdict(own, isolated)} "
            f"| {stats['weight_mean']:.3f} | {stats['truncated_fraction']:.3f} "
            f"| {stats['filtered']:.3f} | {stats['uncorrected_groups']:.3f} |")
    return "\n".join(lines) + "\n"


def controls_table() -> str:
    """The controls at target 0.10 (``p10-controls``, the first seeds of ``p10`` copied in):
    each configuration against 8/0 and against 4/4, paired by seed."""
    runs = runs_of("p10-controls")
    if "8/0" not in runs:
        return "(no p10-controls runs)\n"
    own = cumulative_rewards(runs)
    lines = ["| configuration | seeds | cumulative reward | minus 8/0 | minus 4/4 "
             "| groups with gradient (of 8) | gradient norm |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, values in own.items():
        groups = np.mean([np.nanmean(r["learn_groups"]) for r in runs[label]])
        norm = np.mean([np.nanmean(r["learn_grad_norm"]) for r in runs[label]])
        lines.append(
            f"| {label} | {len(values)} | {np.mean(values):.2f} "
            f"| {'–' if label == '8/0' else paired(values, own['8/0'])} "
            f"| {'–' if label == '4/4' else paired(values, own['4/4'])} "
            f"| {groups:.2f} | {norm:.2f} |")
    return "\n".join(lines) + "\n"


def widths_table() -> str:
    """Nodes of two widths in one swarm (``p10-widths``): per width, the nodes' mean cumulative
    reward at 4/4 against 8/0, paired by seed (node ``i`` has ``hidden_sizes[i % k]``)."""
    runs = runs_of("p10-widths")
    if "8/0" not in runs or "4/4" not in runs:
        return "(no p10-widths runs)\n"
    settings = json.loads((HERE / "p10-widths" / "summary.json").read_text())["settings"]
    widths = settings["tiny"]["hidden_sizes"]
    lines = ["| nodes | seeds | base pass@1 before round 0 | 8/0 | 4/4 | 4/4 minus 8/0 "
             "| 4/4 / 8/0 | verdict | batch reward, 4/4 / 8/0 | groups with gradient at 8/0 "
             "(of 8) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    n = runs["8/0"][0]["rewards"].shape[1]
    kinds = [(f"width {w}", [i for i in range(n) if i % len(widths) == k])
             for k, w in enumerate(widths)] + [("all", list(range(n)))]
    for name, nodes in kinds:
        def mean_cumulative(label: str, key: str = "rewards") -> list[float]:
            return [float(np.nansum(r[key][:, nodes], axis=0).mean()) for r in runs[label]]

        own = {label: mean_cumulative(label) for label in ("8/0", "4/4")}
        batch = {label: mean_cumulative(label, "batch_rewards") for label in ("8/0", "4/4")}
        start = mean_ci([float(r["held_out_scores"][0][nodes].mean()) for r in runs["8/0"]])
        groups = np.mean([np.nanmean(r["learn_groups"][:, nodes]) for r in runs["8/0"]])
        lines.append(
            f"| {name} | {min(len(own['8/0']), len(own['4/4']))} "
            f"| {start[0]:.3f} ± {start[1]:.3f} | {np.mean(own['8/0']):.2f} "
            f"| {np.mean(own['4/4']):.2f} | {paired(own['4/4'], own['8/0'])} "
            f"| {ratio(own['4/4'], own['8/0'])} | {verdict(own['4/4'], own['8/0'])} "
            f"| {ratio(batch['4/4'], batch['8/0'])} | {groups:.2f} |")
    return "\n".join(lines) + "\n"


def figure(points: list[tuple]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.errorbar([p[0][0] for p in points], [p[1][0] for p in points],
                xerr=[p[0][1] for p in points], yerr=[p[1][1] for p in points],
                fmt="o", capsize=3, label="4/4 / 8/0, own completions")
    for (x, _), (y, _), n in points:
        ax.annotate(f"{n} seeds", (x, y), textcoords="offset points", xytext=(6, 6),
                    fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="no difference")
    ax.set_xlim(0, 0.4)
    ax.set_xlabel("base model's held-out pass@1 before round 0")
    ax.set_ylabel("cumulative reward, 4/4 / 8/0 (paired)")
    ax.set_title("Sharing gain against the base's success rate\n"
                 "(tiny common-base swarms, 100 rounds; 95% CI over seeds)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = HERE / "gain_vs_base.png"
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figure", action="store_true", help="write gain_vs_base.png")
    args = parser.parse_args()
    levels, points = levels_table()
    print("Sharing against the base's success rate (own completions unless said):\n")
    print(levels)
    print("Off-policy corrections at warm-start target 0.10:\n")
    print(corrections_table())
    print("Controls at warm-start target 0.10:\n")
    print(controls_table())
    print("Nodes of two widths at warm-start target 0.10:\n")
    print(widths_table())
    if args.figure and points:
        print(f"wrote {figure(points)}")


if __name__ == "__main__":
    main()
