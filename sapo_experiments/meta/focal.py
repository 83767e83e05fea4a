"""The meta environment as a Gymnasium ``Env``: one focal node learns its J, the others follow
given ratio policies.

The focal node is the single agent: it observes its ``RatioFeatures`` (a ``Box``) and chooses
the J of its next round (``Discrete(train_budget + 1)``); every other node's J comes from a
ratio policy (``agents.ratio``: ``choose(observation)`` before each round, ``update(reward,
info)`` after it, as ``sapo_env.runtime.run`` calls them). One step plays one inner round; the
episode is truncated after ``max_rounds`` steps. This is the single-agent view of
``sapo_experiments.meta.parallel``, built on the same ``InnerSwarm``: a best response to a fixed
population rather than a population learning together.

Arguments (``FocalRatioEnv``):
    n: number of nodes (default 8).
    focal: the learning node (default ``"node_0"``).
    others: the other nodes' ratio policies, built afresh at every reset: ``None`` for
        ``FixedRatio(train_budget // 2)`` each (the paper's 4/4), a factory
        ``factory(node) -> RatioPolicy`` called for each other node, or a mapping
        node -> policy naming every other node (each deep-copied at every reset, so every
        episode starts from the policy as given).
    learner, reward, generation_cost, max_rounds, feature_window, **overrides: as for
        ``sapo_experiments.meta.parallel_env``; the reward is the focal node's.

Example::

    from stable_baselines3 import PPO
    from agents.ratio.rules import FixedRatio
    from sapo_experiments.meta import FocalRatioEnv

    env = FocalRatioEnv(n=8, others=lambda node: FixedRatio(2))   # the rest play 6/2
    model = PPO("MlpPolicy", env).learn(20_000)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import numpy as np

from agents.ratio.features import feature_space
from agents.ratio.rules import FixedRatio
from sapo_env.runtime import RatioPolicy
from sapo_experiments.learners import AgentFactory, simulated_learners
from sapo_experiments.meta.inner import DEFAULT_MAX_ROUNDS, InnerSwarm, MetaConfig, RewardMode

PolicyFactory = Callable[[str], RatioPolicy]


class FocalRatioEnv(gymnasium.Env):
    """One node learns its J among nodes that follow ratio policies (module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, n: int | None = 8, focal: str = "node_0",
                 others: PolicyFactory | Mapping[str, RatioPolicy] | None = None, *,
                 learner: AgentFactory = simulated_learners, reward: RewardMode = "own",
                 generation_cost: float = 0.0, max_rounds: int = DEFAULT_MAX_ROUNDS,
                 **overrides: Any):
        self.config = MetaConfig.build(n, learner=learner, reward=reward,
                                       generation_cost=generation_cost, max_rounds=max_rounds,
                                       **overrides)
        self.inner = InnerSwarm(self.config)  #: the swarm inside: its env, learners, observations
        if focal not in self.inner.names:
            raise ValueError(f"focal must be one of the nodes {list(self.inner.names)}, "
                             f"got {focal!r}")
        self.focal = focal
        self.others = [a for a in self.inner.names if a != focal]
        if isinstance(others, Mapping):
            if set(others) != set(self.others):
                raise ValueError(
                    f"others: a mapping must name every node but the focal one "
                    f"{self.others}; missing {sorted(set(self.others) - set(others))}, "
                    f"unknown {sorted(set(others) - set(self.others), key=str)}")
            bad = sorted(a for a, p in others.items() if not isinstance(p, RatioPolicy))
            if bad:
                raise ValueError(f"others: the policies of {bad} need choose(observation) and "
                                 "update(reward, info) (sapo_env.runtime.runner.RatioPolicy)")
        elif others is not None and not callable(others):
            raise ValueError(f"others must be None, a factory factory(node) -> RatioPolicy "
                             f"or a mapping node -> RatioPolicy, got {others!r}")
        self._others_spec = others
        self.policies: dict[str, RatioPolicy] = {}
        self.observation_space = feature_space()
        self.action_space = gymnasium.spaces.Discrete(self.config.swarm.train_budget + 1)

    def _build_policies(self) -> dict[str, RatioPolicy]:
        spec = self._others_spec
        if spec is None:
            half = self.config.swarm.train_budget // 2
            return {a: FixedRatio(half) for a in self.others}
        if isinstance(spec, Mapping):
            return {a: copy.deepcopy(spec[a]) for a in self.others}
        policies = {a: spec(a) for a in self.others}
        bad = sorted(a for a, p in policies.items() if not isinstance(p, RatioPolicy))
        if bad:
            raise ValueError(f"others: the factory built policies for {bad} without "
                             "choose(observation) and update(reward, info)")
        return policies

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict]:
        """A new episode: fresh learners, fresh policies for the other nodes (seeding as in
        ``sapo_experiments.meta.inner``). ``options`` is accepted for API compatibility."""
        super().reset(seed=seed)
        self.inner.reset(seed)
        self.policies = self._build_policies()
        return self.inner.features(self.focal), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """One inner round with ``action`` as the focal node's J for its next round."""
        if not self.inner.live:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        observations = self.inner.observations
        chosen = {a: self.policies[a].choose(observations[a]) for a in self.others}
        chosen[self.focal] = action
        record, rewards = self.inner.step(chosen)
        for a in self.others:
            self.policies[a].update(record.rewards[a], record.infos[a])
        truncated = not self.inner.live
        return (self.inner.features(self.focal), float(rewards[self.focal]), False, truncated,
                self.inner.info(record, self.focal))
