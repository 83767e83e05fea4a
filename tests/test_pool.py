import pickle

import numpy as np
import pytest

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


def test_a_nodes_view_holds_the_pools_tuple_and_reads_as_the_tuple_it_replaces():
    pool = SharedPool(window=3, capacity=None, keep=keep_informative)
    for round_ in range(3):  # a's groups form three runs, one at the start
        pool.publish(round_, [group("a", round_), group("b", round_, k=0),
                              group("c", round_), group("b", round_, k=1)])
    view = pool.from_others("a")
    assert view._groups is pool.groups  # the pool's own tuple: no copy per node
    expected = tuple(g for g in pool.groups if g["source"] != "a")
    assert len(view) == 9 and list(view) == list(expected)
    assert [view[i]["id"] for i in range(-9, 9)] == [g["id"] for g in expected * 2]
    assert view[2:7] == expected[2:7] and view[::-1] == expected[::-1]
    assert expected[4] in view and view.index(expected[4]) == 4
    assert view == expected and expected == view and view != expected[:-1]
    assert view + () == expected and () + view == expected and tuple(view) == expected
    assert view == pickle.loads(pickle.dumps(view))  # by value: new arrays
    assert type(pickle.loads(pickle.dumps(view))) is tuple
    for index in (9, -10):
        with pytest.raises(IndexError):
            view[index]
    assert list(pool.from_others("nobody")) == list(pool.groups)
    emptied = SharedPool(window=1, capacity=None, keep=keep_informative)
    emptied.publish(0, [group("a", 0)])
    assert len(emptied.from_others("a")) == 0 and list(emptied.from_others("a")) == []
