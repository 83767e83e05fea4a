"""Ratio policies (agents.ratio.rules, agents.ratio.bandits): J chosen per node and round.

Every loop here follows the runner's order: round t's ``choose(obs_t)`` picks J for round t+1,
then ``update(reward_t, info_t)`` reports round t, whose J in force is ``info_t["num_external"]``.
Expected numbers are computed by hand, from the formulas in the docstrings, not by the code.
"""

from __future__ import annotations

import doctest
import importlib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sapo_env
import sapo_env.runtime
from agents.ratio.bandits import EXP3, PAYOFFS, DiscountedUCB, ThompsonSampling
from agents.ratio.contextual import CONTEXT, LinUCBRatio
from agents.ratio.rules import FixedRatio, LearningProgress, PoolQuality, ScheduledRatio


def obs(budget: int, j: int, round: int = 0) -> dict:
    """The fields a ratio policy reads; the paper's protocol: none to answer at J = budget."""
    return {"train_budget": budget, "num_external": j, "round": round,
            "questions": ("q",) * (budget - j)}


def info(j: int, generated: int = 8, pool: float | None = 0.5, **overrides) -> dict:
    """An infos entry with every key the env sets (SwarmEnv._infos)."""
    entry = {
        "num_external": j, "generated_completions": generated, "task_scores": {},
        "local_groups": 4, "external_groups": j, "local_shortfall": 0, "external_shortfall": 0,
        "pool_size": 10, "pool_size_filtered": 8, "pool_mean_reward_filtered": pool,
        "zero_advantage_fraction": 0.5 if generated else None, "shared_groups": 4,
        "shared_mean_reward": 0.5, "taken_by_others": 1,
    }
    entry.update(overrides)
    return entry


def drive(policy, budget: int, j0: int, rounds):
    """Runner order over scripted rounds of (reward, infos overrides); returns each round's
    choice (the J of the round after)."""
    j, chosen = j0, []
    for t, (reward, extra) in enumerate(rounds):
        chosen.append(policy.choose(obs(budget, j, t)))
        policy.update(reward, info(j, **extra))
        j = chosen[-1]
    return chosen


# ---------------------------------------------------------------- FixedRatio


def test_fixed_ratio_always_gives_its_J_and_names_the_budget_it_exceeds():
    policy = FixedRatio(2)
    assert drive(policy, 8, 4, [(0.5, {})] * 3) == [2, 2, 2]
    with pytest.raises(ValueError, match=r"FixedRatio num_external=5 .* train_budget=4"):
        FixedRatio(5).choose(obs(4, 2))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="num_external must be an int >= 0"):
            FixedRatio(bad)


# ---------------------------------------------------------------- PoolQuality


def test_pool_quality_follows_the_pool_against_own_recent_reward():
    # budget 4: J in [0, 3] by default; own = mean of the last 2 measured rewards
    policy = PoolQuality(margin=0.1, window=2)
    rounds = [
        (0.3, {"pool": 0.6}),   # choose r0: no outcome yet -> hold J = 2
        (0.3, {"pool": 0.6}),   # choose r1: pool .6 > own .3 + .1 -> 3
        (0.5, {"pool": 0.45}),  # choose r2: .6 > .3 + .1 -> 4, clipped to 3 (budget - 1)
        (0.4, {"pool": None}),  # choose r3: .45 <= own (.3 + .5)/2 + .1 -> 2
        (0.7, {"pool": 0.9}),   # choose r4: empty filtered pool -> 1
        (0.7, {"pool": 0.9}),   # choose r5: .9 > (.4 + .7)/2 + .1 = .65 -> 2
    ]
    assert drive(policy, 4, 2, rounds) == [2, 3, 3, 2, 1, 2]


