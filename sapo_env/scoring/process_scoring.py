"""Scoring in a child process that can be killed: the time limits hold wherever ``step`` runs.

The per-completion time limit of ``sapo_env.scoring.guard`` is a signal timer, and signals
reach only the main thread: ``env.step`` called from a worker thread (a thread pool, a web
server, some notebook kernels) or while another interval timer runs would score without any
time limit, and one hostile completion could hang the caller for good. There the env scores in
a ``ProcessScoring`` instead (``round_scoring.LocalScoring`` switches by itself):

- the completions are scored by the same guarded, safe scorers (``jobs.score_jobs``,
  as in a Ray worker) in the child's main thread, where the timer works, so scores and failure
  counts are the in-process ones (tested);
- each node's completions are one call, and the parent waits for it at most the node's
  budget (``SwarmConfig.scoring_budget``; without a budget, its completions' time limits) plus
  ``KILL_GRACE`` seconds. A call that overruns (C code that never checks for signals, a
  scorer that swallows every interruption) gets the child killed: that node's completions
  score 0 as ``"timeout"`` (as ``"error"`` if the child died by itself), a fresh child is
  started, and the round goes on with the next node. One node cannot stall the round past its
  own budget, nor cost the others their scores.
- The calls are written to the child's stdin by a writer thread, never by the caller: a child
  stuck on one node's call stops reading, its pipe fills, and it is the writer that waits
  on it, while the caller's wait for the answer runs out and the kill comes (a child that
  does not read within the allowance is killed like one that does not answer).
- The child (a ``python`` running :func:`serve`, talking over its stdin and stdout) is
  started once and kept; before the timed calls of a round it builds the round's reasoning-
  gym datasets in a call that is not timed, so start-up and dataset generation never count
  against a node's budget. Being a plain subprocess, it works from any thread and does not
  re-import the caller's script (as ``multiprocessing``'s spawn would).

It costs pickling each node's entries and completions both ways (the calls of a round are sent
at once and answered in order: no round trip per node; BENCHMARKS.md, "Env step from a worker
thread"). With neither a time limit nor a budget there is nothing to enforce, and the
completions are scored in the caller's thread.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from sapo_env.scoring.datasets import dataset_for
from sapo_env.scoring.guard import TICK, ScoringLimits, no_failures
from sapo_env.scoring.jobs import Scored, as_jobs, score_jobs

logger = logging.getLogger(__name__)

KILL_GRACE = 2.0
"""Seconds a node's call may run past its budget before the child is killed: the time the
child's own timer needs to interrupt a completion and return (one tick past the limit), with
room for pickling a large round on a busy machine."""


class ProcessScoring:
    """A ``Scoring`` (``sapo_env.scoring.round_scoring``) in a child process, each node's call
    bounded by a hard kill (see the module docstring)."""

    def __init__(self) -> None:
        self._child: _Child | None = None
        self._lock = threading.Lock()
        self.used = False  #: whether it has scored anything yet

    def score(self, drawn, completions, extract: Any, limits: ScoringLimits,
              owners: Sequence[int], budgets: Sequence[float] | None) -> list[Scored]:
        self.used = True
        jobs = as_jobs(drawn, completions, owners)
        if limits.time_limit is None and budgets is None:  # nothing to enforce
            return score_jobs(jobs, extract, limits)
        results: list[Any] = [None] * len(jobs)
        calls = []  # one per node: the positions of its jobs, and the jobs
        for owner in dict.fromkeys(owners):
            index = [k for k, job in enumerate(jobs) if job[3] == owner]
            calls.append((index, [jobs[k] for k in index]))
        with self._lock:  # an env stepped from two threads at once still works
            while calls:
                # All calls are sent at once and answered in order; each node's answer is
                # waited for at most its allowance after the one before it.
                child = self._started([ref for ref, *_ in jobs])
                for _, mine in calls:
                    child.send("score", (mine, extract, limits, budgets))
                for done, (index, mine) in enumerate(calls):
                    allowance = _allowance(mine, limits, budgets)
                    try:
                        scored = child.receive(allowance)
                    except _ChildFailed as failure:
                        self.close()
                        logger.warning("scoring node %d's completions %s: the scoring process "
                                       "was restarted and they score 0", mine[0][3], failure)
                        scored = [_failed(texts, failure.reason, allowance / len(mine))
                                  for _, _, texts, _ in mine]
                    for k, result in zip(index, scored):
                        results[k] = result
                    if self._child is None:  # killed: the calls after it go to a new child
                        calls = calls[done + 1:]
                        break
                else:
                    calls = []
        return results

    def _started(self, refs: Sequence[Any]) -> _Child:
        """The child, started if need be, with the datasets of ``refs`` built (not timed)."""
        if self._child is None:
            self._child = _Child()
        self._child.send("prepare", (refs,))
        self._child.receive(None)
        return self._child

    @property
    def child_pid(self) -> int | None:
        """The scoring child's process id (None before it starts): to watch what it costs."""
        return None if self._child is None else self._child.process.pid

    def close(self) -> None:
        """End the child process (a later ``score`` starts a new one)."""
        if self._child is not None:
            self._child.kill()
            self._child = None

    def __getstate__(self) -> dict[str, Any]:
        return {"used": self.used}  # a copy starts its own child

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()
        self.used = state["used"]


