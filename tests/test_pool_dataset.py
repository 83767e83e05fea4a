"""The pool as a dataset: each packet's fate (``SwarmEnv.last_packets``), the Parquet recorder
(``sapo_env.runtime.pool_dataset``) and the playback node (``agents.scripted.replay``): a run
written, read back with ``datasets`` and played back gives the same pool and rewards."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import ARITHMETIC

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent
from agents.scripted.replay import PlaybackAgent
from sapo_env.defenses.publication import RAW_CHARS, safe_repr

NEEDS_DATASETS = "the pool dataset needs the 'data' extra: pip install 'sapo-env[data]'"
SWARM = dict(n=3, tasks=ARITHMETIC, completions_per_question=4, train_budget=4, num_external=2,
             max_rounds=4)


def demonstrators(names, seed=0):
    """Scripted nodes right half the time (mixed groups: advantages that are not all 0)."""
    return {a: DemonstratorAgent(0.5, num_external=2, seed=seed + i) for i, a in enumerate(names)}


def step_once(env, seed=0):
    observations, _ = env.reset(seed=seed)
    nodes = demonstrators(env.agents)
    return env.step({a: nodes[a].act(observations[a]) for a in env.agents})


# --- each packet's fate (the env; no datasets needed) ---------------------------------------
def test_every_shared_group_is_a_packet_whose_fate_the_env_keeps_for_the_last_step():
    env = sapo_env.parallel_env(**SWARM)
    assert env.last_packets == ()
    observations, _, _, _, infos = step_once(env)
    packets = env.last_packets
    assert [p.sender for p in packets] == [a for a in env.agents for _ in range(2)]
    assert all(p.accepted and p.status == "accepted" and p.raw is None for p in packets)
    pool = env.state_dict()["pool"]["groups"]
    assert [p.group["id"] for p in packets] == [g["id"] for g in pool]
    assert all(p.group is g for p, g in zip(packets, pool))  # the pool's own records
    env.reset(seed=0)
    assert env.last_packets == ()


def test_a_group_not_shared_is_no_packet():
    env = sapo_env.parallel_env(**SWARM)
    observations, _ = env.reset(seed=0)
    nodes = demonstrators(env.agents)
    actions = {a: nodes[a].act(observations[a]) for a in env.agents}
    actions["node_1"]["share"] = (0, 1)
    env.step(actions)
    assert [p.group["id"] for p in env.last_packets if p.sender == "node_1"] == ["node_1/r0/q1"]


def test_refused_packets_keep_their_sender_reason_and_only_a_short_repr():
    attacks = {"node_1": "malformed", "node_2": "forge_rewards"}
    env = sapo_env.parallel_env(**{**SWARM, "n": 3}, adversaries=attacks)
    _, _, _, _, infos = step_once(env)
    packets = env.last_packets
    by_sender = {a: [p for p in packets if p.sender == a] for a in env.agents}
    assert all(p.accepted for p in by_sender["node_0"])
    # (a broken claimed round is no reason: the receiver stamps its own)
    assert {p.status for p in by_sender["node_1"]} == {"accepted", "malformed", "oversized"}
    assert all(p.group is None and isinstance(p.raw, str) and len(p.raw) <= RAW_CHARS
               for p in by_sender["node_1"] if not p.accepted)
    forged = by_sender["node_2"]  # read by the schema, refused by the verifier: what it claimed
    assert {p.status for p in forged} == {"rewards"}
    assert all(p.group is not None and p.raw is None for p in forged)
    for a in env.agents:
        refused = sum(not p.accepted for p in by_sender[a])
        assert infos[a]["rejected_groups"] == refused


def test_a_repr_that_raises_or_is_huge_is_named_or_cut_never_raised():
    class Hostile:
        def __repr__(self):
            raise RuntimeError("no")

    assert safe_repr(Hostile()).startswith("<Hostile instance")  # reprlib names it

    assert len(safe_repr({"completions": ("x" * 10_000_000,)})) <= RAW_CHARS
    assert len(safe_repr([list(range(1000))] * 1000)) <= RAW_CHARS


def test_the_same_seed_gives_the_same_packets():
    def fates():
        env = sapo_env.parallel_env(**SWARM, adversaries={"node_2": "duplicate_spam"})
        step_once(env, seed=5)
        return [(p.sender, p.status, p.group["id"] if p.group else p.raw)
                for p in env.last_packets]

    first = fates()
    assert first == fates() and "duplicate" in {status for _, status, _ in first}


# --- the dataset and the playback ------------------------------------------------------------
def record(tmp_path, agents, name="pool", seed=0, flush_bytes=None, **swarm):
    from sapo_env.runtime.pool_dataset import PoolDatasetCallback

    env = sapo_env.parallel_env(**{**SWARM, **swarm})
    recorder = PoolDatasetCallback(tmp_path / name, flush_every=3,
                                   **({} if flush_bytes is None else {"flush_bytes": flush_bytes}))
    history = sapo_env.runtime.run(env, agents(env.possible_agents), seed=seed,
                                   callbacks=[recorder], progress=False)
    return history, tmp_path / name


def test_a_run_written_read_and_played_back_gives_the_same_pool_and_rewards(tmp_path):
    datasets = pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    history, path = record(tmp_path, demonstrators)
    files = sorted(p.name for p in path.iterdir())
    assert files == ["rounds-000000-000002.parquet", "rounds-000003-000003.parquet"]
    pool = datasets.load_dataset("parquet", data_files=str(path / "rounds-*.parquet"),
                                 split="train", cache_dir=str(tmp_path / "cache"))
    assert pool.num_rows == 4 * 3 * 2 and set(pool["status"]) == {"accepted"}
    row = pool[0]
    assert (row["round"], row["sender"], row["id"], row["num_external"]) == (
        0, "node_0", "node_0/r0/q0", 2)
    assert len(row["completions"]) == len(row["rewards"]) == len(row["advantages"]) == 4
    assert row["ref"]["task"] == row["task"] == "basic_arithmetic"

    def played_back(names):  # node_2 from the dataset, the others as they were
        return {**demonstrators(names), "node_2": PlaybackAgent(pool, "node_2")}

    again, path_again = record(tmp_path, played_back, name="again")
    np.testing.assert_array_equal(again.rewards, history.rewards)
    assert again.infos == history.infos
    from sapo_env.runtime.pool_dataset import load_pool_dataset

    assert load_pool_dataset(path_again).to_list() == pool.to_list()


def test_a_whole_swarm_played_back_from_the_dataset_is_the_recorded_run(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    history, path = record(tmp_path, demonstrators)

    def played_back(names):
        return {a: PlaybackAgent.from_parquet(path, a) for a in names}

    again, _ = record(tmp_path, played_back, name="again")
    np.testing.assert_array_equal(again.rewards, history.rewards)


def test_refused_packets_survive_the_round_trip(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from sapo_env.runtime.pool_dataset import load_pool_dataset

    attacks = {"node_1": "malformed", "node_2": "sybil"}
    _, path = record(tmp_path, demonstrators, adversaries=attacks, max_rounds=2)
    pool = load_pool_dataset(path)
    statuses = {(r["sender"], r["status"]) for r in pool}
    assert {("node_1", "malformed"), ("node_1", "oversized"), ("node_2", "accepted"),
            ("node_2", "impersonation")} <= statuses
    unread = pool.filter(lambda r: r["sender"] == "node_1")
    assert all(r["id"] is None and r["completions"] is None and 0 < len(r["raw"]) <= RAW_CHARS
               for r in unread if not r["accepted"])
    playback = PlaybackAgent(pool, "node_2")  # its sybils are not its groups: only its own
    assert playback.rounds == [0, 1]


def test_a_playback_dealt_other_questions_raises_or_skips(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from sapo_env.runtime.pool_dataset import load_pool_dataset

    _, path = record(tmp_path, demonstrators)
    pool = load_pool_dataset(path)
    env = sapo_env.parallel_env(**SWARM)
    observations, _ = env.reset(seed=1)  # another seed: other questions
    with pytest.raises(KeyError, match="node_0: no recorded group for question"):
        PlaybackAgent(pool, "node_0").act(observations["node_0"])
    skipping = PlaybackAgent(pool, "node_0", on_missing="skip")
    action = skipping.act(observations["node_0"])
    assert action["share"] == (0, 0) and skipping.missing == 2
    assert action["completions"] == (("",) * 4,) * 2
    with pytest.raises(ValueError, match="no readable group sent by 'node_9'"):
        PlaybackAgent(pool, "node_9")


def test_a_resumed_run_keeps_the_files_of_the_rounds_before_it(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from sapo_env.runtime.pool_dataset import PoolDatasetCallback

    _, path = record(tmp_path, demonstrators)  # files of rounds 0-2 and 3
    env = sapo_env.parallel_env(**SWARM)
    observations, _ = env.reset(seed=0)
    nodes = demonstrators(env.agents)
    for _ in range(3):
        observations, *_ = env.step({a: nodes[a].act(observations[a]) for a in env.agents})
    PoolDatasetCallback(path).on_run_start(env, {})  # as a run resumed at round 3 starts
    assert [p.name for p in path.iterdir()] == ["rounds-000000-000002.parquet"]
    env.reset(seed=0)
    PoolDatasetCallback(path).on_run_start(env, {})  # a run from round 0 replaces them all
    assert list(path.iterdir()) == []


def test_without_datasets_the_error_names_the_extra(monkeypatch):
    from sapo_env.runtime.pool_dataset import PoolDatasetCallback

    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'sapo-env\[data\]'"):
        PoolDatasetCallback("pool")


class WithLogprobs(DemonstratorAgent):
    """A demonstrator that sends per-token log-probabilities and token ids, as an LM node can."""

    def act(self, observation):
        action = super().act(observation)
        n_tokens = [[len(c) % 5 + 1 for c in q] for q in action["completions"]]
        return {**action, "logprobs": tuple(tuple((-0.25,) * k for k in q) for q in n_tokens),
                "token_ids": tuple(tuple(tuple(range(k)) for k in q) for q in n_tokens)}


def test_the_senders_log_probabilities_are_recorded_and_played_back(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from sapo_env.runtime.pool_dataset import load_pool_dataset

    def nodes(names):
        return {**demonstrators(names), "node_2": WithLogprobs(0.5, num_external=2, seed=2)}

    history, path = record(tmp_path, nodes)
    pool = load_pool_dataset(path)
    rows = pool.filter(lambda r: r["sender"] == "node_2")
    assert all(len(r["logprobs"]) == 4 and r["logprobs"][0][0] == -0.25 for r in rows)
    assert all(r["logprobs"] is None for r in pool if r["sender"] != "node_2")

    def played_back(names):
        return {**demonstrators(names), "node_2": PlaybackAgent(pool, "node_2")}

    again, path_again = record(tmp_path, played_back, name="again")
    np.testing.assert_array_equal(again.rewards, history.rewards)
    assert load_pool_dataset(path_again).to_list() == pool.to_list()


def packets_with_logprobs():
    """One round's packets from a swarm whose node_2 sends per-token values: all accepted."""
    env = sapo_env.parallel_env(**SWARM)
    observations, _ = env.reset(seed=0)
    nodes = {**demonstrators(env.agents), "node_2": WithLogprobs(0.5, num_external=2, seed=2)}
    env.step({a: nodes[a].act(observations[a]) for a in env.agents})
    return [p for p in env.last_packets if p.sender == "node_2"]


