"""Checkpoints: the env's state as plain data, agents' and policies' state, runner and reproduce
resume (bit for bit), atomic writes."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from timings import without_timing_arrays, without_timings_md

import sapo_env
import sapo_env.runtime
from agents import (
    EXP3,
    DemonstratorAgent,
    DiscountedUCB,
    FixedRatio,
    LearningProgress,
    PoolQuality,
    RandomAgent,
    SB3Ratio,
    ThompsonSampling,
)
from agents.sim.simulated import simulated_swarm
from sapo_env.runtime import Checkpoint, plain_data
from sapo_env.runtime import checkpoint as checkpoints
from sapo_env.runtime.metrics import HeldOutEvaluator
from sapo_env.tasks import reference_answer, resolve

SMALL = dict(n=3, completions_per_question=3, train_budget=3, num_external=1, max_rounds=8)
CONFIGS = {
    "paper": {},
    "window": dict(pool_window=3, pool_capacity=10),
    "self_replay": dict(external_source="self_replay", pool_window=2),
    "shared_questions": dict(shared_questions=True, questions_per_round=4, filter_local=True),
}


def assert_same(a, b, where="state"):
    """Equal, recursively, arrays bit for bit, dict keys in any order."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):  # bit for bit (NaN included)
        assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes()), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_plain(value):
    """``value`` is plain data (``sapo_env.runtime.plain_data``); it comes back equal, type for
    type and bit for bit, from its bytes."""
    again = plain_data.decode(plain_data.encode(value))
    assert_same(again, value)
    return again


def scripted_actions(observations):
    """A deterministic mix of right and wrong answers and of J, read off the observations."""
    actions = {}
    for n, (a, o) in enumerate(sorted(observations.items())):
        completions = []
        for k, q in enumerate(o["questions"]):
            right = f"<answer>{reference_answer(resolve(q['ref']))}</answer>"
            completions.append(tuple(right if (i + k + o["round"]) % 3 == 0 else "wrong"
                                     for i in range(o["completions_per_question"])))
        actions[a] = {"completions": tuple(completions),
                      "num_external": (o["round"] + n) % (o["train_budget"] + 1)}
    return actions


def make_env(name):
    return sapo_env.parallel_env(render_mode="ansi", **SMALL, **CONFIGS[name])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_restored_env_continues_bit_for_bit(name):
    original = make_env(name)
    observations, _ = original.reset(seed=7)
    for _ in range(3):
        observations, *_ = original.step(scripted_actions(observations))
    state = assert_plain(original.state_dict())

    restored = make_env(name)
    again, infos = restored.reset(options={"state": state})
    assert_same(again, observations, "observations")
    assert infos == {a: {} for a in original.agents} and restored.round == original.round == 3
    assert restored.render() == original.render()
    pooled = restored._run.pool.groups
    assert not pooled or not pooled[0]["rewards"].flags.writeable
    while original.agents:
        actions = scripted_actions(observations)
        expected = original.step(actions)
        got = restored.step(actions)
        assert_same(got, expected, "step")
        observations = expected[0]
    assert restored.render() == original.render()
    assert_same(restored.state_dict(), original.state_dict())


def test_states_at_the_start_and_after_the_end_restore_too():
    original = make_env("paper")
    start, _ = original.reset(seed=1)
    fresh = make_env("paper")  # never reset
    assert_same(fresh.reset(options={"state": original.state_dict()})[0], start)
    observations = start
    while original.agents:
        observations, *_ = original.step(scripted_actions(observations))
    fresh.reset(options={"state": original.state_dict()})
    assert fresh.agents == [] and fresh.round == SMALL["max_rounds"]
    # a reset without a seed continues the restored seed stream as the original's does
    assert_same(fresh.reset()[0], original.reset()[0])


def broken(state, path, value):
    state = plain_data.decode(plain_data.encode(state))
    *parents, last = path
    target = state
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return state


