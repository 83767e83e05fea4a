"""The sweep's statistics and its table: mean and 95% CI over seeds, paired ratios, a verdict."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.runtime.metrics import PAPER_WINDOW
from sapo_experiments.intervals import ci_digits, side_as_printed
from sapo_experiments.learners import describe
from sapo_experiments.reproduce.config import BY_LABEL, COMPUTE_MATCHED, ReproduceConfig


def smoothing_window(rounds: int) -> int:
    """The moving-average window of the table's final reward and of the figures: the paper's
    100 rounds, or a tenth of a shorter run."""
    return max(1, min(PAPER_WINDOW, rounds // 10))


# Student t quantile 0.975 by degrees of freedom (no scipy dependency); beyond 30, ~normal.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t (the nearest tabulated df at or below ``df``)."""
    if df < 1:
        return float("nan")
    if df > 30:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t confidence interval (NaN with one value)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return float(x.mean()) if len(x) else float("nan"), float("nan")
    return float(x.mean()), t_quantile_975(len(x) - 1) * float(x.std(ddof=1)) / np.sqrt(len(x))


# --- summary ---------------------------------------------------------------------------------
def cumulative_rewards(runs: dict[str, list[dict[str, Any]]], key: str = "rewards"
                       ) -> dict[str, list[float]]:
    """Each run's cumulative swarm-mean reward of array ``key``: ``"rewards"`` (each node's own
    completions, the step's reward) or ``"batch_rewards"`` (each node's whole training batch,
    received groups included); configurations whose runs lack the array are left out."""
    def cumulative(values: np.ndarray) -> float:
        # a round's mean over the nodes that have a value (an empty batch has none); a round
        # where no node has one adds nothing
        present = ~np.isnan(values)
        sums, counts = np.where(present, values, 0.0).sum(axis=1), present.sum(axis=1)
        return float((sums / np.maximum(counts, 1)).sum())

    return {e: [cumulative(r[key]) for r in rs]
            for e, rs in runs.items() if all(key in r for r in rs)}


@dataclass
class Row:
    """One line of the results table."""

    experiment: str
    local: int
    external: int
    seeds: int
    cumulative: float  #: mean over seeds of the cumulative swarm-mean reward
    cumulative_ci: float  #: half-width of its 95% CI
    ratio: float | None  #: mean over seeds of cumulative / cumulative of 8/0 (same seed)
    ratio_ci: float | None
    #: the same ratio of the cumulative batch reward (every completion a node trained on,
    #: received groups included); None where the runs did not record it
    batch_ratio: float | None
    batch_ratio_ci: float | None
    paper: float | None
    paper_ratio: float | None
    generated: float  #: completions generated per node-round (the generation cost)
    #: cumulative reward per 1,000 completions a node generated over the run
    reward_per_1k: float
    final_reward: float  #: moving reward over the last window, mean over seeds
    held_out: float | None  #: held-out pass@1 at the last evaluation, mean over nodes, seeds
    note: str
    # What a node-round cost beside ``generated``: each the mean over the node-rounds of all
    # seeds that have a value (NaN: the learner does not report it, as the simulated one does
    # not report tokens or steps); None where the run files lack the array (written before
    # it was recorded).
    generated_tokens: float | None = None  #: completion tokens sampled, EOS included
    trained_tokens: float | None = None  #: completion tokens trained on (``learn_tokens``)
    optimizer_steps: float | None = None  #: optimizer steps taken
    act_cpu_seconds: float | None = None  #: CPU seconds of the node's act
    learn_cpu_seconds: float | None = None  #: CPU seconds of the node's learn


