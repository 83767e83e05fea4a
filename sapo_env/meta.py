"""Meta environments, under the env package's name: ``sapo_env.meta.parallel_env(...)`` and
``sapo_env.meta.FocalRatioEnv(...)`` (learn a node's I:J ratio with reinforcement learning).

An alias of ``experiments.meta``, which holds the code and its documentation: the meta envs run
agents (the learners inside the swarm, the ratio policies), so they belong to the experiments
layer; this module is the one place where ``sapo_env`` reaches into it, for discoverability.
``import sapo_env`` does not import it (nor agents, experiments or torch); importing
``sapo_env.meta`` imports ``experiments.meta`` and, through it, ``agents``.

Example::

    import sapo_env.meta
    env = sapo_env.meta.parallel_env(n=8, reward="swarm_mean")
"""

from experiments.meta import (
    DEFAULT_MAX_ROUNDS,
    FocalRatioEnv,
    MetaConfig,
    MetaSwarmEnv,
    env,
    parallel_env,
    raw_env,
)

__all__ = ["DEFAULT_MAX_ROUNDS", "FocalRatioEnv", "MetaConfig", "MetaSwarmEnv", "env",
           "parallel_env", "raw_env"]