def test_a_refused_packet_is_recorded_without_its_per_token_values(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from sapo_env.defenses.publication import PacketFate
    from sapo_env.runtime.pool_dataset import PoolDatasetCallback, load_pool_dataset

    accepted = packets_with_logprobs()[0]
    assert accepted.accepted and len(accepted.group["logprobs"]) == 4
    refused = PacketFate(accepted.sender, "duplicate", accepted.group)
    bare = {k: v for k, v in accepted.group.items() if k not in ("logprobs", "token_ids")}

    def held(fates):  # the bytes a recorder holds after one round of these packets
        recorder = PoolDatasetCallback(tmp_path / "held", flush_every=100)
        recorder.add(0, fates)
        return recorder.bytes_held

    # a refused packet costs what it would without per-token values; an accepted one more
    assert held([refused]) == held([PacketFate(accepted.sender, "duplicate", bare)])
    assert held([accepted]) > held([refused])
    recorder = PoolDatasetCallback(tmp_path / "pool", flush_every=100)
    recorder.add(0, [accepted, refused])
    recorder.close()
    first, second = load_pool_dataset(tmp_path / "pool").to_list()
    assert first["status"] == "accepted" and first["logprobs"][0][0] == -0.25
    assert second["status"] == "duplicate" and second["completions"] == first["completions"]
    assert second["logprobs"] is None and second["token_ids"] is None


def test_the_recorder_writes_once_it_holds_flush_bytes(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from sapo_env.runtime.pool_dataset import PoolDatasetCallback, load_pool_dataset

    packets = packets_with_logprobs()
    recorder = PoolDatasetCallback(tmp_path / "sizes", flush_every=100)
    recorder.add(0, packets)
    one_round = recorder.bytes_held  # the 2 packets with log-probs, as Arrow buffers
    assert one_round > 4 * 4 * 5  # at least their float32 log-probs
    recorder = PoolDatasetCallback(tmp_path / "pool", flush_every=100,
                                   flush_bytes=2 * one_round + 1)
    held = []
    for round_ in range(5):
        recorder.add(round_, packets)
        held.append(recorder.bytes_held)
    assert held == [one_round, 2 * one_round, 0, one_round, 2 * one_round]
    assert recorder.files_written == 1
    recorder.close()
    files = sorted(p.name for p in (tmp_path / "pool").iterdir())
    assert files == ["rounds-000000-000002.parquet", "rounds-000003-000004.parquet"]
    rows = load_pool_dataset(tmp_path / "pool")  # nothing lost
    assert rows["round"] == [r for r in range(5) for _ in packets]


def test_a_run_flushed_by_bytes_records_every_round(tmp_path):
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from sapo_env.runtime.pool_dataset import load_pool_dataset

    _, by_rounds = record(tmp_path, demonstrators)
    _, by_bytes = record(tmp_path, demonstrators, name="by_bytes", flush_bytes=1)
    assert sorted(p.name for p in by_bytes.iterdir()) == [
        f"rounds-{r:06d}-{r:06d}.parquet" for r in range(4)]  # one file a round
    assert load_pool_dataset(by_bytes).to_list() == load_pool_dataset(by_rounds).to_list()


def test_the_docs_example_runs(tmp_path, monkeypatch):
    """docs/pool-dataset.md's example, shortened to 3 rounds, in a folder of its own."""
    pytest.importorskip("datasets", reason=NEEDS_DATASETS)
    from functools import partial
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "pool-dataset.md"
    code = page.read_text().split("```python\n")[1].split("```", 1)[0]
    monkeypatch.setattr(sapo_env.runtime, "run", partial(sapo_env.runtime.run, rounds=3,
                                                         progress=False))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "pool-dataset.md", "exec"), namespace)
    assert namespace["played"].rounds == 3 and namespace["pool"].num_rows == 3 * 4 * 4


def test_the_fates_docstring_example_runs():
    import doctest

    from sapo_env.defenses import publication

    result = doctest.testmod(publication)
    assert result.attempted > 0 and result.failed == 0