class _ChildFailed(Exception):
    def __init__(self, reason: str, text: str):
        super().__init__(text)
        self.reason = reason  # the scoring failure its completions count under


class _Child:
    """The child process and its pipes: calls are answered in the order they were sent; a
    writer thread sends the calls queued for it (None: close the pipe), a reader thread
    queues the answers (None when the child's output ends)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from sapo_env.scoring.process_scoring import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.answers: queue.Queue = queue.Queue()
        self.calls: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_all, daemon=True).start()
        threading.Thread(target=self._write_all, daemon=True).start()

    def _read_all(self) -> None:
        while (answer := _read(self.process.stdout)) is not None:
            self.answers.put(answer)
        self.answers.put(None)
        self.process.stdout.close()

    def _write_all(self) -> None:
        # The only thread that touches stdin: it may wait on a full pipe for as long as the
        # child does not read, which the kill ends (the write then fails).
        pipe = self.process.stdin
        try:
            while (data := self.calls.get()) is not None:
                pipe.write(data)
                pipe.flush()
        except OSError:  # the child is gone; receive says so
            pass
        finally:
            try:
                pipe.close()
            except OSError:  # what was left in its buffer had nowhere to go
                pass

    def send(self, function: str, args: tuple) -> None:
        """Queue a call for the writer thread: returns at once, however full the pipe is."""
        self.calls.put(_message((function, args)))

    def receive(self, timeout: float | None) -> Any:
        try:
            answer = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise _ChildFailed("timeout", f"overran {timeout:.1f} s") from None
        if answer is None:
            self.answers.put(None)  # every later receive fails the same way
            raise _ChildFailed("error", "ended the scoring process")
        return answer

    def kill(self) -> None:
        self.process.kill()  # its output ends, and the reader thread closes it
        self.process.wait()
        self.calls.put(None)  # a writer waiting on the pipe has failed already; it closes it


def _allowance(jobs: Sequence[Any], limits: ScoringLimits,
               budgets: Sequence[float] | None) -> float:
    """Seconds one node's call may take: its budget, or its completions' time limits."""
    if budgets is not None:
        seconds = max(budgets[jobs[0][3]], 0.0)
    else:
        seconds = sum(len(texts) for _, _, texts, _ in jobs) * limits.time_limit * (1 + TICK)
    return seconds + KILL_GRACE


def _failed(texts: Sequence[str], reason: str, seconds: float) -> Scored:
    failures = no_failures()
    failures[reason] = len(texts)
    return Scored(np.zeros(len(texts), dtype=np.float32), failures, seconds)


def _message(value: Any) -> bytes:
    """A message as it goes down a pipe: its length, then its pickle (a call is pickled by the
    caller, so that a value that cannot be pickled raises there, not in the writer thread)."""
    data = pickle.dumps(value)
    return len(data).to_bytes(8, "little") + data


def _write(pipe: BinaryIO, message: Any) -> None:
    pipe.write(_message(message))
    pipe.flush()


def _read(pipe: BinaryIO) -> Any:
    """One message, or None at the end of the stream (the other side is gone). Both sides
    are this module's code: the parent reads scores from its own child, the child its
    parent's jobs; no text of a node is unpickled here that was not pickled by the parent."""
    try:
        header = pipe.read(8)
        if len(header) < 8:
            return None
        data = pipe.read(int.from_bytes(header, "little"))
        return pickle.loads(data)
    except (OSError, ValueError, EOFError, pickle.UnpicklingError):
        return None


def serve() -> None:
    """The child's loop: answer calls until the parent closes the pipe."""
    answers = os.fdopen(os.dup(1), "wb")  # messages only: stray prints go to stderr
    os.dup2(2, 1)
    functions = {"prepare": lambda refs: len([dataset_for(ref) for ref in refs]),
                 "score": score_jobs}
    while (message := _read(sys.stdin.buffer)) is not None:
        function, args = message
        _write(answers, functions[function](*args))

