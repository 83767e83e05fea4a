"""What keeps a step's own cost linear in the nodes: a node's view of the pool is a view of
one shared tuple, each of the env's records is copied once for a round's observations, and
packet verification turns each task config into JSON once per call, not once per group."""

from __future__ import annotations

import gc
import pickle
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

import sapo_env
from sapo_env.defenses import packets
from sapo_env.pool_view import CopiedOnRead, PoolView


def _actions(observations):
    return {a: {"num_external": 2, "completions": [
        [f"<answer>{k}</answer>" for k in range(o["completions_per_question"])]
        for _ in o["questions"]]} for a, o in observations.items()}


def _played(n=6, rounds=2, **overrides):
    env = sapo_env.parallel_env(n=n, max_rounds=rounds + 1, **overrides)
    observations, _ = env.reset(seed=0)
    for _ in range(rounds):
        observations, *_ = env.step(_actions(observations))
    return env, observations


def test_every_nodes_pool_is_a_view_of_one_tuple_of_copies():
    env, observations = _played()
    pools = [o["pool"] for o in observations.values()]
    assert all(type(p) is PoolView for p in pools)
    assert all(p._groups is pools[0]._groups for p in pools)  # one tuple, no copy per node
    assert len(pools[0]._groups) == len(env.state_dict()["pool"]["groups"])
    assert env.observation_space("node_0").contains(observations["node_0"])


def test_a_record_shown_in_many_places_is_copied_once_a_round():
    env, observations = _played()
    configs = {}
    for observation in observations.values():
        for held in (*observation["questions"], *observation["pool"], *observation["batch"]):
            configs.setdefault(held["ref"]["task"], set()).add(id(held["ref"]["config"]))
    assert all(len(ids) == 1 for ids in configs.values())  # one copy of a task's config
    pool = {g["id"]: g for g in observations["node_0"]["pool"]}
    external = [g for o in observations.values() for g in o["batch"] if g["id"] in pool]
    assert external  # batches hold pooled groups: their arrays are the pool copy's arrays
    assert all(g["rewards"] is pool[g["id"]]["rewards"] for g in external)


def test_verification_turns_each_config_into_json_once_per_call(monkeypatch):
    env = sapo_env.parallel_env(n=8, max_rounds=2)
    observations, _ = env.reset(seed=0)
    calls = []
    original = packets._config_key
    monkeypatch.setattr(packets, "_config_key", lambda c: calls.append(c) or original(c))
    env.step(_actions(observations))
    published = sum(f.status == "accepted" for f in env.last_packets)
    assert published >= 32  # 8 nodes, 4 questions each, all shared
    # the cheap checks once a round, and the verdicts find nothing to re-derive: each config
    # once
    assert len(calls) <= len(env.config.tasks) < published


def test_a_step_runs_the_cheap_packet_checks_once_and_still_refuses_forgeries(monkeypatch):
    env = sapo_env.parallel_env(n=8, max_rounds=2, adversaries={"node_7": "forge_rewards"})
    observations, _ = env.reset(seed=0)
    calls = []
    original = packets.PacketVerifier._cheap_verdicts
    monkeypatch.setattr(packets.PacketVerifier, "_cheap_verdicts",
                        lambda self, groups, *rest: calls.append(len(groups))
                        or original(self, groups, *rest))
    env.step(_actions(observations))
    assert calls == [len(env.last_packets)]  # every packet, once
    refused = {f.status for f in env.last_packets if f.sender == "node_7"}
    assert refused == {"rewards"}
    assert all(f.accepted for f in env.last_packets if f.sender != "node_7")


def _tracked(root, stop: set[int]) -> int:
    """How many objects the garbage collector tracks that ``root`` reaches (``root`` included),
    not going into classes, functions and modules, nor into those whose ids are in ``stop``."""
    seen, stack = set(), [root]
    while stack:
        value = stack.pop()
        if id(value) in seen or id(value) in stop or not gc.is_tracked(value) \
                or isinstance(value, (type, types.FunctionType, types.ModuleType)):
            continue
        seen.add(id(value))
        stack.extend(gc.get_referents(value))
    return len(seen)


def test_the_pool_and_its_views_track_no_object_per_group_or_source():
    counts = []
    for n in (4, 16):
        env, observations = _played(n=n)
        gc.collect()
        gc.collect()  # a tuple of tuples is untracked once the inner ones are
        pool = env._run.pool
        groups = {id(g) for g in pool.groups}
        views = [o["pool"] for o in observations.values()]
        shown = {id(g) for g in views[0]._groups} | {id(views[0]._groups)}
        counts.append((_tracked(pool, groups), max(_tracked(v, shown) for v in views)))
    assert counts[0][0] == counts[1][0]  # as many for 16 nodes' groups as for 4 nodes'
    assert counts[0][1] == counts[1][1] == 1  # a view: one object, its pieces untracked


class _Counting:
    """A copy function that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, record):
        self.calls += 1
        return dict(record)


def test_copied_on_read_copies_nothing_before_a_read_and_each_record_once():
    records = tuple({"k": k} for k in range(5))
    copy = _Counting()
    items = CopiedOnRead(records, copy)
    assert len(items) == 5 and copy.calls == 0
    first = items[1]
    assert first == {"k": 1} and first is not records[1] and items[1] is first
    assert items[-4] is first and items[1:3] == ({"k": 1}, {"k": 2})
    assert list(items) == list(records) and copy.calls == 5  # all at the first read, once
    with pytest.raises(IndexError):
        items[5]
    with pytest.raises(TypeError):
        items["1"]
    assert pickle.loads(pickle.dumps(items)) == tuple(records)  # pickles as a tuple
    assert copy.calls == 5


def test_copied_on_read_copies_with_collection_paused_and_restores_it():
    seen = []
    items = CopiedOnRead(({"k": 0},), lambda r: seen.append(gc.isenabled()) or dict(r))
    assert gc.isenabled()
    items[0]
    assert seen == [False] and gc.isenabled()


def test_copied_on_read_makes_one_copy_an_item_across_threads():
    copy = _Counting()
    items = CopiedOnRead(tuple({"k": k} for k in range(2000)), copy)
    with ThreadPoolExecutor(4) as pool:
        seen = list(pool.map(lambda _: [id(g) for g in items], range(4)))
    assert copy.calls == 2000 and all(s == seen[0] for s in seen)


def test_the_pool_is_copied_when_read_as_it_was_when_shown():
    env, observations = _played(n=4)
    _, shown = _played(n=4)  # the same run, its pool read at once
    read_at_once = pickle.dumps(tuple(shown["node_0"]["pool"]))
    pool = observations["node_0"]["pool"]
    assert pool._groups._copies is None  # nothing copied before a read
    env.step(_actions(observations))  # the env moves on; what it showed does not
    assert pickle.dumps(tuple(pool)) == read_at_once
    by_id = {g["id"]: g for g in observations["node_1"]["pool"]}
    both = [g for g in observations["node_2"]["pool"] if g["id"] in by_id]
    assert both and all(by_id[g["id"]] is g for g in both)  # one copy, whoever reads it
