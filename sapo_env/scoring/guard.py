"""Scoring untrusted completions so that no single one can stop, stall or crash a round.

Every completion is extracted and scored inside a guard (``guarded_scores``). A completion
scores 0, and is counted under a reason, when

- ``"too_long"``: its extracted answer is longer than ``max_answer_chars``; it is not parsed;
- ``"error"``: the extractor or the scorer raised (MemoryError included), or returned something
  that is not a finite number;
- ``"recursion"``: they raised RecursionError (deeply nested text);
- ``"timeout"``: they ran past ``time_limit`` seconds of wall-clock time, and were interrupted;
- ``"budget"``: the node whose completion it is has spent its scoring budget for the round
  (``ScoreBudget``, ``SwarmConfig.scoring_budget``): it is not scored at all. A completion
  that starts with less budget left than ``time_limit`` is interrupted when the budget runs
  out (and counted as a timeout), so one node's completions cost the round at most about its
  budget, however many there are.

The first failure of each reason is logged as a warning; the counts go to the caller (the env
reports them per node in ``infos[node]["scoring_failures"]``).

**The time limit** is an interval timer (``signal.setitimer(ITIMER_REAL)``), armed while a
question's completions are scored and ticking every ``TICK * time_limit`` seconds; at a tick
that finds the current completion past its limit, the SIGALRM handler raises ``ScoreTimeout``
(a ``BaseException``, so ``except Exception`` in a scorer does not swallow it) in the scoring
code, and raises again at every later tick until the scorer returns: a scorer that swallows the
first interruption still stops (one that catches ``BaseException`` in an endless loop cannot be
stopped). A score returned after the limit counts as a timeout whatever its value. The timer
and the SIGALRM handler are set for each question's completions, and the previous handler put
back after: a few system calls a question, not a completion; many questions scored in a row
(``timer_session``, as ``sapo_env.scoring.jobs.score_all`` scores a round) share one setting,
and a question whose node has less budget left than the limit sets a finer tick for its own
completions.

Python only runs signal handlers between bytecodes and in C code that checks for signals
(CPython's big-integer power and ``re`` do; a single huge multiplication does not): C code that
never checks cannot be interrupted, which is why ``sapo_env.scoring.safe_parsing`` bounds
numbers before computing them and answers are bounded in size. Signals exist only in the main
thread of the main interpreter on POSIX systems: where the timer cannot run (another thread,
someone else's interval timer already running, Windows), the env scores in a child process that
it kills when a node overruns its budget (``sapo_env.scoring.process_scoring``, chosen by
``round_scoring.LocalScoring``). Called directly there, ``guarded_scores`` scores **without a
time limit** (logged once); the other protections still apply.

**Memory** is bounded only indirectly: by the answer size limit, by the numeric bounds of the
safe parsers, and by the time limit (a scorer cannot allocate for longer than that). There is
no hard per-completion memory cap: the address-space limit is per process and would fail other
threads' allocations too.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

FAILURE_REASONS = ("too_long", "error", "recursion", "timeout", "budget")
"""Why a completion scored 0 without a verdict from its scorer (see the module docstring)."""
DEFAULT_MAX_ANSWER_CHARS = 2048
"""About ten times the longest honest answer of the paper's nine tasks; other tasks' answers can
be longer (tower_of_hanoi, palindrome_partitioning): raise ``max_answer_chars`` for them
(docs/provenance.md, "Scoring limits")."""
DEFAULT_TIME_LIMIT = 1.0
"""Seconds: about four times the slowest honest score of any reasoning-gym task
(docs/provenance.md, "Scoring limits")."""
TICK = 0.25
"""The timer ticks every ``TICK * limit`` seconds while completions are scored: a completion is
interrupted between ``limit`` and ``(1 + TICK) * limit`` after it starts, and again at every
tick until its scorer gives up."""


class ScoreTimeout(BaseException):
    """Raised inside a scorer that ran past its time limit."""


@dataclass(frozen=True)
class ScoringLimits:
    """The guard's limits (``SwarmConfig.max_answer_chars`` and ``score_time_limit``)."""

    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS
    time_limit: float | None = DEFAULT_TIME_LIMIT