def summarise(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> list[Row]:
    """The table rows: per experiment, cumulative reward with CI and paired ratio to 8/0."""
    window = smoothing_window(config.rounds)
    cumulative = {e: np.array(v) for e, v in cumulative_rewards(runs).items()}
    batch = {e: np.array(v) for e, v in cumulative_rewards(runs, "batch_rewards").items()}
    base, batch_base = cumulative.get("8/0"), batch.get("8/0")
    paper_base = BY_LABEL["8/0"].paper
    rows = []
    for label, rs in runs.items():
        e = BY_LABEL[label]
        mean, ci = mean_ci(cumulative[label])
        ratio = ratio_ci = None
        if base is not None and np.all(base > 0):  # no ratio to a baseline that earned nothing
            ratio, ratio_ci = mean_ci(cumulative[label] / base)
        batch_ratio = batch_ratio_ci = None
        if label in batch and batch_base is not None and np.all(batch_base > 0):
            batch_ratio, batch_ratio_ci = mean_ci(batch[label] / batch_base)
        final = float(np.mean([np.nanmean(r["rewards"][-window:]) for r in rs]))
        generated = np.array([r["generated"].sum(axis=0).mean() for r in rs])  # per node
        held = [r["held_out_scores"][-1].mean() for r in rs if len(r["held_out_scores"])]
        rows.append(Row(
            experiment=label, local=config.swarm_config(e).train_budget - e.num_external,
            external=e.num_external,
            seeds=len(rs), cumulative=mean, cumulative_ci=ci, ratio=ratio, ratio_ci=ratio_ci,
            batch_ratio=batch_ratio, batch_ratio_ci=batch_ratio_ci,
            paper=e.paper, paper_ratio=(e.paper / paper_base) if e.paper else None,
            generated=float(generated.mean()) / config.rounds,
            reward_per_1k=float(np.mean(1000 * cumulative[label] / generated)),
            final_reward=final, held_out=float(np.mean(held)) if held else None, note=e.note,
            **{field: per_node_round(rs, key) for field, key in COMPUTE.items()},
        ))
    return rows


COMPUTE = {"generated_tokens": "generated_tokens", "trained_tokens": "learn_tokens",
           "optimizer_steps": "optimizer_steps", "act_cpu_seconds": "act_cpu_seconds",
           "learn_cpu_seconds": "learn_cpu_seconds"}
"""``Row`` field -> the run array it is the per-node-round mean of."""


def per_node_round(rs: Sequence[dict[str, Any]], key: str) -> float | None:
    """Mean of run array ``key`` over the node-rounds of every run in ``rs`` that have a value
    (NaN where none has); None where a run lacks the array."""
    if not all(key in r for r in rs):
        return None
    values = np.concatenate([np.asarray(r[key], dtype=np.float64).ravel() for r in rs])
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else float("nan")


def format_value(value: float | None, ci: float | None = None, digits: int = 1) -> str:
    """A table cell: the value, '± ci' when there is one, '–' for none."""
    if value is None or not np.isfinite(value):
        return "–"
    text = f"{value:.{digits}f}"
    if ci is not None and np.isfinite(ci):
        text += f" ± {ci:.{digits}f}"
    return text


def ratio_digits(ratio: float | None, ci: float | None) -> int:
    """A ratio to 8/0 is printed with 2 decimals, or 3 where 2 would hide its side of 1."""
    if ratio is None or not np.isfinite(ratio) or not ci:  # none, or 8/0's own 1.00 ± 0.00
        return 2
    return ci_digits(ratio, ci, 2, point=1.0)


def format_ratio(ratio: float | None, ci: float | None) -> str:
    return format_value(ratio, ci, ratio_digits(ratio, ci))


def format_markdown(rows: Sequence[Row], config: ReproduceConfig,
                    runs: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """The table and its verdict (``results.md`` begins with them); with ``runs``, then what
    changed over the run in each configuration (``change_markdown``), where the runs were
    evaluated before round 0."""
    learner, protocol, seeds = learner_text(config), protocol_text(config), seeds_text(config)
    lines = [
        f"Cumulative reward (sum over rounds of the swarm-mean reward), {config.n_agents} nodes, "
        f"{config.rounds} rounds, {learner}, {protocol}; mean ± 95% CI over {seeds}. The "
        "ratio to 8/0 is paired by seed. The paper's column is Qwen2.5-0.5B, 8 nodes, 2000 "
        "rounds, one seed" + (": compare ratios, not absolute values." if config.rounds != 2000
                              or config.learner == "sim" else ".") + " Generated: completions "
        "a node generated per round; per 1k: cumulative reward per 1,000 completions a node "
        "generated over the run. The reward is each node's own completions' (the env's); "
        "batch ratio: the same ratio of the reward of everything a node trained on, received "
        "groups included (genrl's log; it favours filtering and sharing by construction).",
        "",
        "| configuration | I | J | cumulative reward | ratio to 8/0 | batch ratio | paper "
        "| paper ratio | generated | per 1k | final moving reward | held-out pass@1 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.experiment} | {r.local} | {r.external} "
            f"| {format_value(r.cumulative, r.cumulative_ci)} "
            f"| {format_ratio(r.ratio, r.ratio_ci)} "
            f"| {format_ratio(r.batch_ratio, r.batch_ratio_ci)} "
            f"| {format_value(r.paper, None, 2)} "
            f"| {format_value(r.paper_ratio, None, 2)} | {format_value(r.generated, None, 0)} "
            f"| {format_value(r.reward_per_1k, None, 2)} | {format_value(r.final_reward, None, 3)} "
            f"| {format_value(r.held_out, None, 3)} |")
    lines += ["", verdict(rows, config)]
    matched = matched_markdown(runs) if runs else ""
    if matched:
        lines += ["", matched]
    compute = compute_markdown(rows)
    change = change_markdown(runs, smoothing_window(config.rounds)) if runs else ""
    return ("\n".join(lines) + "\n" + ("\n" + compute if compute else "")
            + ("\n" + change if change else ""))


def headline_markdown(rows: Sequence[Row], config: ReproduceConfig,
                      runs: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """What ``sapo-env reproduce`` prints (``make demo``'s table): led by what the sweep
    compares, each configuration's ratio to 8/0, then its cumulative reward, held-out pass@1
    and the paper's ratio; the verdict; sharing against its compute-matched control where both
    ran (``matched_markdown``); a line naming what only ``results.md``'s table has (the
    batch ratio among them, which is not this comparison); what changed over the run."""
    lines = [
        f"{config.n_agents} nodes, {config.rounds} rounds, {learner_text(config)}, "
        f"{protocol_text(config)}; mean ± 95% CI over {seeds_text(config)}. Ratio to 8/0: a "
        "configuration's cumulative reward (sum over rounds of the swarm-mean reward of the "
        "nodes' own completions) over 8/0's, paired by seed; below 1, it earned less than "
        "isolated training. The paper's ratio is Qwen2.5-0.5B's, 2000 rounds, one seed.",
        "",
        "| configuration | ratio to 8/0 | cumulative reward | I | J | held-out pass@1 "
        "| paper's ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.experiment} | {format_ratio(r.ratio, r.ratio_ci)} "
            f"| {format_value(r.cumulative, r.cumulative_ci)} | {r.local} | {r.external} "
            f"| {format_value(r.held_out, None, 3)} | {format_value(r.paper_ratio, None, 2)} |")
    matched = matched_markdown(runs) if runs else ""
    lines += ["", verdict(rows, config)] + (["", matched] if matched else []) + ["",
              f"The full table in {config.out}/results.md adds the paper's cumulative rewards, "
              "the completions a node generated, its reward per 1,000 of them, the final "
              "moving reward, the compute per node-round and the batch ratio (the same ratio of "
              "the reward of everything a node trained on, received groups included: genrl's "
              "log, which favours sharing and filtering by construction; not this comparison)."]
    change = change_markdown(runs, smoothing_window(config.rounds)) if runs else ""
    return "\n".join(lines) + "\n" + ("\n" + change if change else "")


def matched_markdown(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Each sharing configuration against its compute-matched control (``COMPUTE_MATCHED``)
    where both ran on the same seeds: the ratio of their cumulative rewards, paired by seed,
    with its 95% CI, the seeds in which sharing earned more, and whether the CI excludes 1 (a
    line without a ratio where the control earned nothing in a seed). Empty where no pair ran
    on the same seeds."""
    cumulative = cumulative_rewards(runs)
    lines = []
    for shared, control in COMPUTE_MATCHED.items():
        if shared not in cumulative or control not in cumulative:
            continue
        a, b = np.array(cumulative[shared]), np.array(cumulative[control])
        if len(a) != len(b):
            continue  # not run on the same seeds: nothing to pair
        lead = (f"At equal generation and optimizer steps: {shared} against {control} (which "
                f"generates what {shared} generates and steps as often, without sharing)")
        if not np.all(b > 0):
            lines.append(f"{lead}: no ratio, {control} earned nothing in a seed.")
            continue
        ratio, ci = mean_ci(a / b)
        if len(a) < 2:
            said = "one seed, so no confidence interval"
        else:
            said = {1: "sharing earned more", -1: "sharing earned less",
                    0: "not distinguishable here (the CI includes 1)"}[
                side_as_printed(ratio, ci, 1.0, ratio_digits(ratio, ci))]
        lines.append(f"{lead}, {format_ratio(ratio, ci)}, paired by seed, higher in "
                     f"{int((a > b).sum())} of {len(a)} seeds: {said}.")
    return "\n".join(lines)


def learner_text(config: ReproduceConfig) -> str:
    """The sweep's learners in words."""
    tiny = config.tiny
    autocast = ", bfloat16 autocast" if tiny.compute_dtype() == "bfloat16" else ""
    return {"sim": "simulated learners", "grpo": f"GRPO ({config.model})",
            "tiny": f"tiny transformer {tiny_kind(tiny)} ({' / '.join(tiny.specialties)}, "
                    f"GRPO lr {tiny.learning_rate:g}{autocast})"}.get(
        config.learner if isinstance(config.learner, str) else "",
        f"agents of {describe(config.agent_factory())}")


def protocol_text(config: ReproduceConfig) -> str:
    return ("the paper's protocol (a node with J external groups answers 8 - J questions)"
            if config.protocol == "paper" else
            "the fixed protocol (every node answers 8 questions whatever its J)")


def compute_markdown(rows: Sequence[Row]) -> str:
    """What a node-round cost in each configuration, so that arms can be compared at equal
    compute, not only per round; empty where no row has its CPU seconds (run files written
    before they were recorded), so that the tables of those runs read as they always did."""
    if all(r.act_cpu_seconds is None for r in rows):
        return ""
    lines = ["Compute per node-round (one node's act and learn in one round; mean over nodes, "
             "rounds and seeds): completions and completion tokens it generated (EOS "
             "included), completion tokens it trained on, optimizer steps it took, and the CPU "
             "time of its act and learn calls in milliseconds (the run's process; a batched "
             "swarm's call divided evenly over its nodes; timings, which vary from run to "
             "run). –: not reported by this learner, or not recorded.", "",
             "| configuration | completions generated | tokens generated | tokens trained "
             "| optimizer steps | act CPU ms | learn CPU ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ms = [None if v is None else 1000 * v for v in (r.act_cpu_seconds, r.learn_cpu_seconds)]
        lines.append(
            f"| {r.experiment} | {format_value(r.generated, None, 1)} "
            f"| {format_value(r.generated_tokens, None, 1)} "
            f"| {format_value(r.trained_tokens, None, 1)} "
            f"| {format_value(r.optimizer_steps, None, 2)} "
            f"| {format_value(ms[0], None, 1)} | {format_value(ms[1], None, 1)} |")
    return "\n".join(lines) + "\n"


def change_markdown(runs: dict[str, list[dict[str, Any]]], window: int,
                    baseline: str = "8/0") -> str:
    """What changed from the start of each run to its end, per configuration: held-out pass@1
    before round 0 and at the last evaluation, and the training reward's first and last
    ``window`` rounds (mean over nodes; each seed's change, mean ± 95% CI over seeds); then
    which configurations moved, so that a ratio below 1 is read as what it is (one side got
    worse, or the other better). Empty where the runs were not evaluated before round 0."""
    if not all(len(r["held_out_rounds"]) > 1 and r["held_out_rounds"][0] == -1
               for rs in runs.values() for r in rs):
        return ""
    lines = ["What changed over the run (mean over nodes; the change is each seed's, mean ± "
             "95% CI over seeds; a CI that includes 0 is no change this run can tell):", "",
             "| configuration | held-out pass@1, before → after | change "
             f"| training reward, first {window} → last {window} rounds | change |",
             "| --- | ---: | ---: | ---: | ---: |"]
    moved: dict[str, list[str]] = {}  # per configuration: held-out's, training reward's
    for label, rs in runs.items():
        held = np.array([[np.nanmean(r["held_out_scores"][0]),
                          np.nanmean(r["held_out_scores"][-1])] for r in rs])
        train = np.array([[np.nanmean(r["rewards"][:window]), np.nanmean(r["rewards"][-window:])]
                          for r in rs])
        cells, moved[label] = [], []
        for pair in (held, train):
            change, ci = mean_ci(pair[:, 1] - pair[:, 0])
            cells += [f"{pair[:, 0].mean():.3f} → {pair[:, 1].mean():.3f}",
                      f"{change:+.3f}" + (f" ± {ci:.3f}" if np.isfinite(ci) else "")]
            side = side_as_printed(change, ci, 0.0, 3) if np.isfinite(ci) else None  # as printed
            moved[label].append({None: "unclear", 1: "rose", -1: "fell", 0: "flat"}[side])
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    words = {"rose": "rose", "fell": "fell", "flat": "unchanged within its CI",
             "unclear": "one seed, no CI"}
    lines += ["", "; ".join(f"{label}: held-out {words[m[0]]}, training reward {words[m[1]]}"
                            for label, m in moved.items()) + "."]
    worse = [label for label, m in moved.items() if label != baseline and "fell" in m]
    if moved.get(baseline) == ["flat", "flat"]:
        lines[-1] += (f" {baseline} did not get better over these rounds, so where another "
                      f"configuration's ratio to it is below 1, the cost is that configuration "
                      f"doing worse, not {baseline} doing better"
                      + (f" ({', '.join(worse)} fell)." if worse else "."))
    return "\n".join(lines) + "\n"


def tiny_kind(tiny: Any) -> str:
    """What a swarm of tiny learners is, in words."""
    if tiny.partial_specialists:
        return (f"partial specialists on basic_arithmetic ({' / '.join(tiny.partial_specialists)}"
                f" only, a base per part and seed, warm-start target {tiny.target_accuracy:g})")
    if not tiny.common_base:
        return "specialists"
    if tiny.strong_nodes:
        return (f"nodes from a common base per seed (warm-start target {tiny.target_accuracy:g};"
                f" {tiny.strong_nodes} strong, its base trained on to "
                f"{tiny.strong_target_accuracy:g})")
    widths = " / ".join(str(h) for h in tiny.hidden_sizes)
    return (f"nodes from a common base per seed (warm-start target {tiny.target_accuracy:g}"
            + (f", widths {widths}" if len(tiny.hidden_sizes) > 1 else "")
            + (f", off-policy correction {tiny.off_policy_correction}"
               if tiny.off_policy_correction != "none" else "") + ")")


def verdict(rows: Sequence[Row], config: ReproduceConfig) -> str:
    """What the table can and cannot say: which ratios to 8/0 are distinguishable from 1."""
    if config.quick and config.learner != "tiny":
        # 100 rounds is before the simulated nodes learn much at all (the full run's curves
        # rise from round ~250): any difference here is noise, whatever its interval says.
        return (f"**This is the quick run ({config.rounds} rounds x {seeds_text(config)}): a "
                "smoke test of the pipeline, too short to conclude anything** about the "
                "paper's 2000-round comparison. `sapo-env reproduce` runs the full sweep; its "
                "results are in records/reproduce/.")
    text = []
    if config.quick:
        text.append(f"This is the quick run ({config.rounds} rounds x {seeds_text(config)}); "
                    "`sapo-env reproduce --learner tiny` runs the full sweep, whose results "
                    "are in records/tiny-reproduce/.")
    compared = [r for r in rows if r.experiment != "8/0" and r.ratio is not None]
    if not compared:
        text.append("No ratio to 8/0 in this run (8/0 was not run, or earned nothing).")
        return " ".join(text)
    if config.seeds < 2:
        text.append("**One seed: there is no confidence interval, so this table cannot tell a "
                    "difference from noise.** Run with `--seeds 3` or more.")
        return " ".join(text)
    clear = [r for r in compared if r.ratio_ci is not None
             and side_as_printed(r.ratio, r.ratio_ci, 1.0, ratio_digits(r.ratio, r.ratio_ci)) != 0]
    unclear = [r for r in compared if r not in clear]
    if clear:
        text.append("Distinguishable from 8/0 (the ratio's 95% CI excludes 1): "
                    + ", ".join(f"{r.experiment} ({r.ratio:.{ratio_digits(r.ratio, r.ratio_ci)}f})"
                                for r in clear) + ".")
    if unclear:
        text.append("**Not distinguishable from 8/0 here** (the CI includes 1): "
                    + ", ".join(r.experiment for r in unclear) + ".")
    return " ".join(text)


def seeds_text(config: ReproduceConfig) -> str:
    return f"{config.seeds} seed{'s' if config.seeds != 1 else ''}"


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[x.name for x in dataclasses.fields(Row)])
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in dataclasses.asdict(r).items()})