def test_pool_quality_does_not_count_rounds_in_which_the_node_answered_nothing():
    policy = PoolQuality(margin=0.0, window=1, max_external=4)   # J = budget allowed
    rounds = [
        (0.5, {"pool": 0.6}),                    # own .5; choose r0 holds 3
        (0.0, {"pool": 0.6, "generated": 0}),    # choose r1: .6 > .5 -> 4 (J = budget)
        (0.0, {"pool": 0.4, "generated": 0}),    # choose r2: .6 > .5 (not > 0) -> stays 4
        (0.5, {"pool": 0.4}),                    # choose r3: .4 < .5 (a 0 would give 4) -> 3
    ]
    assert drive(policy, 4, 3, rounds) == [3, 4, 4, 3]
    # the default cap keeps a node answering: from J = budget it steps down
    assert PoolQuality().choose(obs(4, 4)) == 3
    with pytest.raises(ValueError, match=r"PoolQuality max_external=5 exceeds .*train_budget=4"):
        PoolQuality(max_external=5).choose(obs(4, 2))
    with pytest.raises(ValueError, match=r"PoolQuality min_external=4 exceeds its highest J, 3"):
        PoolQuality(min_external=4).choose(obs(4, 2))


# ---------------------------------------------------------------- LearningProgress


def test_learning_progress_moves_J_on_the_reward_trend():
    # defaults: windows of 10 rounds, checked every 5 rounds, threshold 0.05; budget 6: J <= 5
    rewards = [0.2] * 20 + [0.6] * 30 + [0.1] * 20
    chosen = drive(LearningProgress(), 6, 4, [(r, {}) for r in rewards])
    # the choice of round t follows t updates; checks after 20, 25, ... updates:
    #   25: recent r15-24 = .4 vs r5-14 = .2   -> +1 (5)
    #   30: .6 vs .2 -> +1, clipped at 5;  35: .6 vs .4 -> clipped;  40, 45, 50: no change
    #   55: r45-54 = .35 vs .6 -> -1 (4);  60: .1 vs .6 -> 3;  65: .1 vs .35 -> 2;  70: none
    assert chosen == [4] * 25 + [5] * 30 + [4] * 5 + [3] * 5 + [2] * 5


def test_learning_progress_skips_rounds_without_own_completions():
    policy = LearningProgress(window=1, check_every=1, max_external=8)
    rounds = [(0.5, {}), (0.0, {"generated": 0}), (0.6, {})]
    # samples .5 | .5 (the 0 of a round with nothing answered is no sample) | .5, .6 -> +1
    assert drive(policy, 8, 4, rounds + [(0.6, {})]) == [4, 4, 4, 5]


# ---------------------------------------------------------------- DiscountedUCB


def test_discounted_ucb_counts_means_and_indexes_by_hand():
    g, xi = 0.5, 0.6
    policy = DiscountedUCB(gamma=g, xi=xi, payoff="reward")   # budget 2: arms J = 0, 1, 2
    assert policy.choose(obs(2, 1, 0)) == 0            # all untried: fewest choices, lowest J
    policy.update(0.5, info(1))                        # round 0 was played at J = 1
    assert policy.choose(obs(2, 0, 1)) == 2            # 0 chosen once, 2 never
    policy.update(1.0, info(0))                        # N = [1, g, 0]
    assert policy.choose(obs(2, 2, 2)) == 2            # 2 still uncredited
    policy.update(0.0, info(2))
    n_counts = [g, g * g, 1.0]
    sums = [1.0 * g, 0.5 * g * g, 0.0]
    np.testing.assert_allclose(policy.counts, n_counts)
    np.testing.assert_allclose(policy.sums, sums)
    n = g + g * g + 1.0                                 # 1.75
    pad = [2 * math.sqrt(xi * math.log(n) / c) for c in n_counts]
    expected = [1.0 + pad[0], 0.5 + pad[1], 0.0 + pad[2]]   # 2.63895, 2.81782, 1.15891
    np.testing.assert_allclose(policy.indexes(), expected)
    np.testing.assert_allclose(expected, [2.63895, 2.81782, 1.15891], atol=1e-5)
    assert policy.choose(obs(2, 2, 3)) == 1
    policy.update(0.2, info(2))                         # round 3 played at J = 2
    n_counts = [g * g, g ** 3, g + 1.0]
    means = [1.0, 0.5, 0.2 / 1.5]
    n = sum(n_counts)                                    # 1.875
    expected = [m + 2 * math.sqrt(xi * math.log(n) / c) for m, c in zip(means, n_counts)]
    np.testing.assert_allclose(policy.means, means)
    np.testing.assert_allclose(policy.indexes(), expected)
    np.testing.assert_allclose(expected, [3.45655, 3.97409, 1.13622], atol=1e-5)