MALFORMED = [
    (("round",), 99, r"state\['round'\] must be an int in \[0, 8\]"),
    (("agents",), ["node_0", "node_9"], r"state\['agents'\] must list distinct nodes"),
    (("pool",), KeyError, r"missing keys \['pool'\]"),
    (("config", "max_rounds"), "9", r"another config \(max_rounds: 9 in the state, 8 in this"),
    (("sampling_rngs", "node_1"), {"state": 1}, r"sampling_rngs'\]\['node_1'\]: expected a numpy"),
    (("pool", "groups", 0, "rewards"), np.zeros(2), r"pool'\]\['groups'\]\[0\]: rewards must be"),
    (("drawn", "node_0"), [], r"drawn'\]\['node_0'\] must list the 3 refs"),
    (("num_external", "node_2"), 4, r"num_external'\]\['node_2'\] must be an int in \[0, 3\]"),
    (("questions", "streams", "node_0", 0, "next_index"), -1, r"next_index must be an int"),
    (("format",), 0, r"reads format 2"),
    (("held",), {"node_0": 5}, r"held'\]\['node_0'\] must be the round of the questions"),
]


@pytest.mark.parametrize("path, value, message", MALFORMED)
def test_a_malformed_state_names_the_field_and_changes_nothing(path, value, message):
    env = make_env("paper")
    observations, _ = env.reset(seed=3)
    observations, *_ = env.step(scripted_actions(observations))
    assert_refused_and_unchanged(env, observations, path, value, message)


def assert_refused_and_unchanged(env, observations, path, value, message) -> None:
    """Restoring ``env``'s state with ``value`` at ``path`` raises ``ValueError`` matching
    ``message``, leaves the state as it was, and the env plays on."""
    before = env.state_dict()
    with pytest.raises(ValueError, match=message):
        env.reset(options={"state": broken(before, path, value)})
    assert_same(env.state_dict(), before)
    env.step(scripted_actions(observations))


def test_reset_options_errors():
    env = make_env("paper")
    env.reset(seed=0)
    state = env.state_dict()
    with pytest.raises(ValueError, match="seed=1 and a state"):
        env.reset(seed=1, options={"state": state})
    # other options are ignored, as PettingZoo's API test expects
    assert_same(env.reset(seed=0, options={"options": 1})[0], env.reset(seed=0)[0])
    with pytest.raises(ValueError, match="state must be a dict"):
        env.reset(options={"state": [1]})
    with pytest.raises(RuntimeError, match="before reset"):
        make_env("paper").state_dict()


# --- agents and ratio policies ------------------------------------------------------------------

class Constant:
    """A stand-in for a stable-baselines3 model: predicts J = 2."""

    def predict(self, observation, deterministic=True):
        return np.array([2]), None


AGENTS = {
    "simulated": lambda seed: simulated_swarm(["node_0"], seed=seed, num_external=2)["node_0"],
    "demonstrator": lambda seed: DemonstratorAgent(0.5, num_external=2, seed=seed,
                                                   tag_probability=0.5),
    "random": lambda seed: RandomAgent(num_external=2, seed=seed),
}
POLICIES = {
    "fixed": lambda seed: FixedRatio(2),
    "pool_quality": lambda seed: PoolQuality(window=2),
    "learning_progress": lambda seed: LearningProgress(window=2, check_every=2),
    "ucb": lambda seed: DiscountedUCB(),
    "exp3": lambda seed: EXP3(seed=seed),
    "thompson": lambda seed: ThompsonSampling(seed=seed, payoff="progress"),
    "sb3": lambda seed: SB3Ratio(Constant(), max_rounds=8),
}


def played(rounds=8):
    """Observations, rewards and infos of node_0 in a small swarm, round by round."""
    env = make_env("window")
    observations, _ = env.reset(seed=5)
    trace = []
    while env.agents:
        actions = scripted_actions(observations)
        after, rewards, _, _, infos = env.step(actions)
        trace.append((observations["node_0"], after["node_0"]["batch"], rewards["node_0"],
                      infos["node_0"]))
        observations = after
    return trace


