"""``AgentWrapper``: an agent that plays through another one (``inner``) and changes some of
what it does: it learns through ``inner`` and its checkpoint state is ``inner``'s, so a
wrapper whose own behaviour is a function of its seed and the round needs no state of its own
(``agents.hostile.adversarial``, ``agents.wrappers.churning``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sapo_env.types import Group


class AgentWrapper:
    """Holds ``inner`` (any agent with ``act`` and ``learn``); subclasses override ``act``."""

    def __init__(self, inner: Any):
        if not (callable(getattr(inner, "act", None)) and callable(getattr(inner, "learn", None))):
            raise ValueError(f"inner must be an agent with act and learn, got {inner!r}")
        self.inner = inner

    def learn(self, batch: Sequence[Group]) -> Any:
        return self.inner.learn(batch)

    def state_dict(self) -> dict[str, Any]:
        """The inner node's state."""
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or set(state) != {"inner"}:
            raise ValueError(f"{type(self).__name__} state must be {{'inner': the inner node's "
                             "state}")
        self.inner.load_state_dict(state["inner"])