def test_discounted_ucb_next_reward_and_progress_by_hand():
    # next_reward: in force 1 (config), 0, 1, 2, 1.  u1: J_0 = 1 earns .6;  u2: J_1 = 0 earns
    # .8;  u3: round 3 (J = 2 = budget) unmeasured: J_2 nothing;  u4: J_3 = 2 earns .9.  r3,
    # with the silent J = 2 in force, skips the untried J = 2 (it would void J_3's credit):
    # n = 1.5, .8 + 2 sqrt(.6 ln 1.5 / 1) = 1.78647 < .6 + 2 sqrt(.6 ln 1.5 / .5) = 1.99507
    policy = DiscountedUCB(gamma=0.5, xi=0.6)          # default payoff "next_reward"
    rounds = [(.4, {}), (.6, {}), (.8, {}), (0, {"generated": 0}), (.9, {}), (.7, {})]
    assert drive(policy, 2, 1, rounds[:5]) == [0, 1, 2, 1, 2]
    np.testing.assert_allclose([policy.counts, policy.sums, policy.silent],  # silent: J = 2
                               [[.5, .25, 1], [.4, .15, .9], [0, 0, 1]])   # in round 3
    # progress: in force 1, 0, 1, 2, 1, 1.  u1: J_0 = 1 earns (.6 - .4 + 1)/2 = .6;  u2: J_1 = 0
    # earns (.8 - .6 + 1)/2 = .6;  u3, u4: round 3 unmeasured, so J_2, J_3 nothing;  u5: J_4
    # = 1 earns (.7 - .9 + 1)/2 = .4.  From r3 the silent J = 2 is out: N_1 < N_0 -> 1
    policy = DiscountedUCB(gamma=0.5, xi=0.6, payoff="progress")
    assert drive(policy, 2, 1, rounds) == [0, 1, 2, 1, 1, 1]
    np.testing.assert_allclose([policy.counts, policy.sums], [[.5, 1.25, 0], [.3, .55, 0]])
    # n = 1.75: .6 + 2 sqrt(.6 ln 1.75 / .5) = 2.23895 > .44 + 2 sqrt(.6 ln 1.75 / 1.25)
    np.testing.assert_allclose(policy.indexes()[:2], [2.23895, 1.47656], atol=1e-5)
    assert policy.choose(obs(2, 1, 6)) == 0              # J = 2 (index inf) stays out


# ---------------------------------------------------------------- EXP3


