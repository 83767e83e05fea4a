"""Meta environments: learn a node's I:J ratio with reinforcement learning.

A SAPO node decides each round how many of its training groups to take from the swarm (J)
rather than answer itself. These environments make that choice the action of an RL agent,
with a real swarm of learners (simulated by default) playing inside:

- ``parallel_env(n=8, ...)``: a PettingZoo ``ParallelEnv`` in which every node learns its J
  (``experiments.meta.parallel``); train one shared policy with SuperSuit and
  stable-baselines3 (``examples/train_meta_agent.py``).
- ``FocalRatioEnv(n=8, focal="node_0", others=...)``: a Gymnasium ``Env`` in which one node
  learns its J while the others follow given ratio policies (``experiments.meta.focal``).

Both share the inner swarm and its options (``experiments.meta.inner``: ``MetaConfig``, the
episode length ``DEFAULT_MAX_ROUNDS``, the reward modes). ``sapo_env.meta`` re-exports this
module for users who start from the env package.
"""

from experiments.meta.focal import FocalRatioEnv
from experiments.meta.inner import DEFAULT_MAX_ROUNDS, REWARDS, InnerSwarm, MetaConfig
from experiments.meta.parallel import MetaSwarmEnv, env, parallel_env, raw_env

__all__ = ["DEFAULT_MAX_ROUNDS", "REWARDS", "FocalRatioEnv", "InnerSwarm", "MetaConfig",
           "MetaSwarmEnv", "env", "parallel_env", "raw_env"]
