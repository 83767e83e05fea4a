"""Meta environments: learn a node's I:J ratio with reinforcement learning.

A SAPO node decides each round how many of its training groups to take from the swarm (J)
rather than answer itself. These environments make that choice the action of an RL agent,
with a real swarm of learners (simulated by default) playing inside:

- ``parallel_env(n=8, ...)``: a PettingZoo ``ParallelEnv`` in which every node learns its J
  (``sapo_experiments.meta.parallel``); train one shared policy with SuperSuit and
  stable-baselines3 (``examples/train_meta_agent.py``).
- ``FocalRatioEnv(n=8, focal="node_0", others=...)``: a Gymnasium ``Env`` in which one node
  learns its J while the others follow given ratio policies (``sapo_experiments.meta.focal``).

Both share the inner swarm and its options (``sapo_experiments.meta.inner``: ``MetaConfig``, the
episode length ``DEFAULT_MAX_ROUNDS``, the reward modes). They live with the harnesses, not in
``sapo_env``, because their inner swarm is built of agents.
"""

from sapo_experiments.meta.focal import FocalRatioEnv
from sapo_experiments.meta.inner import DEFAULT_MAX_ROUNDS, REWARDS, InnerSwarm, MetaConfig
from sapo_experiments.meta.parallel import MetaSwarmEnv, env, parallel_env, raw_env

__all__ = ["DEFAULT_MAX_ROUNDS", "REWARDS", "FocalRatioEnv", "InnerSwarm", "MetaConfig",
           "MetaSwarmEnv", "env", "parallel_env", "raw_env"]