def test_exp3_weights_by_hand_with_the_delayed_importance_weight():
    policy = EXP3(arms=(0, 2), seed=0, payoff="reward")  # K = 2
    def eps(t):                                          # min(1/K, sqrt(ln K / (K t)))
        return min(1 / 2, math.sqrt(math.log(2) / (2 * t)))

    def dist(r, eta, e):                                 # (1 - K e) softmax(eta R) + e
        w = [math.exp(eta * x) for x in r]
        return [(1 - 2 * e) * x / sum(w) + e for x in w]

    policy.choose(obs(2, 0, 0))                          # p0 = uniform, for round 1
    policy.update(0.3, info(0))                          # round 0: J not drawn -> no credit
    assert policy.t == 0 and policy.estimated_rewards.tolist() == [0.0, 0.0]
    policy.choose(obs(2, 0, 1))                          # p1 = uniform, for round 2
    policy.update(0.8, info(2))                          # round 1, drawn from p0: 0.8 / 0.5
    np.testing.assert_allclose(policy.estimated_rewards, [0.0, 1.6])
    np.testing.assert_allclose(policy.probabilities(), dist([0, 1.6], 1 / 2, eps(1)))  # 1/2
    policy.choose(obs(2, 2, 2))                          # p2 = uniform, for round 3
    policy.update(0.4, info(0))                          # round 2, drawn from p1: 0.4 / 0.5
    p3 = dist([0.8, 1.6], eps(1), eps(2))                # eps(2) = 0.41628
    np.testing.assert_allclose(p3, [0.48348, 0.51652], atol=1e-5)
    np.testing.assert_allclose(policy.probabilities(), p3)
    policy.choose(obs(2, 0, 3))                          # p3, for round 4
    policy.update(1.0, info(2))                          # round 3, drawn from p2 = uniform
    # the naive weight, today's p3[1] = 0.51652, would give 1.6 + 1.93602 = 3.53602
    np.testing.assert_allclose(policy.estimated_rewards, [0.8, 1.6 + 1.0 / 0.5])
    np.testing.assert_allclose(policy.probabilities(), dist([0.8, 3.6], eps(2), eps(3)))
    policy.choose(obs(2, 2, 4))                          # p4, for round 5
    policy.update(0.5, info(2))                          # round 4, drawn from p3
    np.testing.assert_allclose(policy.estimated_rewards, [0.8, 3.6 + 0.5 / p3[1]])
    np.testing.assert_allclose(policy.estimated_rewards[1], 4.56801, atol=1e-5)
    np.testing.assert_allclose(policy.probabilities(),
                               dist([0.8, 3.6 + 0.5 / p3[1]], eps(3), eps(4)))
    assert policy.t == 4


def script(policy, budget: int, steps, state):
    """Rounds of (J in force, reward, generated); each round's (choice, state after it)."""
    return [(policy.choose(obs(budget, j, t)), policy.update(r, info(j, generated=g)),
             state(policy))[::2] for t, (j, r, g) in enumerate(steps)]   # in this order


def test_exp3_next_reward_and_progress_weight_by_the_distribution_that_drew_the_J():
    steps = [(0, .3, 8), (0, .8, 8), (2, 0, 0), (0, .6, 8), (0, 1, 8), (0, .5, 8), (2, 0, 0),
             (0, .7, 8)]                                # (J in force, reward, generated)
    out = script(EXP3(arms=(0, 2), seed=0), 2, steps,   # K = 2, "next_reward"
                 lambda p: (p.t, p.estimated_rewards.tolist(), p.probabilities().tolist()))
    # p0-p4 uniform (t <= 1) but r2 draws from p2 = [1, 0] (silent J = 2 avoided). u0: nothing;
    # u1: J_0 not drawn; u2: round 2 unmeasured, J_1 nothing; u3: J_2 = 2 earns .6 / p1[1] = 1.2;
    # u4: J_3 = 0 earns 1 / p2[0] = 1 (not 1 / .5); u5: J_4 = 0 earns .5 / p3[0]; u6: as u2
    assert (out[2][0], out[7][1][0]) == (0, 4) and [o[1][:2] for o in out[:7]] == [
        (0, [0.0, 0.0])] * 3 + [
        (1, [0.0, 1.2]), (2, [1.0, 1.2]), (3, [2.0, 1.2]), (3, [2.0, 1.2])]
    # p5 = (1 - 2 eps(2)) softmax(eps(1) R) + eps(2), eps(2) = 0.41628
    np.testing.assert_allclose(out[4][1][2], [0.49582, 0.50418], atol=1e-5)
    # u7: J_6 = 2 earns .7 / p5[1] = 1.38839, p5 from two choices back (p6 = [1, 0])
    np.testing.assert_allclose(out[7][1][1:], [[2.0, 2.58839], [0.47950, 0.52050]], atol=1e-5)
    # progress (budget 4; J = 4 is no arm): u2: J_1 = 1 earns (.9 - .5 + 1)/2 = .7, / p0[1] =
    # .5;  u3, u4: round 3 unmeasured;  u5: J_4 = 1 earns (.8 - .6 + 1)/2 = .6, / p3[1] = .5
    steps = [(1, .2, 8), (1, .5, 8), (0, .9, 8), (4, 0, 0), (1, .6, 8), (1, .8, 8)]
    out = script(EXP3(arms=(0, 1), seed=0, payoff="progress"), 4, steps,
                 lambda p: (p.t, p.estimated_rewards.tolist()))
    assert [o[1] for o in out[2:5]] == [(1, [0.0, 1.4])] * 3 and out[5][1][0] == 2
    np.testing.assert_allclose(out[5][1][1], [0.0, 2.6])


