"""One call at a time: an env's ``step`` and ``reset`` refuse to run while another runs.

A round reads and rewrites the whole run state (the questions dealt, the pools, every node's
sampling stream): two steps interleaved from two threads would pair one question's group with
another question's completions and leave the state half of each. So a second call, from
another thread or from code a step runs (a filter or sampler that calls ``env.step``), raises
``RuntimeError`` at once, before it reads or changes anything, and the first call completes as
if it had been alone. An env that several threads drive needs their calls in turn (a lock of
theirs), or one env per thread.

The guard is a lock that is never waited on; a pickled or copied env starts with a free one.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

Method = TypeVar("Method", bound=Callable[..., Any])


class Busy:
    """The guard: ``with busy("step"):`` holds it, or raises ``RuntimeError`` when held."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: str | None = None

    @contextmanager
    def __call__(self, call: str) -> Iterator[None]:
        if not self._lock.acquire(blocking=False):
            running = f"{self._running}()" if self._running else "another call"
            raise RuntimeError(
                f"{call}() called while {running} of the same env is running (from "
                "another thread, or from code that call runs): an env runs one call at a "
                "time; make the calls in turn, or give each thread its own env. This call "
                "changed nothing.")
        self._running = call
        try:
            yield
        finally:
            self._running = None
            self._lock.release()

    def __reduce__(self) -> tuple:
        return Busy, ()


def one_at_a_time(method: Method) -> Method:
    """Runs the method under its object's ``_busy`` guard (a :class:`Busy`)."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._busy(method.__name__):
            return method(self, *args, **kwargs)

    return guarded  # type: ignore[return-value]