def through_a_checkpoint_file(state, folder):
    """``state`` written and read back as a checkpoint: only plain data survives the read."""
    checkpoints.write(folder / "state.ckpt", {"state": state})
    return checkpoints.read(folder / "state.ckpt")["state"]


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_an_agent_resumes_from_its_state(name, tmp_path):
    trace = played()
    agent = AGENTS[name](1)
    for observation, batch, _, _ in trace[:4]:
        agent.act(observation)
        agent.learn(batch)
    copy = AGENTS[name](2)
    copy.load_state_dict(through_a_checkpoint_file(agent.state_dict(), tmp_path))
    for observation, batch, _, _ in trace[4:]:
        assert_same(copy.act(observation), agent.act(observation), "action")
        assert_same(copy.learn(batch), agent.learn(batch), "metrics")
    with pytest.raises(ValueError, match=type(agent).__name__):
        copy.load_state_dict({"nothing": 1})


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_ratio_policy_resumes_from_its_state(name, tmp_path):
    trace = played()
    policy = POLICIES[name](1)
    for observation, _, reward, info in trace[:4]:
        policy.choose(observation)
        policy.update(reward, info)
    state = policy.state_dict()
    assert_plain(state)
    copy = POLICIES[name](2)
    copy.load_state_dict(through_a_checkpoint_file(state, tmp_path))
    for observation, _, reward, info in trace[4:]:
        assert copy.choose(observation) == policy.choose(observation)
        policy.update(reward, info)
        copy.update(reward, info)
    assert_same(copy.state_dict(), policy.state_dict())
    with pytest.raises(ValueError, match=type(policy).__name__):
        copy.load_state_dict({"nothing": 1})


# --- the runner ---------------------------------------------------------------------------------

class Interrupt(Exception):
    pass


class StopAfter(sapo_env.runtime.Callback):
    """Interrupts the run after round ``k`` (a crash, a pre-emption)."""

    def __init__(self, k):
        self.k = k

    def on_round_end(self, record):
        if record.round == self.k:
            raise Interrupt


class Rounds(sapo_env.runtime.Callback):
    def __init__(self):
        self.played = []

    def on_round_end(self, record):
        self.played.append(record.round)


def swarm_run(checkpoint=None, extra=(), seed=4):
    """A run with every kind of state: learners, four policies, a held-out evaluator."""
    env = sapo_env.parallel_env(n=4, max_rounds=20, pool_window=2, completions_per_question=4)
    agents = simulated_swarm(env.possible_agents, seed=1)
    policies = {"node_0": EXP3(seed=1), "node_1": ThompsonSampling(seed=2),
                "node_2": DiscountedUCB(), "node_3": PoolQuality(window=3)}
    evaluator = HeldOutEvaluator(every=6, n_questions=3)
    history = sapo_env.runtime.run(env, agents, seed=seed, progress=False, ratio_policies=policies,
                           callbacks=[evaluator, *extra], checkpoint=checkpoint)
    return history, evaluator.result


def assert_same_history(got, expected):
    for key in ("rewards", "num_external", "generated"):
        assert_same(getattr(got, key), getattr(expected, key), key)
    assert_same(got.infos, expected.infos, "infos")
    assert_same(got.learn_metrics, expected.learn_metrics, "learn_metrics")


def test_an_interrupted_run_resumes_bit_for_bit(tmp_path):
    expected, held_out = swarm_run()
    checkpoint = Checkpoint(tmp_path / "run.ckpt", every=4)
    with pytest.raises(Interrupt):
        swarm_run(checkpoint, [StopAfter(13)])
    rounds = Rounds()
    history, resumed_held_out = swarm_run(checkpoint, [rounds])
    assert rounds.played == list(range(12, 20))  # from the checkpoint after round 11
    assert_same_history(history, expected)
    assert resumed_held_out == held_out and held_out.rounds == [5, 11, 17, 19]
    with pytest.raises(ValueError, match="another run: its seed is 4, this run's is 5"):
        swarm_run(checkpoint, seed=5)
    assert len(swarm_run(Checkpoint(checkpoint.path, resume=False), seed=5)[0].rewards) == 20


def test_callbacks_may_change_between_an_interruption_and_the_resume(tmp_path, caplog):
    expected, _ = swarm_run()
    checkpoint = Checkpoint(tmp_path / "run.ckpt", every=5)
    with pytest.raises(Interrupt):
        swarm_run(checkpoint, [StopAfter(7)])
    added = HeldOutEvaluator(every=6, n_questions=3)  # watches only: the run stays the same
    assert_same_history(swarm_run(checkpoint, [added])[0], expected)
    assert "holds no state of callback sapo_env.runtime.held_out.HeldOutEvaluator" in caplog.text
    assert added.result.rounds == [5, 11, 17, 19]  # from the checkpoint after round 4 on