# ---------------------------------------------------------------- ThompsonSampling


def test_thompson_posteriors_by_hand():
    policy = ThompsonSampling(gamma=0.5, seed=0, payoff="reward")  # budget 2: J = 0, 1, 2
    policy.choose(obs(2, 1, 0))
    policy.update(0.7, info(1))
    np.testing.assert_allclose(policy.alpha, [1, 1.7, 1])
    np.testing.assert_allclose(policy.beta, [1, 1.3, 1])
    policy.choose(obs(2, 1, 1))
    policy.update(0.2, info(1))                          # S = .35 + .2, F = .15 + .8
    np.testing.assert_allclose(policy.alpha, [1, 1.55, 1])
    np.testing.assert_allclose(policy.beta, [1, 1.95, 1])
    policy.choose(obs(2, 0, 2))
    policy.update(1.0, info(0))
    np.testing.assert_allclose(policy.alpha, [2, 1.275, 1])
    np.testing.assert_allclose(policy.beta, [1, 1.475, 1])


def test_thompson_next_reward_and_progress_posteriors_by_hand():
    steps = [(1, .7, 8), (1, .2, 8), (0, .6, 8), (2, 0, 0), (0, .5, 8), (0, .9, 8)]
    nxt, prog = (script(ThompsonSampling(gamma=0.5, seed=0, payoff=payoff), 2, steps,
                        lambda p: [p.alpha.tolist(), p.beta.tolist()])   # arms J = 0, 1, 2
                 for payoff in ("next_reward", "progress"))
    assert nxt[3][0] != 2 and 2 not in [c for c, _ in prog[3:]]   # silent J = 2 avoided
    # next_reward: u1: J_0 = 1 earns .2;  u2: J_1 = 1 earns .6;  u3: round 3 unmeasured ->
    # J_2 nothing;  u4: J_3 = 2 earns .5;  u5: J_4 = 0 earns .9
    np.testing.assert_allclose([s for _, s in nxt], [
        [[1, 1, 1], [1, 1, 1]], [[1, 1.2, 1], [1, 1.8, 1]]] + [[[1, 1.7, 1], [1, 1.8, 1]]] * 2
        + [[[1, 1.35, 1.5], [1, 1.4, 1.5]], [[1.9, 1.175, 1.25], [1.1, 1.2, 1.25]]])
    # progress: u1: J_0 = 1 earns (.2 - .7 + 1)/2 = .25;  u2: J_1 = 1 earns (.6 - .2 + 1)/2
    # = .7;  u3, u4: round 3 unmeasured, so J_2, J_3 nothing;  u5: J_4 = 0 earns .7
    np.testing.assert_allclose([s for _, s in prog], [
        [[1, 1, 1], [1, 1, 1]], [[1, 1.25, 1], [1, 1.75, 1]]] + [
        [[1, 1.825, 1], [1, 1.675, 1]]] * 3 + [[[1.7, 1.4125, 1], [1.3, 1.3375, 1]]])


# ---------------------------------------------------------------- all policies


