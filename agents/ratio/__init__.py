"""Ratio policies: how many external groups (J) a node takes, chosen round by round.

A ratio policy has ``choose(observation) -> J`` (the J of the node's next round) and
``update(reward, info)`` (the outcome of the round just played; ``info["num_external"]`` is
the J that was in force): ``sapo_env.runtime.RatioPolicy``. ``sapo_env.runtime.run(env, agents,
ratio_policies={node: policy})`` applies it to any agent, simulated or language model.

- ``rules``: ``FixedRatio`` (the paper's fixed I/J), ``ScheduledRatio`` (J by round),
  ``PoolQuality``, ``LearningProgress``.
- ``bandits``: ``DiscountedUCB``, ``EXP3``, ``ThompsonSampling`` over J.
- ``contextual``: ``LinUCBRatio``, a contextual bandit over J that reads the node's situation
  (its reward, the pool's size and reward, ...), not only its reward stream.
- ``features`` and ``sb3``: ``RatioFeatures`` (what a learned policy observes, the meta envs'
  observation) and ``SB3Ratio`` (a trained stable-baselines3 policy; SB3 is imported only
  when a model is loaded).
- ``registry``: every policy by label, registered where it is defined (``ratio_policy``);
  ``sapo-env bench-ratio`` and the docs read it.
"""

from agents.ratio.bandits import EXP3, DiscountedUCB, ThompsonSampling
from agents.ratio.contextual import LinUCBRatio
from agents.ratio.features import RatioFeatures
from agents.ratio.rules import FixedRatio, LearningProgress, PoolQuality, ScheduledRatio
from agents.ratio.sb3 import SB3Ratio

__all__ = ["EXP3", "DiscountedUCB", "FixedRatio", "LearningProgress", "LinUCBRatio",
           "PoolQuality", "RatioFeatures", "SB3Ratio", "ScheduledRatio", "ThompsonSampling"]
