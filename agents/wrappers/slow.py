"""A slower machine: ``SlowAgent(inner, act_seconds, learn_seconds)`` acts and learns through
``inner`` (any agent) but takes at least ``act_seconds`` to act and ``learn_seconds`` to learn,
sleeping for what ``inner`` did not use. For experiments on nodes of different speeds
(asynchronous rounds: ``sapo_env.runtime.asynchronous``), in Ray actors (``agents.wrappers.remote``)
where the sleep costs no CPU. What it returns is ``inner``'s, unchanged: only the time differs.

Example::

    >>> from agents import DemonstratorAgent
    >>> from agents.wrappers.slow import SlowAgent
    >>> node = SlowAgent(DemonstratorAgent(seed=0), act_seconds=0.3)  # acts in >= 0.3 s
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agents.wrappers.wrapper import AgentWrapper
from sapo_env.types import Action, Group, Observation


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


class SlowAgent(AgentWrapper):
    """``inner``, taking at least ``act_seconds`` per ``act`` and ``learn_seconds`` per
    ``learn``."""

    def __init__(self, inner: Any, act_seconds: float = 0.0, learn_seconds: float = 0.0):
        super().__init__(inner)
        self.act_seconds = _seconds(act_seconds, "act_seconds")
        self.learn_seconds = _seconds(learn_seconds, "learn_seconds")

    def act(self, observation: Observation) -> Action:
        return _taking(self.act_seconds, self.inner.act, observation)

    def learn(self, batch: Sequence[Group]) -> Any:
        return _taking(self.learn_seconds, self.inner.learn, batch)


def _taking(seconds: float, call: Any, argument: Any) -> Any:
    """``call(argument)``, returned no sooner than ``seconds`` after it began."""
    end = time.monotonic() + seconds
    result = call(argument)
    time.sleep(max(0.0, end - time.monotonic()))
    return result
