"""The meta environment as a PettingZoo ``ParallelEnv``: every node learns its own J.

Each node of a SAPO swarm is a meta agent whose only action is the number of external groups J
of its next round, ``Discrete(train_budget + 1)``; it observes ``RatioFeatures`` (a ``Box`` of
``len(FEATURE_NAMES)`` floats, ``agents.ratio.features``). Inside, the swarm's learners
(simulated by default) answer, share and learn as in ``sapo_env``: one meta step plays one
inner round (``sapo_env.runtime.runner.play_round``), with each meta action as that node's
``num_external`` (see ``sapo_experiments.meta.inner`` for the timing of J, the seeding and
``DEFAULT_MAX_ROUNDS``).

Arguments (of ``parallel_env``, ``raw_env`` and ``env``):
    n: number of nodes (default 8).
    learner: agent factory of the inner nodes, ``factory(names, num_external, seed)``
        (``sapo_experiments.learners``; default ``simulated_learners``), rebuilt at every reset.
    reward: ``"own"`` (a node's round reward) or ``"swarm_mean"`` (cooperative: every node
        gets the swarm's mean), each minus ``generation_cost`` x completions generated.
    generation_cost: cost per completion generated (default 0).
    max_rounds: episode length in rounds (default ``DEFAULT_MAX_ROUNDS`` = 200).
    feature_window: ``RatioFeatures.window`` of the observations (default 10).
    **overrides: any other ``SwarmConfig`` field of the inner swarm.

Rewards are the meta rewards; ``infos[node]`` is the node's inner info of the round
(``sapo_env.swarm``) plus ``round_reward``, its unshaped reward. Every node plays to the end:
all are truncated together after ``max_rounds`` steps.

Training with parameter sharing (one policy for all nodes; SuperSuit)::

    import supersuit as ss
    from stable_baselines3 import PPO
    from sapo_experiments import meta

    venv = ss.pettingzoo_env_to_vec_env_v1(meta.parallel_env(n=8))
    venv = ss.concat_vec_envs_v1(venv, 1, num_cpus=0, base_class="stable_baselines3")
    venv.venv.reset(seed=0)  # PPO(seed=...) fails: SuperSuit's vec env has no seed()
    model = PPO("MlpPolicy", venv).learn(100_000)

``examples/train_meta_agent.py`` does this and evaluates the result.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pettingzoo
from pettingzoo import ParallelEnv
from pettingzoo.utils import parallel_to_aec, wrappers

from agents.ratio.features import feature_space
from sapo_experiments.learners import AgentFactory, simulated_learners
from sapo_experiments.meta.inner import DEFAULT_MAX_ROUNDS, InnerSwarm, MetaConfig, RewardMode


class MetaSwarmEnv(ParallelEnv):
    """Every node of a SAPO swarm chooses its J; build it with ``parallel_env``."""

    metadata = {"name": "sapo_meta_ratio_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, config: MetaConfig | None = None):
        self.config = config if config is not None else MetaConfig()
        self.render_mode = None
        self.inner = InnerSwarm(self.config)  #: the swarm inside: its env, learners, observations
        self.possible_agents = list(self.inner.names)
        self.agents: list[str] = []
        # one space object for all nodes: PettingZoo checks identity, SuperSuit equality
        self._observation_space = feature_space()
        self._action_space = gymnasium.spaces.Discrete(self.config.swarm.train_budget + 1)

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        self._check_agent(agent)
        return self._observation_space

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        self._check_agent(agent)
        return self._action_space

    def _check_agent(self, agent: str) -> None:
        if agent not in self.possible_agents:
            raise KeyError(f"unknown node {agent!r}; nodes are {self.possible_agents[0]}.."
                           f"{self.possible_agents[-1]}")

    def reset(self, seed: int | None = None, options: dict | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """A new episode with fresh learners (see ``sapo_experiments.meta.inner`` for seeding).
        ``options`` is accepted for API compatibility; there are none."""
        self.inner.reset(seed)
        self.agents = list(self.possible_agents)
        return {a: self.inner.features(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        """One inner round with each live node's action as the J of its next round."""
        if not self.agents:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"actions must give a J for every live node; missing {missing}")
        record, rewards = self.inner.step({a: actions[a] for a in self.agents})
        finished = not self.inner.live
        observations = {a: self.inner.features(a) for a in self.agents}
        infos = {a: self.inner.info(record, a) for a in self.agents}
        terminations = {a: False for a in self.agents}
        truncations = {a: finished for a in self.agents}
        if finished:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        """Nothing to release."""


def parallel_env(n: int | None = 8, *, learner: AgentFactory = simulated_learners,
                 reward: RewardMode = "own", generation_cost: float = 0.0,
                 max_rounds: int = DEFAULT_MAX_ROUNDS, **overrides: Any) -> MetaSwarmEnv:
    """The meta environment as a PettingZoo ``ParallelEnv`` (see the module docstring)."""
    return MetaSwarmEnv(MetaConfig.build(n, learner=learner, reward=reward,
                                         generation_cost=generation_cost,
                                         max_rounds=max_rounds, **overrides))


def raw_env(n: int | None = 8, **kwargs: Any) -> pettingzoo.AECEnv:
    """The meta environment as an AEC env (``parallel_to_aec``)."""
    return parallel_to_aec(parallel_env(n, **kwargs))


def env(n: int | None = 8, **kwargs: Any) -> pettingzoo.AECEnv:
    """``raw_env`` with PettingZoo's order-enforcing wrapper."""
    return wrappers.OrderEnforcingWrapper(raw_env(n, **kwargs))
