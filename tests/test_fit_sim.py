"""records/bench-ratio-real/fit_sim.py, the simulator's fit to the real track: its policies are
the bench's, its simulated runs repeat with their seed, and its summaries say what they claim."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "records" / "bench-ratio-real" / "fit_sim.py"


@pytest.fixture(scope="module")
def fit():
    spec = importlib.util.spec_from_file_location("fit_sim", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_schedule_switches_halfway_and_starts_in_force(fit):
    policy = fit.policy("schedule-4,0")
    assert [policy.num_external_at(t) for t in (0, 99, 100, 199)] == [4, 4, 0, 0]
    assert fit.first_j("schedule-4,0") == 4 and fit.first_j("fixed-6") == 6
    assert fit.policy("fixed-6").choose({"train_budget": 8, "round": 3}) == 6


def test_a_simulated_run_repeats_with_its_seed_and_plays_the_tracks_questions(fit):
    a, b = (fit.simulate({}, "fixed-4", 0, rounds=5) for _ in range(2))
    other = fit.simulate({}, "fixed-4", 1, rounds=5)
    assert np.array_equal(a["rewards"], b["rewards"]) and a["rewards"].shape == (5, 8)
    assert not np.array_equal(a["rewards"], other["rewards"])
    assert np.all(a["generated"][1:] == 8 * 4)  # 4 questions x 8 completions once J = 4 holds


def test_blocks_average_rounds_then_runs_and_judged_says_inside_or_not(fit):
    runs = [{"rewards": np.tile(np.arange(40, dtype=float)[:, None], (1, 8)) + k}
            for k in (0, 2)]
    assert fit.blocks(runs).tolist() == [10.5, 30.5]  # rounds 0-19 and 20-39, seeds +1 on average
    assert fit.judged("x", np.array([1.0]), np.array([1.0, 1.2, 0.8]))["inside"]
    assert not fit.judged("x", np.array([2.0]), np.array([1.0, 1.1, 0.9]))["inside"]