def test_agents_without_state_dict_fail_at_the_start(tmp_path):
    class Plain:
        def act(self, observation):
            return {"completions": tuple(("",) * 3 for _ in observation["questions"]),
                    "num_external": 1}

        def learn(self, batch):
            return None

    env = sapo_env.parallel_env(**SMALL)
    agents = [DemonstratorAgent(num_external=1), Plain(), DemonstratorAgent(num_external=1)]
    with pytest.raises(TypeError, match=r"agents of node_1 \(Plain\) have none"):
        sapo_env.runtime.run(env, agents, seed=0, progress=False,
                     checkpoint=Checkpoint(tmp_path / "c.ckpt", every=1))
    assert env.round == 0 and not (tmp_path / "c.ckpt").exists()


class _Planted:
    """What a planted checkpoint carries: unpickling it would call os.system."""

    def __reduce__(self):
        import os

        return os.system, ("touch PWNED",)


@pytest.mark.parametrize("payload", [
    _Planted(), {"format": 1, "agents": _Planted()}, [np.zeros(3), _Planted()]])
def test_reading_a_checkpoint_never_runs_code(tmp_path, monkeypatch, payload):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "planted.ckpt"
    path.write_bytes(pickle.dumps(payload))
    with pytest.raises(ValueError, match=r"pickle checkpoint \(format 1, from sapo-env <= 0.6\)"):
        checkpoints.read(path)
    assert not (tmp_path / "PWNED").exists()


def test_a_planted_checkpoint_stops_the_run_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "run.ckpt"
    path.write_bytes(pickle.dumps({"format": 1, "run": _Planted()}))
    with pytest.raises(ValueError, match="is a pickle checkpoint"):
        swarm_run(Checkpoint(path, every=4))
    assert not (tmp_path / "PWNED").exists()


