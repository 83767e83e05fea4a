"""The benchmark's scores at equal generation and held out (sapo_experiments.bench_ratio.scores),
on small synthetic run arrays."""

from __future__ import annotations

import numpy as np
import pytest

from sapo_experiments.bench_ratio.report import per_seed
from sapo_experiments.bench_ratio.scores import (
    generation_budget,
    held_out_at_end,
    per_seed_scores,
    reward_at_budget,
    round_rewards,
    run_scores,
)


def run(rewards, generated, uses_policy, held_out=None):
    out = {"rewards": np.asarray(rewards, dtype=np.float64),
           "generated": np.asarray(generated, dtype=np.float64),
           "uses_policy": np.asarray(uses_policy), "num_external": np.zeros(np.shape(rewards))}
    if held_out is not None:
        out["held_out_scores"] = np.asarray(held_out, dtype=np.float64)
    return out


def test_the_budget_reached_at_a_round_boundary_counts_that_round_and_no_more():
    rewards = np.array([0.1, 0.2, 0.4, 0.8])
    summed, last = reward_at_budget(rewards, np.array([8, 8, 8, 8]), 16)
    assert last == 1  # reached in the second round (0-based 1), not the third
    assert summed == pytest.approx(0.1 * 8 + 0.2 * 8)  # not + 0.4 * 8, nor without 0.2 * 8
    summed, last = reward_at_budget(rewards, np.array([8, 8, 8, 8]), 8)
    assert (summed, last) == (pytest.approx(0.8), 0)
    summed, last = reward_at_budget(rewards, np.array([8, 8, 8, 8]), 32)  # the whole run
    assert (summed, last) == (pytest.approx(8 * 1.5), 3)


def test_the_round_that_crosses_the_budget_counts_only_the_completions_within_it():
    summed, last = reward_at_budget(np.array([0.5, 0.25, 1.0]), np.array([8, 8, 8]), 12)
    assert last == 1 and summed == pytest.approx(0.5 * 8 + 0.25 * 4)
    # uneven rounds (an adaptive J): 4, then 16, then 8 completions
    summed, last = reward_at_budget(np.array([1.0, 0.5, 0.0]), np.array([4, 16, 8]), 20)
    assert last == 1 and summed == pytest.approx(4 + 0.5 * 16)
    summed, last = reward_at_budget(np.array([1.0, 0.5, 0.0]), np.array([4, 16, 8]), 21)
    assert last == 2 and summed == pytest.approx(12.0)  # one completion of round 2, at 0.0


def test_rounds_without_completions_count_nothing_and_their_nan_reward_is_skipped():
    rewards = np.array([np.nan, 0.5, np.nan, 1.0])
    generated = np.array([0, 8, 0, 8])
    assert round_rewards(rewards, generated).tolist() == [0.0, 4.0, 0.0, 8.0]
    summed, last = reward_at_budget(rewards, generated, 12)
    assert last == 3 and summed == pytest.approx(4.0 + 4 * 1.0)
    with pytest.raises(ValueError, match="fewer than the budget 17"):
        reward_at_budget(rewards, generated, 17)
    with pytest.raises(ValueError, match="budget must be > 0"):
        reward_at_budget(rewards, generated, 0)


def test_the_budget_is_the_least_a_policy_node_generated_among_those_that_answered():
    low = run(np.full((4, 3), 0.5), [[16, 64, 8]] * 4, [True, True, False])  # node 2: companion
    high = run(np.full((4, 2), 0.5), [[64, 0]] * 4, [True, True])  # node 1 never answers
    assert generation_budget([low, high]) == 64  # low's node 0: 4 x 16; not the companion's 32
    with pytest.raises(ValueError, match="no policy node generated"):
        generation_budget([run(np.full((2, 1), np.nan), [[0]] * 2, [True])])


def test_run_scores_put_every_policy_at_the_least_generating_policys_budget():
    rounds = 10
    # fixed-0-like: 64 completions a round, reward 0.2; fixed-6-like: 16 a round, reward 0.3
    wide = run(np.full((rounds, 2), 0.2), np.full((rounds, 2), 64), [True, True])
    narrow = run(np.full((rounds, 2), 0.3), np.full((rounds, 2), 16), [True, True])
    budget = generation_budget([wide, narrow])
    assert budget == 160
    s_wide, s_narrow = run_scores(wide, budget), run_scores(narrow, budget)
    assert s_narrow["budget_round"] == rounds  # the least-generating run is used whole
    assert s_wide["budget_round"] == 3  # 64, 128, 192 >= 160: its third round
    assert s_wide["at_budget"] == pytest.approx(0.2 * 160)
    assert s_narrow["at_budget"] == pytest.approx(0.3 * 160)
    # per round, the leaderboard's cumulative: fixed-0-like loses less than at equal generation
    assert s_wide["per_round"] == pytest.approx(per_seed([wide])["cumulative"][0]) == 2.0
    assert np.isnan(s_wide["held_out"])


def test_a_node_that_never_answers_scores_zero_at_the_budget_and_sets_no_round():
    r = run([[0.5, np.nan]] * 4, [[8, 0]] * 4, [True, True])
    scores = run_scores(r, 16)
    assert scores["at_budget"] == pytest.approx((0.5 * 16 + 0.0) / 2)
    assert scores["budget_round"] == 2  # node 0 alone


def test_held_out_at_the_end_reads_the_last_evaluation_of_the_policy_nodes():
    r = run(np.zeros((3, 3)), np.ones((3, 3)), [True, True, False],
            held_out=[[0.9, 0.9, 0.9], [0.1, 0.3, 1.0]])
    assert held_out_at_end(r) == pytest.approx(0.2)  # not the companion's 1.0, not row 0
    r["held_out_scores"][-1, 0] = np.nan  # a node that sat it out
    assert held_out_at_end(r) == pytest.approx(0.3)
    r["held_out_scores"] = np.zeros((0, 3))
    assert np.isnan(held_out_at_end(r))


def test_per_seed_scores_keep_the_seed_order():
    seeds = [run(np.full((2, 1), v), np.full((2, 1), 8), [True]) for v in (0.1, 0.5)]
    scores = per_seed_scores(seeds, 8)
    assert scores["at_budget"].tolist() == pytest.approx([0.8, 4.0])
    assert scores["per_round"].tolist() == pytest.approx([0.2, 1.0])