def _policies(budget: int, data) -> list:
    arms = st.none() | st.just(data.draw(st.lists(st.integers(0, budget), min_size=1,
                                                  unique=True)))
    seed = data.draw(st.integers(0, 2**32))
    return [
        FixedRatio(data.draw(st.integers(0, budget))),
        PoolQuality(margin=data.draw(st.floats(-1, 1)), window=data.draw(st.integers(1, 3))),
        PoolQuality(max_external=budget, min_external=data.draw(st.integers(0, budget))),
        LearningProgress(window=data.draw(st.integers(1, 3)),
                         check_every=data.draw(st.integers(1, 3)), max_external=budget),
        LearningProgress(threshold=0.0, window=1, check_every=1),
    ] + [bandit for p in PAYOFFS for bandit in (         # every bandit with every payoff
        DiscountedUCB(gamma=data.draw(st.floats(0.01, 1)), arms=data.draw(arms), payoff=p),
        EXP3(arms=data.draw(arms), seed=seed, payoff=p),
        ThompsonSampling(gamma=data.draw(st.floats(0.01, 1)), seed=np.random.SeedSequence(seed),
                         arms=data.draw(arms), payoff=p),
        LinUCBRatio(alpha=data.draw(st.floats(0.01, 2)), gamma=data.draw(st.floats(0.01, 1)),
                    arms=data.draw(arms), payoff=p))]


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(0, 8), data=st.data())
def test_every_policy_keeps_J_within_the_budget(budget, data):
    maybe = st.none() | st.floats(0, 1)
    policies = _policies(budget, data)
    for t in range(data.draw(st.integers(1, 25))):
        j_in_force = data.draw(st.integers(0, budget))
        reward = data.draw(st.floats(0, 1))
        generated = data.draw(st.just(0) | st.integers(0, 16))   # often unmeasured
        entry = info(j_in_force, generated=generated, pool=data.draw(maybe),
                     zero_advantage_fraction=data.draw(maybe),
                     shared_mean_reward=data.draw(maybe))
        for policy in policies:
            j = policy.choose(obs(budget, j_in_force, t))
            assert isinstance(j, int) and 0 <= j <= budget, (policy, j)
            policy.update(reward, entry)


def test_same_seed_same_choices():
    def run_once(make):
        rng = np.random.default_rng(7)
        return drive(make(), 8, 4, [(float(rng.random()), {}) for _ in range(60)])

    for make in (lambda: EXP3(seed=3), lambda: ThompsonSampling(seed=3),
                 lambda: ThompsonSampling(seed=np.random.SeedSequence(3)), DiscountedUCB):
        first = run_once(make)
        assert first == run_once(make) and len(set(first)) > 1
    assert run_once(lambda: EXP3(seed=3)) != run_once(lambda: EXP3(seed=4))


@pytest.mark.parametrize("payoff", ["reward", "next_reward"])
@pytest.mark.parametrize("make", [lambda s, p: DiscountedUCB(payoff=p),
                                  lambda s, p: EXP3(seed=s, payoff=p),
                                  lambda s, p: ThompsonSampling(seed=s, payoff=p)])
def test_bandits_find_the_best_arm_of_a_stationary_toy(make, payoff):
    """Arms J = 0, 1, 2 pay Bernoulli rewards with means 0.2, 0.9, 0.4 (J_t pays in round t, or
    t+1 with "next_reward"; every round is measured); default parameters."""
    means = [0.2, 0.9, 0.4]
    for seed in range(3):
        policy = make(seed, payoff)
        rng = np.random.default_rng(seed)
        in_force, before, history = 0, 0, []
        for t in range(300):
            chosen = policy.choose({**obs(2, in_force, t), "questions": ("q",)})
            paying = in_force if payoff == "reward" else before
            policy.update(float(rng.random() < means[paying]), info(in_force))
            history.append(in_force)
            before, in_force = in_force, chosen
        assert np.mean(np.array(history[-100:]) == 1) > 0.5, (seed, history[-100:])