def test_a_killed_writes_temporary_file_is_removed_by_the_next_write(tmp_path):
    orphan = tmp_path / "run.ckpt.abc123.tmp"
    orphan.write_bytes(b"half a checkpoint")
    checkpoints.write(tmp_path / "run.ckpt", {"round": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


class _HalfWrites:
    """A checkpoint's file on a disk that fills up: half of what is written lands, then
    ``OSError``."""

    def __init__(self, file):
        self.file = file

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def write(self, data):
        self.file.write(data[:len(data) // 2])
        raise OSError("disk full")


def test_a_checkpoint_write_cut_short_leaves_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    checkpoints.write(path, {"round": 1})
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: _HalfWrites(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="disk full"):
        checkpoints.write(path, {"round": 2})
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    assert checkpoints.read(path) == {"round": 1} and [p.name for p in tmp_path.iterdir()] == [
        "run.ckpt"]

    # in a run: the third checkpoint fails, the run resumes from the second, bit for bit
    calls = []

    def third_fails(fd, mode):
        calls.append(1)
        file = real_fdopen(fd, mode)
        return _HalfWrites(file) if len(calls) == 3 else file

    monkeypatch.setattr(os, "fdopen", third_fails)
    checkpoint = Checkpoint(tmp_path / "swarm.ckpt", every=5)
    with pytest.raises(OSError, match="disk full"):
        swarm_run(checkpoint)
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    assert checkpoints.read(checkpoint.path)["history"]["rounds"] == 10
    rounds = Rounds()
    assert_same_history(swarm_run(checkpoint, [rounds])[0], swarm_run()[0])
    assert rounds.played == list(range(10, 20))


def test_a_light_grpo_save_holds_the_weights_without_adams_moments(tmp_path, tok,
                                                                   one_torch_thread):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_lm import tiny_llama

    from agents import GRPOAgent, GRPOConfig

    config = GRPOConfig(max_new_tokens=6, learning_rate=1e-2, device="cpu")
    question = {"id": "q", "task": "basic_arithmetic", "prompt": "1 + 2?", "ref": {}}
    observation = sapo_env.make_observation(
        round=0, system_prompt="Answer.", completions_per_question=2, train_budget=1,
        num_external=0, questions=(question,))

    def trained(seed):
        agent = GRPOAgent(tiny_llama(tok, seed=seed), tok, config, seed=seed)
        texts = agent.act(observation)["completions"][0]
        agent.learn([{"id": "g", "source": "node_0", "round": 0, "task": "basic_arithmetic",
                      "question": "1 + 2?", "system_prompt": "Answer.", "answer": "3",
                      "ref": {}, "completions": texts, "local": True,
                      "rewards": np.array([1.0, 0.0], dtype=np.float32),
                      "advantages": np.array([0.7, -0.7], dtype=np.float32)}])
        return agent

    agent = trained(0)
    agent.save(tmp_path / "full")
    agent.save(tmp_path / "light", optimizer=False)
    full, light = ((tmp_path / kind / "state.pt").stat().st_size for kind in ("full", "light"))
    assert light < full / 10  # the full save's state.pt is Adam's moments
    other = trained(1)
    assert other.optimizer.state
    other.load(tmp_path / "light")
    assert not other.optimizer.state and other.steps == agent.steps == 1
    for mine, theirs in zip(agent.model.parameters(), other.model.parameters()):
        assert torch.equal(mine, theirs)
    assert other.act(observation) == agent.act(observation)  # the random state came back too


@pytest.mark.parametrize("module", ["sapo_env.env_state", "agents.plain_state",
                                    "sapo_env.runtime.plain_data"])
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_checkpoint_settings_are_checked():
    with pytest.raises(ValueError, match="every must be an int >= 1, got 0"):
        Checkpoint("x.ckpt", every=0)


# --- sapo-env reproduce -------------------------------------------------------------------------

def test_an_interrupted_reproduce_sweep_resumes_mid_run_with_the_same_arrays(tmp_path,
                                                                             monkeypatch):
    import sapo_experiments.reproduce as rp
    from sapo_env.runtime import runner

    tensorboard = pytest.importorskip("tensorboard") is not None
    settings = dict(experiments=("4/4", "4/4 self-replay"), rounds=12, n_agents=2, seeds=1,
                    held_out_every=5, held_out_questions=2, jobs=1, plots=False,
                    progress=False, checkpoint_every=4, tensorboard=tensorboard)
    whole = rp.reproduce(rp.ReproduceConfig(out=tmp_path / "whole", **settings))

    config = rp.ReproduceConfig(out=tmp_path / "cut", **settings)
    real_play_round, played = runner.play_round, []

    def play_round(env, *args, **kwargs):
        played.append(env.round)
        if len(played) == 12 + 7:  # the second run, before its round 6: the machine goes down
            raise Interrupt
        return real_play_round(env, *args, **kwargs)

    monkeypatch.setattr(runner, "play_round", play_round)
    with pytest.raises(Interrupt):
        rp.reproduce(config)
    spec = rp.RunSpec("4/4 self-replay", 0, config)
    assert sorted(p.name for p in (config.out / "runs").iterdir()) == [
        spec.checkpoint_path.name, spec.checkpoint_path.name + ".id", "4-4_seed0.npz"]
    interrupted = (config.out / "runs" / spec.checkpoint_path.name).read_bytes()
    played.clear()
    cut = rp.reproduce(config)
    assert played == list(range(4, 12))  # from the checkpoint after round 3, not from 0
    assert sorted(p.name for p in (config.out / "runs").iterdir()) == [
        "4-4-self-replay_seed0.npz", "4-4_seed0.npz"]  # checkpoints removed when done
    for label in settings["experiments"]:  # all but the CPU seconds, which are timings
        got, expected = cut.runs[label][0], whole.runs[label][0]
        assert_same(without_timing_arrays(got), without_timing_arrays(expected), label)
        assert not np.isnan(got["act_cpu_seconds"]).any()  # the saved rounds' came back
    assert without_timings_md((config.out / "results.md").read_text()) == without_timings_md(
        (tmp_path / "whole" / "results.md").read_text())
    if tensorboard:  # every round logged once: what the cut session wrote after round 3 is dropped
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        board = EventAccumulator(str(config.out / "tensorboard" / spec.name)).Reload()
        assert [e.step for e in board.Scalars("reward/swarm_mean")] == list(range(12))

    # the same checkpoint planted where another sweep would look, without the id its run
    # keeps beside it, is never resumed from: that run starts at round 0, with the same arrays
    other = rp.ReproduceConfig(out=tmp_path / "planted", **{**settings,
                                                           "experiments": ("4/4 self-replay",)})
    path = rp.RunSpec("4/4 self-replay", 0, other).checkpoint_path
    path.parent.mkdir(parents=True)
    path.write_bytes(interrupted)
    played.clear()
    planted = rp.reproduce(other)
    assert played[:1] == [0] and len(played) == 12
    assert_same(without_timing_arrays(planted.runs["4/4 self-replay"][0]),
                without_timing_arrays(whole.runs["4/4 self-replay"][0]), "planted")
