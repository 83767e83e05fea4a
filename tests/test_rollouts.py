import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sapo_env.rollouts import (
    group_advantages,
    has_zero_advantage,
    mean_rewards,
    stacked_rewards,
)


def test_advantages_by_hand():
    r = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    mean, std = 0.25, np.sqrt(0.75 / 3)  # sample std (ddof=1), as genrl and TRL
    expected = (r - mean) / (std + 1e-6)
    np.testing.assert_allclose(group_advantages(r), expected, rtol=1e-6)
    assert group_advantages(r).dtype == np.float32
    # genrl and TRL: torch's unbiased std, same numbers
    torch = __import__("pytest").importorskip("torch")
    t = torch.tensor(r)
    np.testing.assert_allclose(group_advantages(r), ((t - t.mean()) / (t.std() + 1e-6)).numpy(),
                               rtol=1e-6)


def test_epsilon_is_added_to_the_std_not_inside_it():
    """On a tiny spread, (r - mean) / (std + eps) and (r - mean) / sqrt(var + eps) differ."""
    r = np.array([0.0, 2e-6], dtype=np.float32)
    std = np.sqrt(2e-12)  # sample std of the two
    np.testing.assert_allclose(group_advantages(r), np.array([-1e-6, 1e-6]) / (std + 1e-6),
                               rtol=1e-4)


def test_a_group_of_one_completion_has_zero_advantage():
    np.testing.assert_array_equal(group_advantages(np.array([1.0])), np.zeros(1))


def test_equal_rewards_give_zero_advantages():
    np.testing.assert_array_equal(group_advantages(np.full(8, 0.3)), np.zeros(8))
    assert has_zero_advantage(np.full(8, 0.3))
    # partial credit: all equal but not zero is still zero advantage; unequal is not
    assert not has_zero_advantage(np.array([0.05, 0.05, 1.0]))


def test_vectorised_equals_per_group():
    rng = np.random.default_rng(0)
    r = rng.random((3, 4, 8)).astype(np.float32)
    batched = group_advantages(r)
    for i in range(3):
        for k in range(4):
            np.testing.assert_allclose(batched[i, k], group_advantages(r[i, k]), rtol=1e-6)
    np.testing.assert_array_equal(has_zero_advantage(r), np.zeros((3, 4), dtype=bool))


@given(arrays(np.float32, st.integers(2, 16), elements=st.floats(0, 1, width=32)))
def test_advantages_are_centred_and_bounded(r):
    a = group_advantages(r)
    assert abs(float(a.mean())) < 1e-3
    assert np.all(np.abs(a) <= np.sqrt(len(r)) + 1e-3)


def test_stacked_rewards_only_for_arrays_of_one_dtype_and_shape():
    a, b = np.array([1, 0], np.float32), np.array([0.5, 0.5], np.float32)
    assert stacked_rewards([{"rewards": a}, {"rewards": b}]).tolist() == [[1, 0], [0.5, 0.5]]
    for others in ([np.array([1, 0, 0], np.float32)], [np.array([1, 0], np.float64)],
                   [[1.0, 0.0]], []):
        assert stacked_rewards([{"rewards": r} for r in ([a] if others else []) + others]) \
            is None


def test_mean_rewards_are_each_groups_own_mean_bit_for_bit():
    rng = np.random.default_rng(0)
    for length in (1, 3, 8, 9, 16, 129):
        groups = [{"rewards": r} for r in
                  (rng.random((50, length)) * 10.0 ** rng.integers(-6, 6, (50, 1))
                   ).astype(np.float32)]
        assert mean_rewards(groups) == [float(g["rewards"].mean()) for g in groups]
    mixed = [{"rewards": np.array([0.1, 0.7], np.float32)},
             {"rewards": np.array([0.3, 0.3, 0.9], np.float32)}]
    assert mean_rewards(mixed) == [float(g["rewards"].mean()) for g in mixed]
