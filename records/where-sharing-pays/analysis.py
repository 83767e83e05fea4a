"""The tables of this folder's README, recomputed from the committed run arrays.

    python records/where-sharing-pays/analysis.py             # print every regime's report
    python records/where-sharing-pays/analysis.py --write     # and write <regime>/results.md

Each regime folder holds one ``sapo-env reproduce`` sweep (its command in the README), whose
``runs/<configuration>_seed<k>.npz`` hold each run's per-round arrays
(``sapo_experiments.run_files.load_run``). Seed k starts from the same bases and draws the same
question streams in every configuration, so every comparison is paired by seed. The tests of a
regime's report, its primary comparison among them (fixed in the README before the runs), are
decided together with Holm's correction (``sapo_experiments.verdicts``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sapo_experiments.run_files import load_run
from sapo_experiments.verdicts import EXPLORATORY_BELOW, Comparison, holm, paired

HERE = Path(__file__).resolve().parent
BASELINE, CONTROL, SHARING, RESCUE, MORE = ("8/0", "4/0", "4/4", "8/0 rescue",
                                            "8/0 16 completions")
ARMS = (BASELINE, CONTROL, SHARING, RESCUE, MORE)


@dataclass(frozen=True)
class Regime:
    """One sweep folder and how its report reads it."""

    folder: str
    title: str
    primary: str  #: the name of the primary comparison (fixed before the runs)
    nodes: slice = field(default_factory=lambda: slice(None))  #: the nodes the tests compare
    nodes_text: str = "every node"
    described: dict[str, slice] = field(default_factory=dict)  #: other node sets, shown only


REGIMES = (
    Regime("partial-specialists", "Partial specialists on one task", "8/0 rescue - 8/0"),
    Regime("strong-peer", "One stronger peer", "8/0 rescue - 8/0", slice(1, None),
           "the seven weaker nodes (node_1 .. node_7)", {"node_0 (the stronger)": slice(0, 1)}),
    Regime("common-base", "A common base (the sparse-signal regime)", "4/4 - 4/0"),
)


def runs_of(folder: Path) -> dict[str, list[dict]]:
    """The runs of a sweep folder by configuration label, seeds in order ({} if absent)."""
    by_label: dict[str, dict[int, dict]] = {}
    for path in sorted((folder / "runs").glob("*.npz")):
        run = load_run(path)
        by_label.setdefault(run["meta"]["experiment"], {})[run["meta"]["seed_index"]] = run
    return {label: [seeds[k] for k in sorted(seeds)] for label, seeds in by_label.items()}


def cumulative(run: dict, nodes: slice) -> float:
    """Sum over rounds of the mean own-completion reward of ``nodes``."""
    return float(np.nanmean(run["rewards"][:, nodes], axis=1).sum())


def per_completion(run: dict, nodes: slice, budget: float) -> float:
    """Mean own-completion reward of ``nodes`` over the rounds in which each generated its
    first ``budget`` completions (every node of an arm generates as many a round)."""
    generated = run["generated"][:, nodes].mean(axis=1)
    rounds = int(np.searchsorted(np.cumsum(generated), budget - 1e-9)) + 1
    rewards = np.nanmean(run["rewards"][:rounds, nodes], axis=1)
    return float((rewards * generated[:rounds]).sum() / generated[:rounds].sum())


def held_out_final(run: dict, nodes: slice) -> float:
    """Held-out pass@1 of ``nodes`` at the last evaluation."""
    return float(run["held_out_scores"][-1][nodes].mean())


def budget_of(runs: dict[str, list[dict]], labels: Sequence[str], nodes: slice) -> float:
    """The most completions a node of every one of ``labels`` generated (their common
    budget)."""
    return min(float(r["generated"][:, nodes].mean(axis=1).sum()) for label in labels
               for r in runs[label])


def _values(runs: dict, label: str, of: Callable[[dict], float], n: int) -> list[float]:
    return [of(r) for r in runs[label][:n]]


def comparisons(runs: dict[str, list[dict]], nodes: slice) -> list[Comparison]:
    """A regime's tests, in report order, each paired over the seeds both arms have."""
    out = []

    def add(name: str, a: str, b: str, of: Callable[[dict], float]) -> None:
        if a in runs and b in runs:
            n = min(len(runs[a]), len(runs[b]))
            if n >= 2:
                out.append(paired(name, _values(runs, a, of, n), _values(runs, b, of, n)))

    add("4/4 - 8/0", SHARING, BASELINE, lambda r: cumulative(r, nodes))
    add("8/0 rescue - 8/0", RESCUE, BASELINE, lambda r: cumulative(r, nodes))
    add("4/4 - 4/0", SHARING, CONTROL, lambda r: cumulative(r, nodes))
    if RESCUE in runs and MORE in runs:
        budget = budget_of(runs, (RESCUE, MORE), nodes)
        add("8/0 rescue - 8/0 16 completions, per completion at equal generation", RESCUE,
            MORE, lambda r: per_completion(r, nodes, budget))
    add("held-out: 4/4 - 8/0", SHARING, BASELINE, lambda r: held_out_final(r, nodes))
    add("held-out: 8/0 rescue - 8/0", RESCUE, BASELINE, lambda r: held_out_final(r, nodes))
    return holm(out)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def arms_table(runs: dict[str, list[dict]], regime: Regime) -> str:
    """Each arm's rewards and compute, per node-round, averaged over its seeds."""
    sets = {regime.nodes_text: regime.nodes, **regime.described}
    head = ["configuration", "seeds"] + [f"cumulative reward, {k}" for k in sets] + [
        "held-out pass@1 at the end", "completions generated", "tokens generated",
        "optimizer steps", "CPU s (act + learn)", "all-fail own groups",
        "complementarity", "rescued groups"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for label in ARMS:
        if label not in runs:
            continue
        rs = runs[label]
        cells = [label, str(len(rs))]
        cells += [f"{_mean([cumulative(r, s) for r in rs]):.2f}" for s in sets.values()]
        cells.append(f"{_mean([held_out_final(r, regime.nodes) for r in rs]):.3f}")
        cells.append(f"{_mean([r['generated'].mean() for r in rs]):.1f}")
        cells += [_per_node_round(rs, key) for key in ("generated_tokens", "optimizer_steps")]
        cells.append(_cpu(rs))
        cells += [_per_node_round(rs, key, 2) for key in
                  ("all_fail_groups", "complementarity", "rescued_groups")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _per_node_round(runs: Sequence[dict], key: str, digits: int = 1) -> str:
    if not all(key in r for r in runs):
        return "–"
    values = [np.nanmean(r[key]) for r in runs]
    return "–" if np.isnan(values).all() else f"{np.nanmean(values):.{digits}f}"


def _cpu(runs: Sequence[dict]) -> str:
    keys = ("act_cpu_seconds", "learn_cpu_seconds")
    if not all(k in r for r in runs for k in keys):
        return "–"
    return f"{np.mean([np.nanmean(r[keys[0]] + r[keys[1]]) for r in runs]):.3f}"


def tests_table(tests: Sequence[Comparison], primary: str) -> str:
    """The report's tests: paired difference, seeds higher, p, Holm verdict, detectable."""
    head = ["test (paired by seed)", "seeds", "mean difference ± 95% CI", "of the second arm",
            "higher in", "p", "verdict (Holm)", "detectable at 80% power"]
    lines = ["| " + " | ".join(head) + " |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for c in tests:
        name = f"**{c.name}** (primary)" if c.name == primary else c.name
        verdict = c.verdict + (" (exploratory)" if c.exploratory else "")
        share = 100 / c.reference if c.reference else float("nan")
        lines.append(f"| {name} | {c.seeds} | {c.mean:+.3f} ± {c.ci:.3f} | "
                     f"{c.mean * share:+.1f}% ± {c.ci * share:.1f}% | {c.higher_in} of "
                     f"{c.seeds} | {c.p_value:.3g} | {verdict} | {c.detectable():.3f} "
                     f"({c.detectable() * share:.1f}%) |")
    return "\n".join(lines)


def report(regime: Regime) -> str:
    """A regime's ``results.md``."""
    runs = runs_of(HERE / regime.folder)
    if not runs:
        return f"# {regime.title}\n\nNo runs yet.\n"
    tests = comparisons(runs, regime.nodes)
    seeds = sorted({len(rs) for rs in runs.values()})
    return "\n".join([
        f"# {regime.title}", "",
        f"Generated by `analysis.py` from `runs/` ({', '.join(map(str, seeds))} seeds per "
        f"configuration). Tests compare {regime.nodes_text}; verdicts are decided with "
        f"Holm's correction over this table's {len(tests)} tests at a family-wise 5%, and "
        f"labelled exploratory with fewer than {EXPLORATORY_BELOW} seeds.", "",
        "## Configurations", "", arms_table(runs, regime), "",
        "## Tests", "", tests_table(tests, regime.primary), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write <regime>/results.md")
    args = parser.parse_args()
    for regime in REGIMES:
        text = report(regime)
        print(text)
        if args.write and (HERE / regime.folder / "runs").is_dir():
            (HERE / regime.folder / "results.md").write_text(text)


if __name__ == "__main__":
    main()