DEFAULT_LIMITS = ScoringLimits()


@dataclass
class ScoreBudget:
    """Seconds of scoring one node has left this round; every completion of the node that is
    scored spends its wall-clock time (see the module docstring)."""

    seconds: float


def no_failures() -> dict[str, int]:
    """A fresh count of scoring failures, every reason at 0."""
    return dict.fromkeys(FAILURE_REASONS, 0)


_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)


class _Timer:
    """The per-completion time limit: while completions are scored, the main thread's interval
    timer ticks every ``tick`` seconds, and a tick that finds the current completion past its
    limit interrupts it (and every later tick does again)."""

    def __init__(self) -> None:
        self.limit = math.inf
        self.started: float | None = None  # when the current completion started; None: idle
        self.fired = False
        self.session_tick: float | None = None  # the tick a ``timer_session`` armed; None: none

    def handler(self, signum: int, frame: Any) -> None:
        started = self.started
        if started is not None and time.monotonic() - started >= self.limit:
            self.fired = True
            raise ScoreTimeout

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, interrupted once it has run ``limit`` seconds."""
        self.fired = False
        try:
            self.started = time.monotonic()
            return fn(*args)
        finally:
            # First thing: from here on the handler does nothing, so no ScoreTimeout can
            # escape past this point, wherever the interpreter lets the handler run.
            self.started = None

_TIMER = _Timer()


def timer_works() -> bool:
    """Whether the time limits can be enforced here: POSIX interval timers, the main thread,
    and no other interval timer running (``round_scoring.LocalScoring`` scores in a child
    process where they cannot)."""
    return (hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


def _timer_usable(limit: float | None) -> bool:
    if limit is None:
        return False
    if not hasattr(signal, "setitimer"):
        _warn_once("platform", "no interval timers on this platform: completions are scored "
                   "without a time limit")
        return False
    if threading.current_thread() is not threading.main_thread():
        _warn_once("thread", "scoring outside the main thread: completions are scored without "
                   "a time limit (signals reach only the main thread)")
        return False
    if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        _warn_once("busy", "an interval timer (ITIMER_REAL) is already running: these "
                   "completions are scored without a time limit")
        return False
    return True


def _tick(time_limit: float, budget: ScoreBudget | None) -> float:
    """The timer's period for completions limited to ``time_limit`` and ``budget``."""
    return max(TICK * min(time_limit, budget.seconds if budget else math.inf), 1e-3)


@contextmanager
def timer_session(limits: ScoringLimits) -> Iterator[None]:
    """Many questions scored in a row under one setting of the timer: the SIGALRM handler set
    and the interval timer armed once, at the tick of ``limits.time_limit``, for every
    ``guarded_scores`` call of this thread inside the block, and both put back as they were
    when it ends. Where the timer cannot run (see ``guarded_scores``), or inside another
    session, it sets nothing."""
    if _TIMER.session_tick is not None or not _timer_usable(limits.time_limit):
        yield
        return
    previous = signal.signal(signal.SIGALRM, _TIMER.handler)
    tick = _tick(limits.time_limit, None)
    signal.setitimer(signal.ITIMER_REAL, tick, tick)
    _TIMER.session_tick = tick
    try:
        yield
    finally:
        _TIMER.session_tick = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None: a handler installed outside Python; the default is the closest we can do
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


