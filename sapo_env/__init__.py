"""sapo-env: SAPO (Swarm sAmpling Policy Optimization, arXiv 2509.08721) as a PettingZoo env.

    >>> import sapo_env
    >>> env = sapo_env.parallel_env(n=8)          # the paper's defaults
    >>> observations, infos = env.reset(seed=0)

This package is the environment. Running a swarm of agents in it (the act -> step -> learn
loop, callbacks, checkpoints, asynchronous rounds, TensorBoard, metrics of a run) is
``sapo_env.runtime``; scoring answers is ``sapo_env.scoring``; what the env does against
hostile packets is ``sapo_env.defenses``.
"""

from __future__ import annotations

from sapo_env.config import PAPER_TASKS, SwarmConfig, TaskSpec
from sapo_env.swarm import SwarmEnv, env, parallel_env, raw_env
from sapo_env.types import make_observation

__version__ = "0.7.0"

__all__ = [
    "PAPER_TASKS",
    "SwarmConfig",
    "SwarmEnv",
    "TaskSpec",
    "env",
    "make_observation",
    "parallel_env",
    "raw_env",
]


def _register() -> None:
    """Make the env available as ``pettingzoo.make("parallel", "sapo/Swarm-v0")``."""
    import pettingzoo

    if not hasattr(pettingzoo, "register"):  # the registry arrived in PettingZoo 1.26
        return
    from pettingzoo.env_registry.registration import aec_registry, parallel_registry

    if "sapo/Swarm-v0" not in parallel_registry:
        pettingzoo.register("parallel", "sapo/Swarm-v0", entry_point="sapo_env.swarm:parallel_env")
    if "sapo/Swarm-v0" not in aec_registry:
        pettingzoo.register("aec", "sapo/Swarm-v0", entry_point="sapo_env.swarm:env")


_register()
