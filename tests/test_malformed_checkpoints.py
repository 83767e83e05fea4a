"""A malformed checkpoint is refused with a ``ValueError`` that names the field, before the run
uses any of it: the pool's and batches' groups go through the packet schema's field checks, the
JSON's size is checked before it is parsed, and the states of agents, policies, the history and
the reproduce harness are checked field by field."""

from __future__ import annotations

import io
import json
import logging
import zipfile

import numpy as np
import pytest
from test_checkpoints import (
    Interrupt,
    Rounds,
    StopAfter,
    assert_refused_and_unchanged,
    assert_same,
    broken,
    make_env,
    scripted_actions,
    swarm_run,
)

from agents import EXP3
from agents.sim.simulated import simulated_swarm
from sapo_env.runtime import Checkpoint, plain_data
from sapo_env.runtime import checkpoint as checkpoints

POOL = ("pool", "groups", 0)
BATCH = ("batches", "node_0", 0)
GROUPS = r"state\['pool'\]\['groups'\]\[0\]: "
BATCHES = r"state\['batches'\]\['node_0'\]\[0\]: "
NUMBERS = "must be 3 numbers, each finite as float32"
TEXT = r"must be a str of at most 65536 characters, valid Unicode \((malformed|oversized)\)"

MALFORMED_GROUPS = [
    (POOL + ("rewards",), np.array([np.nan, 0, 0], np.float32), GROUPS + "rewards " + NUMBERS),
    (POOL + ("advantages",), np.array([1e39, 0, 0]), GROUPS + "advantages " + NUMBERS),
    (POOL + ("rewards",), np.array([1j, 0, 0]), GROUPS + "rewards " + NUMBERS),
    (POOL + ("question",), 5, GROUPS + "question " + TEXT),
    (POOL + ("answer",), None, GROUPS + "answer " + TEXT),
    (POOL + ("task",), "\ud800", GROUPS + "task " + TEXT),
    (POOL + ("id",), "x" * 70_000, GROUPS + "id " + TEXT),
    (POOL + ("completions",), ("a", "b", "\udc80"), GROUPS + "completions must be a list or "
                                                    "tuple of 3 str"),
    (POOL + ("round",), 2**100, GROUPS + r"round must be an int in \[0, 8\) \(max_rounds\)"),
    (POOL + ("round",), "1", GROUPS + r"round must be an int in \[0, 8\)"),
    (POOL + ("ref", "seed"), 2**100, GROUPS + r"ref must be a dict \{task, config, seed, index"),
    (POOL + ("ref", "config"), {"a": {1, 2}}, GROUPS + "ref must be"),
    (POOL + ("planted",), 1, GROUPS + "the group must be a dict with the keys"),
    (BATCH + ("rescue",), 1, BATCHES + "rescue must be a bool, got 1"),
    (BATCH + ("local",), "yes", BATCHES + "local must be a bool, got 'yes'"),
    (BATCH + ("rewards",), np.array([0, np.inf, 0]), BATCHES + "rewards " + NUMBERS),
    (BATCH + ("system_prompt",), ["x"], BATCHES + "system_prompt " + TEXT),
]


def stepped_env():
    env = make_env("paper")
    observations, _ = env.reset(seed=3)
    observations, *_ = env.step(scripted_actions(observations))
    return env, observations


@pytest.mark.parametrize("path, value, message", MALFORMED_GROUPS)
def test_a_malformed_group_names_the_group_and_the_field_and_changes_nothing(
        path, value, message):
    env, observations = stepped_env()
    assert_refused_and_unchanged(env, observations, path, value, message)


def test_sender_log_probs_in_a_group_are_checked_as_a_packets_are():
    env, _ = stepped_env()
    state = broken(env.state_dict(), POOL + ("logprobs",), ([-1.0], [-1.0], [-1.0]))
    state["pool"]["groups"][0]["token_ids"] = ([2**100], [1], [1])  # numpy: OverflowError
    with pytest.raises(ValueError, match=GROUPS + "logprobs must be .* OverflowError"):
        make_env("paper").reset(options={"state": state})