def _arm(limits: ScoringLimits, budget: ScoreBudget | None
         ) -> tuple[bool, Callable[[], None] | None]:
    """Sets the timer for one question's completions: whether it runs, and what puts it back
    as it was after them (None: nothing to). In this thread's session, at a tick no coarser
    than they need, it is left as it is; a finer tick is armed for them and the session's
    put back after."""
    if budget is not None and budget.seconds <= 0:
        return False, None  # nothing will be scored
    if limits.time_limit is None:
        return False, None
    tick = _tick(limits.time_limit, budget)
    session = _TIMER.session_tick
    if session is not None and threading.current_thread() is threading.main_thread():
        if tick >= session:
            return True, None
        signal.setitimer(signal.ITIMER_REAL, tick, tick)
        return True, lambda: signal.setitimer(signal.ITIMER_REAL, session, session)
    if not _timer_usable(limits.time_limit):
        return False, None
    previous = signal.signal(signal.SIGALRM, _TIMER.handler)
    signal.setitimer(signal.ITIMER_REAL, tick, tick)

    def put_back() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None: a handler installed outside Python; the default is the closest we can do
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

    return True, put_back


def guarded_scores(
    completions: Sequence[str],
    extract: Callable[[str], str | None],
    score: Callable[[str | None], Any],
    limits: ScoringLimits,
    failures: dict[str, int] | None = None,
    budget: ScoreBudget | None = None,
) -> np.ndarray:
    """``score(extract(completion))`` of each completion as float32, 0 for each one that failed
    or that ``budget`` (its node's, when given) no longer covers, counted by reason in
    ``failures`` when given (see the module docstring)."""
    use_timer, put_back = _arm(limits, budget)
    time_limit = limits.time_limit or math.inf
    try:
        values = []
        for completion in completions:
            if budget is None:
                _TIMER.limit = time_limit
            elif budget.seconds <= 0:
                values.append(_failed("budget", limits, failures))
                continue
            else:
                _TIMER.limit = min(time_limit, budget.seconds)
            started = time.monotonic()
            values.append(_score_one(completion, extract, score, limits, use_timer, failures))
            if budget is not None:
                budget.seconds -= time.monotonic() - started
    finally:
        if put_back is not None:
            put_back()
    return np.array(values, dtype=np.float32)


_MESSAGES = {
    "too_long": "an extracted answer was longer than max_answer_chars=%s",
    "error": "a scorer or extractor raised, or returned no finite number",
    "recursion": "a scorer or extractor recursed too deeply",
    "timeout": "a scorer or extractor ran past score_time_limit=%s s",
    "budget": "its node had spent its scoring budget for the round (SwarmConfig.scoring_budget)",
}


class _TooLong(Exception):
    """The extracted answer is over the limit (raised before any parsing)."""


def _verdict(completion: str, extract: Callable, score: Callable, max_chars: int) -> float:
    """The completion's score, or the exception that makes it a failure."""
    answer = extract(completion)
    if isinstance(answer, str) and len(answer) > max_chars:
        raise _TooLong
    value = float(score(answer))
    if not math.isfinite(value):
        raise ValueError(f"score {value}")
    return value


def _score_one(completion: str, extract: Callable, score: Callable, limits: ScoringLimits,
               use_timer: bool, failures: dict[str, int] | None) -> float:
    try:
        if not use_timer:
            return _verdict(completion, extract, score, limits.max_answer_chars)
        value = _TIMER.call(_verdict, completion, extract, score, limits.max_answer_chars)
        if not _TIMER.fired:
            return value
        reason = "timeout"  # the scorer swallowed the interruption and returned late
    except ScoreTimeout:
        reason = "timeout"
    except _TooLong:
        reason = "too_long"
    except RecursionError:
        reason = "recursion"
    except Exception:  # noqa: BLE001 (any failure of a scorer on untrusted text scores 0)
        reason = "error"
    return _failed(reason, limits, failures)


def _failed(reason: str, limits: ScoringLimits, failures: dict[str, int] | None) -> float:
    """0, counted under ``reason`` (and the first of each reason logged)."""
    if failures is not None:
        failures[reason] += 1
    limit = {"too_long": limits.max_answer_chars, "timeout": limits.time_limit}.get(reason)
    _warn_once(reason, "A completion scored 0: " + _MESSAGES[reason] + ". Further failures are "
               "counted in infos[node]['scoring_failures'] without a warning.",
               *(() if limit is None else (limit,)))
    return 0.0
