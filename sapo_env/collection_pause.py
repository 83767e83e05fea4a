"""No cyclic garbage collection inside an env's ``step`` and ``reset``.

A round allocates many objects a node (groups, observations, infos) while the env's long-lived
state (the pool, every node's batch and questions, reasoning-gym's cached entries) holds many
more: left on, Python's collector would run many times a round, its passes over the young
objects of a big swarm and some over all of them, so a round's cost would grow faster than its
nodes. ``paused_collection`` switches automatic collection off for the call and back to exactly
what it was when the call returns or raises: the garbage of a round (nearly all freed at once
by reference counting) is collected by the first automatic pass after it, in one pass over what
survived. The thresholds are never touched, an explicit ``gc.collect()`` still runs, and a
caller that had switched collection off finds it off. The switch is the interpreter's: while a
step runs, other threads run without automatic collection too.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, TypeVar

Method = TypeVar("Method", bound=Callable[..., Any])


def paused_collection(method: Method) -> Method:
    """Runs ``method`` with automatic garbage collection off, restoring it afterwards."""

    @functools.wraps(method)
    def paused(*args: Any, **kwargs: Any) -> Any:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return method(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused  # type: ignore[return-value]