def test_a_group_comes_back_through_the_packet_schema(monkeypatch):
    """Restoring parses every group of the pool and of the batches with the schema's checks."""
    from sapo_env import pool

    env, _ = stepped_env()
    state = env.state_dict()
    parsed, real = [], pool.parse_group
    monkeypatch.setattr(pool, "parse_group", lambda *a: parsed.append(a[0]["id"]) or real(*a))
    again = make_env("paper")
    again.reset(options={"state": state})
    batched = [g["id"] for groups in state["batches"].values() for g in groups]
    assert parsed == [g["id"] for g in state["pool"]["groups"]] + batched and batched
    assert_same(again.state_dict(), state)  # a sound state comes back the same


def test_a_checkpoint_with_a_malformed_group_stops_the_run_before_anything_runs(tmp_path):
    path = tmp_path / "run.ckpt"
    with pytest.raises(Interrupt):
        swarm_run(Checkpoint(path, every=4), [StopAfter(5)])
    saved = checkpoints.read(path)
    saved["env"]["pool"]["groups"][0]["rewards"] = np.array([np.nan, 0, 0, 0], np.float32)
    checkpoints.write(path, saved)
    rounds = Rounds()
    with pytest.raises(ValueError, match=r"state\['pool'\]\['groups'\]\[0\]: rewards must be"):
        swarm_run(Checkpoint(path, every=4), [rounds])
    assert rounds.played == []


# --- the JSON's size is checked before it is parsed -----------------------------------------------

@pytest.fixture
def reads(monkeypatch):
    """The members of a zip that are read, and the JSON texts parsed."""
    seen = {"members": [], "json": 0}
    real_read, real_loads = zipfile.ZipFile.read, json.loads

    def read(self, name, *args, **kwargs):
        seen["members"].append(getattr(name, "filename", name))
        return real_read(self, name, *args, **kwargs)

    def loads(*args, **kwargs):
        seen["json"] += 1
        return real_loads(*args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "read", read)
    monkeypatch.setattr(json, "loads", loads)
    return seen


def test_decode_refuses_a_json_over_its_bound_before_reading_it(reads):
    data = plain_data.encode({"groups": [{}] * 1000, "rewards": np.zeros(3)})
    size = zipfile.ZipFile(io.BytesIO(data)).getinfo("state.json").file_size
    assert plain_data.decode(data, max_json_bytes=size)["groups"] == [{}] * 1000
    assert reads["members"] == ["state.json"] and reads["json"] == 1
    reads["members"].clear()
    with pytest.raises(ValueError, match=f"state.json is {size} bytes, more than the {size - 1} "
                                         "allowed"):
        plain_data.decode(data, max_json_bytes=size - 1)
    assert reads["members"] == [] and reads["json"] == 1  # neither read nor parsed
    assert plain_data.MAX_JSON_BYTES == 2**27


def test_a_checkpoint_over_max_state_bytes_is_refused_before_it_is_parsed(tmp_path, reads):
    path = tmp_path / "run.ckpt"
    with pytest.raises(Interrupt):
        swarm_run(Checkpoint(path, every=4), [StopAfter(5)])
    size = zipfile.ZipFile(path).getinfo("state.json").file_size
    reads["members"].clear()
    parsed = reads["json"]
    with pytest.raises(ValueError, match=f"state.json is {size} bytes, more than the 1000 "):
        swarm_run(Checkpoint(path, every=4, max_state_bytes=1000))
    assert "state.json" not in reads["members"] and reads["json"] == parsed
    with pytest.raises(ValueError, match="max_state_bytes must be an int >= 1"):
        Checkpoint(path, max_state_bytes=0)


# --- agents, policies, the history ----------------------------------------------------------------

