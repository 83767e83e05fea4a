"""The reproduce sweep's figures say what they show: held-out points as points with their
intervals, on an axis of their own from 0, and every node named with its kind."""

from __future__ import annotations

import numpy as np
import pytest

from sapo_experiments.reproduce import ReproduceConfig
from sapo_experiments.reproduce.figures import (
    LINE_FROM,
    MOST_TICKS,
    PASS_AXIS_TOPS,
    generated_so_far,
    generation_figure,
    held_out_figure,
    held_out_points,
    labelled_rounds,
    plot_figures,
    trajectory_figure,
)

pytest.importorskip("matplotlib")


def fake_runs(evaluations: int, seeds: int = 4, rounds: int = 40, nodes: int = 8,
              level: float = 0.2) -> dict[str, list[dict[str, np.ndarray]]]:
    """Two configurations' runs with held-out scores near ``level`` before round 0 and
    ``evaluations - 1`` times after it."""
    rng = np.random.default_rng(0)
    held_rounds = np.linspace(-1, rounds - 1, evaluations).astype(int)
    return {label: [{"rewards": rng.uniform(0, 0.4, (rounds, nodes)),
                     "held_out_rounds": held_rounds,
                     "held_out_scores": np.clip(level + rng.normal(0, 0.03,
                                                                   (evaluations, nodes)), 0, 1)}
                    for _ in range(seeds)] for label in ("8/0", "4/4")}


def config(tmp_path, **fields) -> ReproduceConfig:
    return ReproduceConfig(learner="tiny", quick=True, out=tmp_path, **fields)


def test_two_held_out_evaluations_are_points_with_ci_bars_on_an_axis_from_zero(tmp_path):
    runs = fake_runs(evaluations=2)
    fig = held_out_figure(config(tmp_path), runs)
    held, train = fig.axes
    assert held is not train and held.get_ylabel() != train.get_ylabel()
    assert "pass@1" in held.get_ylabel() and "pass@1" not in train.get_ylabel()
    x, y, ci = held_out_points(runs["8/0"])
    assert list(x) == [0, 40] and np.all(ci > 0)  # rounds trained; four seeds: an interval
    # points, not a line between two evaluations; one set of error bars per configuration
    data_lines = [bars[0] for bars in held.containers]  # an errorbar's data line comes first
    assert len(data_lines) == 2 and all(line.get_marker() == "o"
                                        and line.get_linestyle() == "None"
                                        for line in data_lines)
    low, top = held.get_ylim()
    assert low == 0 and top in PASS_AXIS_TOPS
    assert top >= max(np.max(held_out_points(rs)[1] + held_out_points(rs)[2])
                      for rs in runs.values())
    assert f"0 to {top:g}" in held.get_ylabel()
    assert train.get_ylim()[0] == 0


def test_many_held_out_evaluations_are_joined_and_a_high_score_widens_the_axis(tmp_path):
    fig = held_out_figure(config(tmp_path, rounds=200),
                          fake_runs(evaluations=LINE_FROM, rounds=200, level=0.6))
    held = fig.axes[0]
    joined = [bars[0] for bars in held.containers]
    assert len(joined) == 2 and all(line.get_linestyle() == "-"
                                    and len(line.get_xdata()) == LINE_FROM for line in joined)
    assert held.get_ylim() == (0, 1.0)


def test_a_long_runs_evaluations_are_labelled_few_enough_to_read(tmp_path):
    assert labelled_rounds([0, 20, 40]) == [0, 20, 40]
    evaluated = list(range(0, 2001, 100))  # a 2000-round run evaluated every 100 rounds
    assert labelled_rounds(evaluated) == list(range(0, 2001, 200))
    assert labelled_rounds(evaluated[1:]) == list(range(200, 2001, 200))  # none before training
    fig = held_out_figure(config(tmp_path, rounds=2000),
                          fake_runs(evaluations=21, rounds=2000))
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(labels) <= MOST_TICKS and labels[0] == "before\ntraining" and labels[-1] == "2000"


def test_one_seed_draws_no_error_bars_and_says_so(tmp_path):
    fig = held_out_figure(config(tmp_path, seeds=1), fake_runs(evaluations=2, seeds=1))
    held = fig.axes[0]
    assert all(not any(bars) for c in held.containers for bars in c[2:])
    assert "one seed" in held.get_title()


def test_trajectories_name_each_node_with_its_kind_and_the_seed(tmp_path):
    fig = trajectory_figure(config(tmp_path), fake_runs(evaluations=2))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) == 8
    assert {"node_0 (warm-started on basic_arithmetic)",
            "node_1 (warm-started on spell_backward)"} <= set(labels)
    assert "seed 0 (one of 4" in fig._suptitle.get_text()
    # a colour family per kind: node_0 and node_2 closer to each other than to node_1
    lines = fig.axes[0].lines
    rgb = [np.array(line.get_color()[:3]) for line in lines[:3]]
    assert np.linalg.norm(rgb[0] - rgb[2]) < np.linalg.norm(rgb[0] - rgb[1])


def test_plot_figures_writes_the_four_files(tmp_path):
    files = plot_figures(config(tmp_path), fake_runs(evaluations=2))
    assert [f.name for f in files] == ["figure1_trajectories.png",
                                       "figure2_moving_average.png",
                                       "reward_by_generation.png", "held_out.png"]
    assert all(f.stat().st_size > 0 for f in files)


def with_generation(runs, tokens=True):
    """``runs`` with ``generated`` (8/0: 64 completions a node-round, 4/4: 32) and, with
    ``tokens``, ``generated_tokens`` (10 a completion), as a tiny sweep's run files hold."""
    per_round = {"8/0": 64, "4/4": 32}
    return {label: [{**r, "generated": np.full(r["rewards"].shape, per_round[label]),
                     **({"generated_tokens": np.full(r["rewards"].shape,
                                                     10.0 * per_round[label])}
                        if tokens else {})}
                    for r in rs] for label, rs in runs.items()}


def test_each_arm_is_drawn_against_rounds_and_against_what_a_node_generated(tmp_path):
    runs = with_generation(fake_runs(evaluations=2, rounds=40))
    assert generated_so_far(runs["4/4"]).tolist() == [32.0 * (t + 1) for t in range(40)]
    fig = generation_figure(config(tmp_path), runs)
    by_round, by_completions, by_tokens = fig.axes
    assert by_round.get_xlabel() == "round"
    assert "completions generated per node" in by_completions.get_xlabel()
    assert "tokens generated per node" in by_tokens.get_xlabel()
    ends = {line.get_label(): line.get_xdata()[-1] for line in by_completions.lines}
    assert ends == {"8/0": 64 * 40, "4/4": 32 * 40}  # 4/4 has generated half at round 40
    assert by_tokens.lines[0].get_xdata()[-1] == 640 * 40


def test_runs_without_token_counts_get_no_token_panel(tmp_path):
    """Older run files, and the simulated learner's NaN, have no tokens to draw against."""
    runs = with_generation(fake_runs(evaluations=2), tokens=False)
    assert len(generation_figure(config(tmp_path), runs).axes) == 2
    runs = with_generation(fake_runs(evaluations=2))
    runs["4/4"][0]["generated_tokens"] = np.full((40, 8), np.nan)
    assert generated_so_far(runs["4/4"], "generated_tokens") is None
    assert len(generation_figure(config(tmp_path), runs).axes) == 2
