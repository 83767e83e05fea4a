import numpy as np

from sapo_env.pool import SharedPool
from sapo_env.sampling import keep_informative


def group(source, round_, informative=True, k=0):
    rewards = np.array([1.0, 0.0] if informative else [1.0, 1.0], dtype=np.float32)
    return {"id": f"{source}/r{round_}/q{k}", "source": source, "round": round_,
            "rewards": rewards}


def test_window_evicts_old_rounds():
    pool = SharedPool(window=2, capacity=None, keep=keep_informative)
    pool.publish(0, [group("a", 0), group("b", 0)])
    pool.publish(1, [group("a", 1)])
    assert [g["id"] for g in pool.groups] == ["a/r0/q0", "b/r0/q0", "a/r1/q0"]
    pool.publish(2, [group("b", 2)])
    assert [g["id"] for g in pool.groups] == ["a/r1/q0", "b/r2/q0"]


def test_capacity_evicts_oldest_first():
    pool = SharedPool(window=10, capacity=3, keep=keep_informative)
    pool.publish(0, [group("a", 0, k=k) for k in range(2)])
    pool.publish(1, [group("b", 1, k=k) for k in range(2)])
    assert [g["id"] for g in pool.groups] == ["a/r0/q1", "b/r1/q0", "b/r1/q1"]


def test_views_exclude_own_and_filtered_groups():
    pool = SharedPool(window=2, capacity=None, keep=keep_informative)
    pool.publish(0, [group("a", 0), group("b", 0, informative=False), group("c", 0)])
    pool.publish(1, [group("a", 1), group("b", 1), group("a", 1, k=1)])
    assert [g["id"] for g in pool.from_others("a")] == ["b/r0/q0", "c/r0/q0", "b/r1/q0"]
    assert [g["id"] for g in pool.candidates_for("a")] == ["c/r0/q0", "b/r1/q0"]
    assert [g["id"] for g in pool.candidates_for("b")] == ["a/r0/q0", "c/r0/q0", "a/r1/q0",
                                                           "a/r1/q1"]
    assert len(pool.candidates_for(None)) == 5
    assert pool.count_for("a") == 3 and pool.count_for("a", filtered=True) == 2
    assert pool.count_for("nobody") == 6 and pool.from_others("nobody") == pool.groups


def test_mean_reward_of_a_nodes_view():
    pool = SharedPool(window=2, capacity=None, keep=keep_informative)
    pool.publish(0, [group("a", 0), group("b", 0, informative=False)])  # means 0.5 and 1.0
    pool.publish(1, [group("c", 1), group("a", 1, informative=False)])  # 0.5 and 1.0
    assert pool.mean_reward_for("a") == 0.75  # b's 1.0 and c's 0.5
    assert pool.mean_reward_for("a", filtered=True) == 0.5  # c only
    assert pool.mean_reward_for("c") == (0.5 + 1.0 + 1.0) / 3
    assert pool.mean_reward_for(None, filtered=True) == 0.5
    only_a = SharedPool(window=1, capacity=None, keep=keep_informative)
    only_a.publish(0, [group("a", 0)])
    assert only_a.mean_reward_for("a") is None and only_a.mean_reward_for("a", True) is None