def test_a_malformed_agent_or_policy_state_names_the_field():
    learner = simulated_swarm(["node_0"], seed=0)["node_0"]
    state = learner.state_dict()
    with pytest.raises(ValueError, match=r"SimulatedLearner state\['lr'\] must be a float, got "
                                         "None"):
        learner.load_state_dict({**state, "lr": None})  # was loaded, and learn() then raised
    policy = EXP3(seed=0)
    policy.choose({"train_budget": 8, "num_external": 4, "round": 0})
    state = policy.state_dict()
    with pytest.raises(ValueError, match=r"EXP3 state\['silent'\] must be a 1-d array of bool"):
        policy.load_state_dict({**state, "silent": True})  # was a 0-d array: IndexError later
    rng = {**state["rng"], "state": {**state["rng"]["state"], "inc": -1}}
    with pytest.raises(ValueError, match=r"EXP3 state\['rng'\]: expected a numpy PCG64"):
        policy.load_state_dict({**state, "rng": rng})  # was an OverflowError


@pytest.mark.parametrize("path, value, message", [
    (("agents", 1), [], r"state\['agents'\] must list distinct nodes"),
    (("drawn", "node_0", 0, "task"), [], r"state\['drawn'\]\['node_0'\]\[0\] must be a question "
                                         "ref"),
])
def test_an_unhashable_node_or_task_names_the_field(path, value, message):
    env, _ = stepped_env()
    with pytest.raises(ValueError, match=message):  # was a TypeError
        make_env("paper").reset(options={"state": broken(env.state_dict(), path, value)})


@pytest.mark.parametrize("change, message", [
    (lambda h: h.update(rewards=np.zeros((2, 2))),
     r"history's rewards must be a numeric array of shape \(8, 4\), got float64 of shape"),
    (lambda h: h.update(generated=np.zeros((8, 4), complex)), "history's generated must be"),
    (lambda h: h["infos"].pop(), "history's infos must be 8 dicts, one a round"),
    (lambda h: h["learn_metrics"].__setitem__(0, None), "history's learn_metrics must be 8 dicts"),
    (lambda h: h.update(rounds=4), "its history holds 4 rounds, its env's state 8"),
])
def test_a_history_that_does_not_fit_the_run_names_the_field(change, message, tmp_path):
    path = tmp_path / "run.ckpt"
    with pytest.raises(Interrupt):
        swarm_run(Checkpoint(path, every=4), [StopAfter(9)])
    saved = checkpoints.read(path)
    change(saved["history"])
    checkpoints.write(path, saved)
    with pytest.raises(ValueError, match=message):
        swarm_run(Checkpoint(path, every=4))


# --- the reproduce harness's own checkpoint files -------------------------------------------------

def test_reproduce_checks_its_clock_state_and_the_id_beside_a_checkpoint(tmp_path, caplog):
    import sapo_experiments.reproduce as rp
    from sapo_experiments.reproduce import sweep

    for state in ({}, {"seconds": None}, {"seconds": float("nan")}, [1]):
        with pytest.raises(ValueError, match=r"RunClock state\['seconds'\] must be a number"):
            sweep.RunClock().load_state_dict(state)
    spec = rp.RunSpec("4/4", 0, rp.ReproduceConfig(out=tmp_path, rounds=8, n_agents=2, seeds=1))
    path = spec.checkpoint_path
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK")  # what it holds is read (and checked) only when resumed from
    id_file = path.with_name(path.name + ".id")
    agents = simulated_swarm(2, seed=0)
    id_file.write_bytes(b"\xff" * 10**6)  # was a UnicodeDecodeError, and read whole
    with caplog.at_level(logging.WARNING):
        checkpoint = sweep._checkpoint(spec, agents)
    assert not checkpoint.resume and f"{id_file} is not an id this sweep writes" in caplog.text
    assert id_file.read_text() == checkpoint.run_id and len(checkpoint.run_id) == 32
    again = sweep._checkpoint(spec, agents)  # a sound id resumes
    assert again.resume and again.run_id == checkpoint.run_id
