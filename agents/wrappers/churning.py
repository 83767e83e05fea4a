"""A node that comes and goes: ``ChurningAgent(inner, offline_probability, leave_round, seed)``
sits a round out with a given probability and leaves the swarm at a given round, acting
through ``inner`` (any agent) the rest of the time. The env's churn semantics are in
``sapo_env.churn``; late joiners are a config option (``SwarmConfig.join_rounds``), not an
agent's choice.

Whether a node is offline in a round is drawn from ``seed`` and the round alone, so a run is
reproducible and a checkpoint needs only the inner node's state.

A node in a Ray actor (``agents.wrappers.remote``) churns inside its actor: the factory handed
to ``remote_swarm`` is ``partial(churning, factory, ...)``, so the wrapper is built around the
node where it runs and its markers travel back as its actions. (A ``ChurningAgent`` around a
remote handle would be called node by node in the driver, losing the handle's concurrency and
an actor's packing.)

Example::

    >>> import sapo_env.runtime
    >>> from agents import DemonstratorAgent
    >>> from agents.wrappers.churning import ChurningAgent
    >>> env = sapo_env.parallel_env(n=3, max_rounds=4)
    >>> nodes = [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1),
    ...          ChurningAgent(DemonstratorAgent(seed=2), leave_round=2)]
    >>> history = sapo_env.runtime.run(env, nodes, seed=0, progress=False)
    >>> history.rewards[:, 2].round(2).tolist()      # node_2 played rounds 0 and 1
    [1.0, 1.0, nan, nan]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agents.wrappers.wrapper import AgentWrapper
from sapo_env.churn import LEAVE, OFFLINE
from sapo_env.types import Action, Observation


class ChurningAgent(AgentWrapper):
    """``inner``, offline with probability ``offline_probability`` each round, gone from round
    ``leave_round`` on (None: it never leaves)."""

    def __init__(self, inner: Any, offline_probability: float = 0.0,
                 leave_round: int | None = None, seed: int | np.random.SeedSequence = 0):
        super().__init__(inner)
        if not 0.0 <= offline_probability < 1.0:
            raise ValueError(f"offline_probability must be in [0, 1), got {offline_probability!r}")
        if leave_round is not None and (isinstance(leave_round, bool)
                                        or not isinstance(leave_round, int) or leave_round < 0):
            raise ValueError(f"leave_round must be None or an int >= 0, got {leave_round!r}")
        self.offline_probability = float(offline_probability)
        self.leave_round = leave_round
        self._seed = seed if isinstance(seed, np.random.SeedSequence) \
            else np.random.SeedSequence(seed)

    def offline_in(self, round_: int) -> bool:
        """Whether the node sits round ``round_`` out (a function of the seed and the round)."""
        if self.offline_probability == 0.0:
            return False
        rng = np.random.default_rng(np.random.SeedSequence(
            self._seed.entropy, spawn_key=(*self._seed.spawn_key, int(round_))))
        return bool(rng.random() < self.offline_probability)

    def act(self, observation: Observation) -> Action | Mapping[str, bool] | None:
        round_ = int(observation["round"])
        if self.leave_round is not None and round_ >= self.leave_round:
            return LEAVE
        if self.offline_in(round_):
            return OFFLINE
        return self.inner.act(observation)


def churning(factory: Callable[[], Any], offline_probability: float = 0.0,
             leave_round: int | None = None, seed: int | np.random.SeedSequence = 0
             ) -> ChurningAgent:
    """``ChurningAgent(factory(), ...)``: the churning node built where it is called, for a
    factory of remote nodes (``partial(churning, factory, ...)``, see the module docstring)."""
    return ChurningAgent(factory(), offline_probability, leave_round, seed)
