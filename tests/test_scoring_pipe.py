"""The scoring child's pipe can never stop the kill: a child stuck on one node's call stops reading
its stdin, and the calls queued after it (here 2 MB) fill the pipe. A caller that wrote them itself
would block there, never reaching the wait that ends in the kill; a writer thread waits on the pipe
instead, so the caller's wait runs out, the child is killed, the stuck node's completions count as
timeouts, and the next node is scored by a new child."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import sapo_env
from sapo_env.scoring import process_scoring
from sapo_env.scoring.answers import get_extractor
from sapo_env.scoring.guard import ScoringLimits
from sapo_env.tasks import redraw

HOSTILE = "<answer>1e999999999</answer>"  # coin_flip's scorer: minutes, in C code


@pytest.mark.slow
def test_a_child_that_stops_reading_is_killed_at_the_end_of_the_allowance(monkeypatch):
    env = sapo_env.parallel_env(n=2, tasks=[["coin_flip", 1.0, {}]])
    observations, _ = env.reset(seed=0)
    stuck, other = (redraw(q["ref"]) for q in observations["node_0"]["questions"][:2])
    real = process_scoring._allowance
    monkeypatch.setattr(process_scoring, "_allowance", lambda jobs, limits, budgets: 1.0
                        if jobs[0][3] == 0 else real(jobs, limits, budgets))
    scoring = process_scoring.ProcessScoring()
    big = ["x" * 250_000] * 8  # 2 MB: far more than a pipe holds
    out = []
    caller = threading.Thread(target=lambda: out.append(scoring.score(
        [stuck, other], [[HOSTILE], big], get_extractor("tag"), ScoringLimits(time_limit=60.0),
        [0, 1], None)), daemon=True)
    started = time.perf_counter()
    caller.start()
    caller.join(30)  # 1 s allowance, then a new child's start (seconds); not minutes
    seconds = time.perf_counter() - started
    try:
        assert out, f"scoring was still blocked after {seconds:.0f} s"
        (hostile, hostile_failures, *_), (texts, text_failures, *_) = out[0]
        assert hostile_failures["timeout"] == 1 and hostile.tolist() == [0.0]
        assert texts.tolist() == [0.0] * 8 and sum(text_failures.values()) == 0
    finally:
        scoring.close()


def test_sending_returns_at_once_whatever_the_child_reads():
    """A child that does not read (stopped): eight 1 MB calls are queued in no time, and the
    kill ends the writer thread, which closes the pipe."""
    child = process_scoring._Child()
    child.process.send_signal(signal.SIGSTOP)
    done = threading.Event()

    def send():
        for _ in range(8):
            child.send("prepare", (["x" * 1_000_000],))
        done.set()

    try:
        threading.Thread(target=send, daemon=True).start()
        assert done.wait(10), "send() blocked on the full pipe"
    finally:
        child.kill()
    deadline = time.monotonic() + 10
    while not child.process.stdin.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.process.stdin.closed