def test_constructor_arguments_are_checked():
    for make, message in [
        (lambda: DiscountedUCB(gamma=1.5), r"gamma must be in \(0, 1\], got 1.5"),
        (lambda: DiscountedUCB(gamma=0), r"gamma must be in \(0, 1\], got 0"),
        (lambda: DiscountedUCB(xi=-1), r"xi must be a finite number > 0, got -1"),
        (lambda: ThompsonSampling(alpha0=0), r"alpha0 must be a finite number > 0, got 0"),
        (lambda: EXP3(seed=1.5), r"seed must be an int, a numpy SeedSequence or None, got 1.5"),
        (lambda: EXP3(arms=(1, 1)), r"arms must be distinct ints >= 0 .*got \(1, 1\)"),
        (lambda: EXP3(arms=()), r"arms must be distinct ints >= 0 .*got \(\)"),
        (lambda: ThompsonSampling(payoff="next"),
         r"payoff must be one of 'reward', 'next_reward', 'progress', got 'next'"),
        (lambda: PoolQuality(window=0), r"window must be an int >= 1, got 0"),
        (lambda: PoolQuality(margin=float("nan")), r"margin must be a finite number, got nan"),
        (lambda: PoolQuality(min_external=3, max_external=2),
         r"max_external must be >= min_external=3, got 2"),
        (lambda: LearningProgress(threshold=-0.1), r"threshold must be .* >= 0, got -0.1"),
        (lambda: LearningProgress(check_every=0), r"check_every must be an int >= 1, got 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()
    with pytest.raises(ValueError, match=r"EXP3 arms \[2, 6\] exceed .*train_budget=4"):
        EXP3(arms=(2, 6)).choose(obs(4, 2))
    with pytest.raises(ValueError, match=r"reward must be a number in \[0, 1\].*got 1.5"):
        DiscountedUCB().update(1.5, info(4))


class Recorder:
    """A ratio policy that records what the runner asked and told it."""

    def __init__(self, policy):
        self.policy, self.chosen, self.credited = policy, [], []

    def choose(self, observation):
        self.chosen.append(self.policy.choose(observation))
        return self.chosen[-1]

    def update(self, reward, info):
        self.credited.append(info["num_external"])
        self.policy.update(reward, info)


def test_run_with_ratio_policies_on_a_simulated_swarm():
    from agents.sim.simulated import simulated_swarm

    env = sapo_env.parallel_env(n=3, max_rounds=20)
    ucb, exp3, pool = DiscountedUCB(), EXP3(seed=1), PoolQuality()
    policies = {"node_0": Recorder(ucb), "node_1": Recorder(exp3), "node_2": Recorder(pool)}
    history = sapo_env.runtime.run(env, simulated_swarm(env.possible_agents, seed=0), seed=0,
                           progress=False, ratio_policies=policies)
    assert history.rounds == 20
    for col, node in enumerate(env.possible_agents):
        rec = policies[node]
        in_force = history.num_external[:, col].tolist()
        assert in_force[0] == 4                         # SwarmConfig.num_external: 8 // 2
        assert in_force[1:] == rec.chosen[:-1]          # each choice is the next round's J
        assert rec.credited == in_force                 # each update names the J played
        assert all(0 <= j <= 8 for j in rec.chosen)
    assert policies["node_0"].chosen[:3] == [0, 1, 2]   # D-UCB tries every J once first
    assert exp3.t == sum(history.generated[2:, 1] > 0) >= 10   # J_1..18 earn measured r_t+1
    j = history.num_external[:, :2]                     # D-UCB, EXP3: J = 8 never twice in a row
    assert (j == 8).any() and not np.any((j[1:] == 8) & (j[:-1] == 8))
    assert max(policies["node_2"].chosen) <= 7          # PoolQuality keeps answering


@pytest.mark.parametrize("module", ["agents.ratio.rules", "agents.ratio.bandits",
                                    "agents.ratio.contextual"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------- ScheduledRatio and LinUCB


def test_scheduled_ratio_puts_each_phase_in_force_from_its_first_round():
    policy = ScheduledRatio([(0, 6), (3, 0), (5, 2)])
    # choose at round t sets the J of round t + 1
    assert drive(policy, 8, 6, [(0.5, {})] * 7) == [6, 6, 0, 0, 2, 2, 2]
    assert [policy.num_external_at(t) for t in range(7)] == [6, 6, 6, 0, 0, 2, 2]
    for bad in ([], [(1, 4)], [(0, 4), (0, 2)], [(0, 4), (5, 2), (3, 1)], [(0, -1)]):
        with pytest.raises(ValueError, match="schedule"):
            ScheduledRatio(bad)
    with pytest.raises(ValueError, match="ScheduledRatio num_external=6 exceeds"):
        ScheduledRatio([(0, 6)]).choose(obs(4, 2))


def test_linucb_regressions_by_hand():
    """Two arms, payoff "reward" (J_t earns r_t), gamma 0.5, ridge 1: A and b after two
    credits, computed from the update rule in the docstring."""
    policy = LinUCBRatio(alpha=1.0, gamma=0.5, arms=(2, 6), payoff="reward")
    d = len(CONTEXT) + 1
    j0 = policy.choose(obs(8, 4, 0))           # chosen on the empty context: no credit yet
    x0 = policy.context(obs(8, j0, 0))
    assert x0[-1] == 1.0 and len(x0) == d
    policy.update(0.5, info(4))                # round 0 ran at J = 4, not an arm: no credit
    assert np.array_equal(policy.gram, np.tile(np.eye(d), (2, 1, 1)))
    j1 = policy.choose(obs(8, j0, 1))
    x1 = policy.context(obs(8, j0, 1))
    policy.update(0.75, info(j0))              # round 1 ran at j0, chosen on x0
    arm = (2, 6).index(j0)
    expected = 0.5 * np.tile(np.eye(d), (2, 1, 1)) + 0.5 * np.eye(d)  # discounted toward I
    expected[arm] += np.outer(x0, x0)
    np.testing.assert_allclose(policy.gram, expected)
    np.testing.assert_allclose(policy.moments[arm], 0.75 * x0)
    # the index is theta . x + alpha * sqrt(x A^-1 x), arm by arm
    inverse = np.linalg.inv(expected)
    by_hand = [inverse[k] @ policy.moments[k] @ x1 + np.sqrt(x1 @ inverse[k] @ x1)
               for k in range(2)]
    np.testing.assert_allclose(policy.indexes(x1), by_hand)
    assert j1 in (2, 6)


def test_linucb_learns_which_J_pays_in_which_context():
    """A toy in which J = 6 pays when the pool is large and J = 0 when it is empty, the pool
    alternating every 40 rounds (payoff "reward": J_t earns r_t): the context tells the two
    states apart, so LinUCB plays the right J in most late rounds of each state."""
    policy = LinUCBRatio(arms=(0, 6), alpha=0.2, gamma=1.0, window=1, payoff="reward")
    rng = np.random.default_rng(0)
    in_force, right = 4, []
    for t in range(800):
        large = (t // 40) % 2 == 0
        pool = 16 if large else 0
        best = 6 if large else 0
        chosen = policy.choose({**obs(8, in_force, t), "questions": ("q",)})
        reward = float(np.clip(rng.normal(0.7 if in_force == best else 0.3, 0.1), 0, 1))
        policy.update(reward, info(in_force, pool_size_filtered=pool,
                                   pool=0.5 if large else None))
        if t >= 400 and t % 40 >= 5:
            right.append(in_force == best)
        in_force = chosen
    assert np.mean(right) > 0.8, np.mean(right)


def test_linucb_state_round_trips():
    import pickle

    policy = LinUCBRatio(arms=(0, 4, 6))
    chosen = drive(policy, 8, 4, [(0.5, {})] * 12)
    again = LinUCBRatio(arms=(0, 4, 6))
    again.load_state_dict(pickle.loads(pickle.dumps(policy.state_dict())))
    rest = [(0.2 * (t % 3), {}) for t in range(12)]
    assert drive(policy, 8, chosen[-1], rest) == drive(again, 8, chosen[-1], rest)
