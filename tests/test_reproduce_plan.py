"""What ``sapo-env reproduce`` says before it starts (what it trains, for how long) and after
(what changed over the run, so that a ratio below 1 is read as what it is)."""

from __future__ import annotations

import numpy as np
import pytest

from sapo_experiments.learners import TinyLearners
from sapo_experiments.reproduce import ReproduceConfig
from sapo_experiments.reproduce.plan import plan_text
from sapo_experiments.reproduce.report import change_markdown


def test_the_demo_says_what_it_trains_and_how_long_its_warm_starts_and_runs_take(
        tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))  # nothing warm-started yet
    config = ReproduceConfig(learner="tiny", quick=True, out=tmp_path / "out", jobs=2,
                             tiny=TinyLearners(dtype="float32"))
    bullets = plan_text(config).split("\n- ")
    text = " ".join(plan_text(config).split())  # as read, not as folded
    assert "nodes 0, 2, 4, 6 warm-started on basic_arithmetic" in text
    assert "nodes 1, 3, 5, 7 warm-started on spell_backward" in text
    assert "40 rounds x 4 seeds = 12 runs" in text and "8/0, no sharing" in text
    warm = " ".join(next(b for b in bullets if "warm start" in b).split())
    assert warm.startswith("First, 2 of 2 warm starts") and str(tmp_path / "cache") in warm
    # at most 600 steps x 0.36 s of CPU each, two at a time
    assert "at most 3.6 min wall, 7.2 min of CPU" in warm
    runs = " ".join(bullets[-1].split())
    # 12 runs x 40 rounds x 8 nodes x 0.41 s, over 2 processes
    assert "12 runs to do, 2 at a time: about 13.1 min wall, 26.2 min of CPU" in runs


def test_the_simulated_quick_sweep_has_no_warm_start_and_says_its_time(tmp_path):
    text = " ".join(plan_text(ReproduceConfig(quick=True, out=tmp_path, jobs=1)).split())
    assert "simulated learners" in text and "warm start" not in text
    assert "12 runs to do, 1 at a time: about 58 s wall, 58 s of CPU" in text


def runs_with(before: float, after: dict[str, float], seeds: int = 4, rounds: int = 40):
    rng = np.random.default_rng(1)
    held_rounds = np.array([-1, rounds - 1])

    def run(end: float) -> dict[str, np.ndarray]:
        scores = np.stack([before + rng.normal(0, 0.0005, 8), end + rng.normal(0, 0.0005, 8)])
        rewards = np.linspace(before, end, rounds)[:, None] + rng.normal(0, 0.002, (rounds, 8))
        return {"held_out_rounds": held_rounds, "held_out_scores": scores, "rewards": rewards}

    return {label: [run(end) for _ in range(seeds)] for label, end in after.items()}


def test_a_cost_is_said_to_be_sharing_getting_worse_when_8_0_stays_flat():
    text = change_markdown(runs_with(0.24, {"8/0": 0.24, "4/4": 0.20}), window=4)
    assert "| 8/0 | 0.240 → 0.240 |" in text and "| 4/4 | 0.240 → 0.200 |" in text
    assert "8/0: held-out unchanged within its CI" in text and "4/4: held-out fell" in text
    assert "the cost is that configuration doing worse, not 8/0 doing better (4/4 fell)" in text
    rising = change_markdown(runs_with(0.24, {"8/0": 0.30, "4/4": 0.26}), window=4)
    assert "8/0: held-out rose" in rising and "not 8/0 doing better" not in rising


def test_no_change_table_without_an_evaluation_before_round_0():
    runs = runs_with(0.2, {"8/0": 0.2})
    for r in runs["8/0"]:
        r["held_out_rounds"] = np.array([9, 39])
    assert change_markdown(runs, window=4) == ""


def test_a_finished_sweep_says_so_and_no_warm_start(tmp_path, monkeypatch):
    from sapo_experiments.reproduce import plan

    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))  # nothing cached...
    monkeypatch.setattr(plan, "is_finished", lambda path, key: True)  # ...nor needed
    text = " ".join(plan_text(ReproduceConfig(learner="tiny", quick=True, out=tmp_path)).split())
    assert "Every run is finished" in text and "warm start" not in text
    one = plan_text(ReproduceConfig(quick=True, out=tmp_path, seeds=1, experiments=("8/0",)))
    assert "1 seed = 1 run." in " ".join(one.split())
