"""Automatic garbage collection is off inside ``env.step`` and ``env.reset`` and exactly as it
was after them, whether they return or raise (``sapo_env.collection_pause``)."""

from __future__ import annotations

import gc

import pytest

import sapo_env

EASY = [["basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 3}]]


def _actions(observations):
    return {a: {"num_external": 2, "completions": [
        [f"<answer>{k}</answer>" for k in range(o["completions_per_question"])]
        for _ in o["questions"]]} for a, o in observations.items()}


@pytest.fixture
def collector():
    """Collections counted through ``gc.callbacks``; thresholds and switch put back after."""
    passes = []

    def record(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    before = gc.get_threshold(), gc.isenabled()
    gc.callbacks.append(record)
    gc.set_threshold(100, 5, 5)  # low: young passes every 100 allocations when enabled
    gc.enable()
    yield passes
    gc.callbacks.remove(record)
    gc.set_threshold(*before[0])
    (gc.enable if before[1] else gc.disable)()


def _spy_inside(env, seen, passes, fail=False):
    """During the step (where its next questions are drawn): allocate enough containers to
    set off a young pass were collection on, and note the switch and the passes run."""
    draw = env._draw_questions

    def spying():
        start = len(passes)
        garbage = [[i] for i in range(5_000)]
        seen.append((gc.isenabled(), len(passes) - start, len(garbage)))
        if fail:
            raise RuntimeError("a failure inside the step")
        return draw()

    env._draw_questions = spying


@pytest.mark.parametrize("fail", [False, True])
def test_no_collection_inside_a_step_and_the_collector_as_it_was_after(collector, fail):
    env = sapo_env.parallel_env(n=2, max_rounds=4, tasks=EASY)
    observations, _ = env.reset(seed=0)
    seen = []
    _spy_inside(env, seen, collector, fail)
    if fail:
        with pytest.raises(RuntimeError, match="inside the step"):
            env.step(_actions(observations))
    else:
        env.step(_actions(observations))
    assert seen == [(False, 0, 5_000)]  # off inside, no pass over the 5,000 new lists
    assert gc.isenabled() and gc.get_threshold() == (100, 5, 5)
    # a caller that switched collection off finds it off, after a step and after a failed one
    gc.disable()
    with pytest.raises(ValueError):
        env.step({"node_0": {"completions": "not a list", "num_external": 2}})
    with pytest.raises(ValueError):
        env.reset(options={"state": {"not": "a state"}})
    assert not gc.isenabled() and gc.get_threshold() == (100, 5, 5)
    gc.enable()
    with pytest.raises(ValueError):
        env.reset(options={"state": {"not": "a state"}})
    assert gc.isenabled()
