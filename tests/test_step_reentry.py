"""An env runs one call at a time: a ``step`` or ``reset`` made while a step runs,
from another thread or from inside the step, raises ``RuntimeError`` at once and changes
nothing, and the running step completes exactly as it would have alone."""

from __future__ import annotations

import pickle
import threading

import pytest

import sapo_env


def _actions(observations):
    return {a: {"num_external": 2, "completions": [
        [f"<answer>{k}</answer>" for k in range(o["completions_per_question"])]
        for _ in o["questions"]]} for a, o in observations.items()}


def _blocking_filter(started: threading.Event, release: threading.Event):
    """A filter that keeps every group, and holds the first thread that calls it until
    ``release``: a step held in its middle, after scoring, before the pool is written."""
    holder = []

    def keep(group):
        if not holder:
            holder.append(threading.current_thread())
        if threading.current_thread() is holder[0] and not release.is_set():
            started.set()
            release.wait(30)
        return True

    return keep


def test_a_second_step_or_reset_while_a_step_runs_raises_and_changes_nothing():
    started, release = threading.Event(), threading.Event()
    keep = _blocking_filter(started, release)
    env = sapo_env.parallel_env(n=3, max_rounds=3, filter=keep)
    alone = sapo_env.parallel_env(n=3, max_rounds=3, filter=keep)  # stepped once released
    observations, _ = env.reset(seed=0)
    alone.reset(seed=0)
    actions = _actions(observations)
    first = []
    runner = threading.Thread(target=lambda: first.append(env.step(actions)))
    runner.start()
    assert started.wait(30), "the first step never reached the filter"
    state = pickle.dumps(env.state_dict())
    with pytest.raises(RuntimeError, match=r"step\(\) called while step\(\) of the same env"):
        env.step(actions)
    with pytest.raises(RuntimeError, match=r"reset\(\) called while step\(\)"):
        env.reset(seed=1)
    assert pickle.dumps(env.state_dict()) == state  # the refused calls changed nothing
    release.set()
    runner.join(30)
    assert not runner.is_alive() and len(first) == 1
    expected = alone.step(actions)
    assert first[0][1] == expected[1]  # rewards
    assert pickle.dumps(env.state_dict()) == pickle.dumps(alone.state_dict())
    env.step(_actions(first[0][0]))  # free again once it has returned


def test_a_step_called_from_inside_a_step_is_refused():
    """A sampler that calls ``env.step`` (re-entering from the same thread) gets the error;
    the outer step fails with it and leaves the env as it was."""
    calls = []

    def sampler(candidates, k, rng):
        calls.append(k)
        env.step({})
        return list(candidates)[:k]

    env = sapo_env.parallel_env(n=3, max_rounds=3, external_sampling=sampler)
    observations, _ = env.reset(seed=0)
    state = pickle.dumps(env.state_dict())
    with pytest.raises(RuntimeError, match="called while step"):
        env.step(_actions(observations))
    assert calls and pickle.dumps(env.state_dict()) == state


def test_a_copy_of_an_env_has_a_free_guard():
    """Even one pickled while a call holds the guard (the lock is not pickled: a copy is a
    new env, with no call running)."""
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    with env._busy("step"):
        copy = pickle.loads(pickle.dumps(env))
    observations, _ = copy.reset(seed=0)
    copy.step(_actions(observations))
